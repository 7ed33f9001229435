from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_data import (
    AGENTS,
    CHECKPOINT,
    EXPERIMENT,
    EXPERIMENT_DONE,
    JOB_QUEUED,
    JOBS,
    ME,
    METRICS,
    POOLS,
    TRIALS,
    USERS,
)
from cli_result import Result, table_rows
from fake_master import FakeMaster, Reply, Request, closed_port, log_row, ndjson

from det_hub.cli import experiment as experiment_cli
from det_hub.cli.main import main
from det_hub.client import MAX_CONTEXT_BYTES
from det_hub.console.render import fmt_time

Det = Callable[..., Result]
LIST = {"experiments": [EXPERIMENT, EXPERIMENT_DONE], "pagination": {"offset": 0, "limit": 100, "total": 2}}



def test_help_lists_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("experiment", "trial", "checkpoint", "agent", "slot", "job", "resource-pool",
                 "user", "master", "up"):
        assert verb in out
    assert main(["experiment", "--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("create", "list", "describe", "list-trials", "pause", "activate", "kill",
                 "archive", "unarchive"):
        assert verb in out


def test_usage_error_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "describe", "not-a-number"]) == 2
    assert "invalid int value" in capsys.readouterr().err


# -- experiments -----------------------------------------------------------------------------


def test_experiment_list_json_is_the_answer(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/me", ME)
    fake_master.json("GET", "/experiments", LIST)

    result = det("experiment", "list", "--json")

    assert result.code == 0 and json.loads(result.out) == LIST
    # Default: my own experiments, without archived ones.
    query = fake_master.calls("GET", "/experiments")[0].query
    assert query["owner"] == "admin" and query["archived"] == "false"


def test_experiment_list_all_and_archived(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments", LIST)

    result = det("e", "list", "--all", "--archived")

    assert result.code == 0
    query = fake_master.calls("GET", "/experiments")[0].query
    assert "owner" not in query and "archived" not in query
    assert fake_master.calls("GET", "/me") == []
    rows = table_rows(result.out)
    assert rows[0] == ["ID", "Owner", "Name", "State", "Progress", "Trials", "Pool", "Started",
                       "Duration", "Archived"]
    assert rows[1][:7] == ["3", "admin", "mnist-const", "ACTIVE", "25%", "2", "default"]
    assert rows[2][:7] == ["2", "ann", "mnist-old", "COMPLETED", "100%", "2", "default"]
    assert rows[2][7] == fmt_time("2026-11-22T10:00:00Z") and rows[2][8:] == ["1h 02m", "yes"]


def test_experiment_list_says_when_there_is_more(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments", {**LIST, "pagination": {"offset": 0, "limit": 2, "total": 5}})
    result = det("e", "list", "--all", "--limit", "2")
    assert "Showing 2 of 5" in result.err and "--offset 2" in result.err


SINGLE_SEARCH = {"name": "single", "metric": "validation_loss", "smaller_is_better": True,
                 "progress": 0.5, "trials_created": 2, "shutdown": False, "waiting_trials": [],
                 "rungs": None}
ASHA_SEARCH = {**SINGLE_SEARCH, "name": "adaptive_asha", "rungs": {
    "name": "adaptive_asha", "divisor": 4, "stop_once": True, "max_length": 1000, "brackets": [{
        "index": 0, "num_rungs": 2, "max_trials": 2, "max_concurrent_trials": 2,
        "trials_created": 2, "trials_invalid": 0, "rungs": [
            {"index": 0, "length": 250, "reported": 2, "best_metric": 0.05, "promoted": 1,
             "trial_ids": [8, 7], "results": [], "training": []},
            {"index": 1, "length": 1000, "reported": 1, "best_metric": 0.04, "promoted": 0,
             "trial_ids": [8], "results": [], "training": [8]}]}]}}


def test_experiment_describe(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3", {"experiment": EXPERIMENT})
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})
    fake_master.json("GET", "/experiments/3/searcher", {"searcher": SINGLE_SEARCH})

    result = det("experiment", "describe", "3")

    assert result.code == 0
    assert "mnist-const" in result.out and "validation_loss (smaller is better)" in result.out
    assert "Searcher:" in result.out and "single" in result.out
    trials_part = result.out.split("Trials:\n")[1].split("\n\n")[0]
    rows = table_rows(trials_part)
    assert rows[0] == ["ID", "State", "Run state", "Steps", "Progress", "Restarts", "Metric",
                       "Hyperparameters", "Checkpoint"]
    assert rows[1] == ["7", "ACTIVE", "RUNNING", "500", "50%", "0", "0.1", "lr=0.1",
                       "5b0d6c1e-aaaa-bbbb-cccc-000000000001"]
    assert rows[2] == ["8", "COMPLETED", "-", "1000", "100%", "1", "0.05", "lr=0.01", "-"]
    assert "Best validation_loss: 0.05 (trial 8, lr=0.01)" in result.out


def test_experiment_describe_json(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3", {"experiment": EXPERIMENT})
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})
    fake_master.json("GET", "/experiments/3/searcher", {"searcher": SINGLE_SEARCH})
    result = det("experiment", "describe", "3", "--json")
    assert json.loads(result.out) == {"experiment": EXPERIMENT, "trials": TRIALS,
                                      "searcher": SINGLE_SEARCH}


def test_experiment_describe_shows_the_rung_table(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3", {"experiment": EXPERIMENT})
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})
    fake_master.json("GET", "/experiments/3/searcher", {"searcher": ASHA_SEARCH})
    out = det("experiment", "describe", "3").out
    rows = table_rows(out.split("Rungs:\n")[1])
    assert rows[0] == ["Bracket", "Rung", "Length", "Reported", "Best", "Continued", "Training",
                       "Trials (best first)"]
    assert rows[1] == ["0", "0", "250", "2", "0.05", "1", "0", "8, 7"]
    assert rows[2] == ["0", "1", "1000", "1", "0.04", "0", "1", "8"]


def test_best_metric_larger_is_better(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3", {"experiment": {**EXPERIMENT, "smaller_is_better": False}})
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})
    fake_master.json("GET", "/experiments/3/searcher", {"searcher": SINGLE_SEARCH})
    assert "Best validation_loss: 0.1 (trial 7" in det("e", "describe", "3").out


def test_list_trials(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})
    assert json.loads(det("e", "list-trials", "3", "--json").out) == {"trials": TRIALS}
    rows = table_rows(det("e", "list-trials", "3").out)
    assert [row[0] for row in rows] == ["ID", "7", "8"]


@pytest.mark.parametrize("action", ["pause", "activate", "kill", "archive", "unarchive"])
def test_experiment_actions(fake_master: FakeMaster, det: Det, action: str) -> None:
    answer = {"experiment": {**EXPERIMENT, "state": "PAUSED"}}
    fake_master.json("POST", f"/experiments/3/{action}", answer)

    result = det("experiment", action, "3")

    assert result.code == 0 and result.out.strip() == "Experiment 3: PAUSED"
    assert len(fake_master.calls("POST", f"/experiments/3/{action}")) == 1
    assert json.loads(det("experiment", action, "3", "--json").out) == answer


# -- create and follow ----------------------------------------------------------------------


def _context(tmp_path: Path) -> tuple[Path, Path]:
    config = tmp_path / "const.yaml"
    config.write_text("name: mnist-const\nentrypoint: model_def:MNistTrial\n")
    context = tmp_path / "model_def"
    context.mkdir()
    (context / "model_def.py").write_text("class MNistTrial: ...\n")
    return config, context


def test_experiment_create(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    config, context = _context(tmp_path)

    result = det("experiment", "create", str(config), str(context), "--paused", "--name", "renamed")

    assert result.code == 0 and result.out.strip() == "Created experiment 3"
    body = fake_master.calls("POST", "/experiments")[0].json()
    assert body["activate"] is False
    assert "name: renamed" in body["config"] and "entrypoint: model_def:MNistTrial" in body["config"]
    assert body["context"]
    assert "Uploading" in result.err  # the tqdm bar goes to stderr


def _follow_routes(fake_master: FakeMaster, final_state: str) -> list[dict[str, Any]]:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    # The trial appears on the second look, as when the searcher has not created it yet.
    fake_master.sequence("GET", "/experiments/3/trials", [{"trials": []}, {"trials": TRIALS}])
    fake_master.sequence("GET", "/experiments/3", [
        {"experiment": EXPERIMENT},
        {"experiment": {**EXPERIMENT, "state": final_state}},
    ])
    fake_master.json("GET", "/trials/7", {"trial": {**TRIALS[0], "state": "COMPLETED"}})
    rows = [log_row(1, "starting"), log_row(2, "step 100 loss 0.5", rank=1), log_row(3, "done", rank=None)]

    def logs(request: Request) -> Reply:
        after = int(request.query["after_id"])
        return Reply(200, chunks=[ndjson([r for r in rows if r["id"] > after])],
                     content_type="application/x-ndjson")

    fake_master.route("GET", "/trials/7/logs", logs)
    return rows


@pytest.mark.parametrize(("final_state", "code"), [("COMPLETED", 0), ("ERROR", 1), ("CANCELED", 1)])
def test_experiment_create_follow(
    fake_master: FakeMaster, det: Det, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    final_state: str, code: int,
) -> None:
    monkeypatch.setattr(experiment_cli, "TRIAL_POLL_SECONDS", 0.01)
    _follow_routes(fake_master, final_state)
    config, context = _context(tmp_path)

    result = det("experiment", "create", str(config), str(context), "-f")

    assert result.code == code
    assert result.out.splitlines() == [
        "Created experiment 3",
        "[2026-11-22T10:00:01.000000Z] [rank=0] starting",
        "[2026-11-22T10:00:02.000000Z] [rank=1] step 100 loss 0.5",
        "[2026-11-22T10:00:03.000000Z] done",
        f"Experiment 3 ended: {final_state}",
    ]
    assert "Following trial 7" in result.err


def test_follow_ctrl_c_does_not_kill(
    fake_master: FakeMaster, det: Det, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    fake_master.json("GET", "/experiments/3/trials", {"trials": TRIALS})

    def interrupted(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt  # what Ctrl-C raises in the reading thread

    monkeypatch.setattr("det_hub.client.Client.trial_logs", interrupted)
    config, context = _context(tmp_path)

    result = det("e", "create", str(config), str(context), "--follow")

    assert result.code == 130
    assert "keeps running" in result.err and "det-hub experiment kill 3" in result.err
    assert fake_master.calls("POST", "/experiments/3/kill") == []


# -- trials ---------------------------------------------------------------------------------


def test_trial_describe(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/trials/7", {"trial": TRIALS[0]})
    assert json.loads(det("trial", "describe", "7", "--json").out) == {"trial": TRIALS[0]}
    out = det("t", "describe", "7").out
    assert "lr=0.1" in out and "validation_loss=0.1 at step 400" in out and "RUNNING" in out


def test_trial_logs(fake_master: FakeMaster, det: Det) -> None:
    rows = [log_row(1, "hello"), log_row(2, "world", rank=3)]
    fake_master.route("GET", "/trials/7/logs", lambda _r: Reply(200, ndjson(rows), "application/x-ndjson"))

    text = det("trial", "logs", "7")
    as_json = det("trial", "logs", "7", "--json")

    assert text.out.splitlines() == [
        "[2026-11-22T10:00:01.000000Z] [rank=0] hello",
        "[2026-11-22T10:00:02.000000Z] [rank=3] world",
    ]
    assert [json.loads(line) for line in as_json.out.splitlines()] == rows


def test_trial_logs_follow_across_a_drop(fake_master: FakeMaster, det: Det) -> None:
    rows = [log_row(i, f"line {i}") for i in range(1, 7)]
    calls: list[int] = []

    def logs(request: Request) -> Reply:
        after = int(request.query["after_id"])
        calls.append(after)
        if len(calls) == 1:
            return Reply(200, chunks=[ndjson(rows[:3]) + b'{"id": 4, "tri'], drop=True)
        return Reply(200, chunks=[ndjson([r for r in rows if r["id"] > after])])

    fake_master.route("GET", "/trials/7/logs", logs)
    fake_master.json("GET", "/trials/7", {"trial": {**TRIALS[0], "state": "COMPLETED"}})

    result = det("t", "logs", "7", "-f")

    assert result.code == 0
    assert [line.split("] ")[-1] for line in result.out.splitlines()] == [f"line {i}" for i in range(1, 7)]
    assert calls == [0, 3, 6]  # the last is the final catch-up read without follow


def test_trial_metrics(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/trials/7/metrics", METRICS)

    assert json.loads(det("trial", "metrics", "7", "--json").out) == METRICS
    result = det("trial", "metrics", "7", "--group", "validation")

    assert fake_master.calls("GET", "/trials/7/metrics")[-1].query == {"group": "validation"}
    rows = table_rows(result.out)
    assert rows[0] == ["Group", "Steps", "Reported", "loss", "validation_loss", "accuracy"]
    assert rows[2] == ["validation", "100", fmt_time("2026-11-22T10:01:05Z"), "0.8", "0.712346"]


# -- checkpoints, cluster, users ------------------------------------------------------------


def test_checkpoints(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/3/checkpoints", {"checkpoints": [CHECKPOINT]})
    fake_master.json("GET", f"/checkpoints/{CHECKPOINT['uuid']}", {"checkpoint": CHECKPOINT})

    assert json.loads(det("checkpoint", "list", "3", "--json").out) == {"checkpoints": [CHECKPOINT]}
    assert json.loads(det("checkpoint", "describe", CHECKPOINT["uuid"], "--json").out) == {"checkpoint": CHECKPOINT}
    rows = table_rows(det("checkpoint", "list", "3").out)
    assert rows[0] == ["UUID", "Trial", "Steps", "State", "Size", "Files", "Reported"]
    assert rows[1][:6] == [CHECKPOINT["uuid"], "7", "500", "COMPLETED", "3.2 KiB", "2"]
    described = det("c", "describe", CHECKPOINT["uuid"]).out
    assert "shared_fs /root/.det_hub/checkpoints" in described and "optimizer.pt" in described


@pytest.mark.parametrize(
    ("argv", "path", "answer"),
    [
        (("agent", "list"), "/agents", AGENTS),
        (("resource-pool", "list"), "/resource_pools", POOLS),
        (("job", "list"), "/jobs", JOBS),
        (("user", "list"), "/users", USERS),
        (("user", "whoami"), "/me", ME),
    ],
)
def test_json_is_the_answer(fake_master: FakeMaster, det: Det, argv: tuple[str, ...], path: str, answer: Any) -> None:
    fake_master.json("GET", path, answer)
    result = det(*argv, "--json")
    assert result.code == 0 and json.loads(result.out) == answer


def test_cluster_tables(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/agents", AGENTS)
    fake_master.json("GET", "/resource_pools", POOLS)
    fake_master.json("GET", "/jobs", JOBS)

    agents = table_rows(det("agent", "list").out)
    assert agents[0] == ["ID", "Type", "Pool", "Enabled", "Connected", "Slots", "Used",
                         "Slot types", "Address"]
    assert agents[1] == ["local", "local", "default", "yes", "yes", "2", "1", "cpu", "127.0.0.1"]
    slots = table_rows(det("slot", "list").out)
    assert slots[0] == ["Agent", "Slot", "Type", "Device", "Enabled", "Allocation"]
    assert slots[1:] == [["local", "0", "cpu", "cpu0-3", "yes", "7.0"], ["local", "1", "cpu", "cpu4-7", "yes", "-"]]
    slot_json = json.loads(det("slot", "list", "--json").out)
    assert slot_json["slots"][0] == {"agent_id": "local", **AGENTS["agents"][0]["slots"][0]}
    pools = table_rows(det("rp", "list").out)
    assert pools[0] == ["Name", "Type", "Agents", "Slots used", "Slots total", "Scheduler",
                        "Preemption", "Default", "Description"]
    assert pools[1:] == [
        ["default", "local", "1", "1", "2", "priority", "no", "yes", "-"],
        ["gpu", "docker", "2", "0", "16", "fair_share", "yes", "no", "the A100 hosts"]]
    jobs = table_rows(det("job", "list").out)
    assert jobs[0] == ["#", "ID", "Type", "Name", "Priority", "Weight", "Submitted",
                       "Slots (acquired/needed)", "Status", "User"]
    assert jobs[1] == ["1", "exp-3", "EXPERIMENT", "mnist-const", "42", "1",
                       fmt_time("2026-11-22T10:00:00Z"), "1/1", "SCHEDULED", "admin"]
    assert jobs[2] == ["2", "exp-4", "EXPERIMENT", "resnet", "50", "2.5",
                       fmt_time("2026-11-22T10:09:00Z"), "0/2", "QUEUED", "ann"]
    # Without --resource-pool every pool's jobs are asked for.
    assert "resource_pool" not in fake_master.calls("GET", "/jobs")[0].query


def test_job_list_of_one_pool(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/jobs", {"jobs": []})

    result = det("job", "list", "--resource-pool", "gpu")

    assert result.code == 0 and table_rows(result.out)[0][:2] == ["#", "ID"]
    assert fake_master.calls("GET", "/jobs")[0].query == {"resource_pool": "gpu"}


def test_job_update_sends_the_changes_and_prints_the_new_row(fake_master: FakeMaster,
                                                             det: Det) -> None:
    moved = {**JOB_QUEUED, "queue_position": 1, "priority": 42}
    fake_master.json("PATCH", "/jobs/exp-4", {"job": moved})

    result = det("job", "update", "exp-4", "--ahead-of", "exp-3", "--weight", "0.5")

    assert result.code == 0, result.err
    assert fake_master.calls("PATCH", "/jobs/exp-4")[0].json() == {"weight": 0.5,
                                                                   "ahead_of": "exp-3"}
    rows = table_rows(result.out)
    assert rows[0][:2] == ["#", "ID"] and rows[1][:5] == ["1", "exp-4", "EXPERIMENT", "resnet",
                                                          "42"]

    # A bare experiment id is a job id too; --json prints the master's answer.
    fake_master.json("PATCH", "/jobs/4", {"job": moved})
    assert json.loads(det("j", "update", "4", "--priority", "1", "--json").out) == {"job": moved}
    assert fake_master.calls("PATCH", "/jobs/4")[0].json() == {"priority": 1}


@pytest.mark.parametrize(("argv", "message"), [
    (("--priority", "0"), "0 is not between 1 and 99"),
    (("--priority", "100"), "100 is not between 1 and 99"),
    (("--priority", "high"), "'high' is not an integer"),
    (("--weight", "0"), "0 is not a number greater than 0"),
    (("--weight", "-1.5"), "-1.5 is not a number greater than 0"),
    (("--weight", "nan"), "nan is not a number greater than 0"),
    (("--priority", "3", "--ahead-of", "exp-3"), "not allowed with argument"),
])
def test_job_update_bad_values_never_reach_the_master(
        fake_master: FakeMaster, det: Det, argv: tuple[str, ...], message: str) -> None:
    result = det("job", "update", "exp-4", *argv)

    assert result.code == 2 and message in result.err
    assert fake_master.requests == []


def test_job_update_needs_something_to_change(fake_master: FakeMaster, det: Det) -> None:
    result = det("job", "update", "exp-4")

    assert result.code == 1 and "give --priority, --weight or --ahead-of" in result.err
    assert fake_master.requests == []


def test_job_update_refused_by_the_master(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("PATCH", "/jobs/exp-4", {
        "error": "only the owner of experiment 4 or an admin can change it", "details": []}, 403)

    result = det("job", "update", "exp-4", "--priority", "10")

    assert result.code == 1 and result.out == ""
    assert "only the owner of experiment 4" in result.err


def test_agent_enable_and_disable(fake_master: FakeMaster, det: Det) -> None:
    agent = AGENTS["agents"][0]
    fake_master.json("POST", "/agents/local/disable", {"agent": {**agent, "enabled": False}})
    fake_master.json("POST", "/agents/local/enable", {"agent": agent})

    disabled = det("agent", "disable", "local")
    drained = det("agent", "disable", "local", "--drain")
    enabled = det("agent", "enable", "local", "--json")

    # Without --drain the trials there checkpoint and move; the API's own default is to drain.
    assert [c.json() for c in fake_master.calls("POST", "/agents/local/disable")] == [
        {"drain": False}, {"drain": True}]
    assert disabled.code == 0 and table_rows(disabled.out)[1][:4] == [
        "local", "local", "default", "no"]
    assert drained.code == 0
    assert enabled.code == 0 and json.loads(enabled.out) == {"agent": agent}


def test_agent_disable_help_says_what_happens_to_running_trials(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "disable", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "checkpoint" in out and "another agent" in out and "--drain" in out


def test_agent_disable_needs_an_admin(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("POST", "/agents/local/disable", {
        "error": "only an admin can enable or disable agents", "details": []}, 403)

    result = det("agent", "disable", "local")

    assert result.code == 1 and "only an admin can enable or disable agents" in result.err


def test_users(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/users", USERS)
    fake_master.json("GET", "/me", ME)
    fake_master.json("POST", "/users", {"user": {"id": 3, "username": "bob", "admin": True}, "token": "secret-tok"}, 201)

    assert table_rows(det("user", "list").out)[1:] == [["1", "admin", "yes", "-", "-"],
                                                       ["2", "ann", "no", "-", "-"]]
    created = det("user", "create", "bob", "--admin")
    assert created.code == 0 and "Token: secret-tok" in created.out and "only this once" in created.err
    assert fake_master.calls("POST", "/users")[0].json() == {"username": "bob", "admin": True}
    assert det("user", "whoami").out.startswith("You are admin (admin)")


def test_users_link_with_agent_users(fake_master: FakeMaster, det: Det) -> None:
    linked = {"agent_uid": 1001, "agent_gid": 1002, "agent_user": "ann", "agent_group": "staff"}
    fake_master.json("GET", "/users", {"users": [
        {"id": 2, "username": "ann", "admin": False, "agent_user_group": linked},
        {"id": 3, "username": "bo", "admin": False,
         "agent_user_group": {**linked, "agent_user": None, "agent_group": None}},
        {"id": 4, "username": "cy", "admin": False, "agent_user_group": None}]})
    assert table_rows(det("user", "list").out) == [
        ["ID", "Username", "Admin", "Agent user", "Agent group"],
        ["2", "ann", "no", "ann (1001)", "staff (1002)"], ["3", "bo", "no", "1001", "1002"],
        ["4", "cy", "no", "-", "-"]]

    fake_master.sequence("PATCH", "/users/ann", [
        {"user": {"id": 2, "username": "ann", "admin": False, "agent_user_group": linked}},
        {"user": {"id": 2, "username": "ann", "admin": False, "agent_user_group": None}}])
    result = det("user", "link-with-agent-user", "ann", "--agent-uid", "1001", "--agent-gid",
                 "1002", "--agent-user", "ann", "--agent-group", "staff")
    assert result.code == 0, result.err
    assert result.out.startswith("Linked ann to Unix user ann (1001), group staff (1002)")
    result = det("user", "unlink-agent-user", "ann")
    assert result.code == 0 and result.out.strip() == "Unlinked ann from their Unix account"
    assert [c.json() for c in fake_master.calls("PATCH", "/users/ann")] == [
        {"agent_user_group": linked}, {"agent_user_group": None}]

    fake_master.json("PATCH", "/users/bo", {"error": "cannot link user 'bo': agent_uid 0 is "
                     "root; tasks never run as root", "details": [
                         {"path": "agent_uid", "message": "0 is root; tasks never run as root"}]},
                     400)
    result = det("user", "link-with-agent-user", "bo", "--agent-uid", "0", "--agent-gid", "5")
    assert result.code == 1 and "agent_uid: 0 is root; tasks never run as root" in result.err
    assert fake_master.calls("PATCH", "/users/bo")[0].json() == {"agent_user_group": {
        "agent_uid": 0, "agent_gid": 5, "agent_user": None, "agent_group": None}}
    # Both ids are required.
    assert det("user", "link-with-agent-user", "bo", "--agent-uid", "7").code == 2


# -- errors ---------------------------------------------------------------------------------


def test_master_error_message_and_details(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    fake_master.json("POST", "/experiments", {
        "error": "invalid experiment config",
        "details": [{"path": "searcher.max_trials", "message": "must be >= 1"},
                    {"path": "searcher.metrc", "message": "unknown key; did you mean metric?"}],
    }, 400)
    config, context = _context(tmp_path)

    result = det("experiment", "create", str(config), str(context))

    assert result.code == 1 and result.out == ""
    assert result.err.splitlines()[-3:] == [
        "Error: invalid experiment config",
        "  searcher.max_trials: must be >= 1",
        "  searcher.metrc: unknown key; did you mean metric?",
    ]
    assert "Traceback" not in result.err


def test_not_found(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/trials/99", {"error": "trial 99 not found", "details": []}, 404)
    result = det("trial", "describe", "99")
    assert result.code == 1 and result.err.strip() == "Error: trial 99 not found"


def test_unauthorised_hint(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/users", {"error": "no or bad token", "details": []}, 401)
    result = det("user", "list")
    assert result.code == 1 and "Error: no or bad token" in result.err and "DET_HUB_TOKEN" in result.err


def test_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    code = main(["-m", url, "experiment", "list", "--all"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines()[0] == f"Error: cannot reach the master at {url} (is det-hub master running?)"


def test_master_from_env(
    fake_master: FakeMaster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_master.json("GET", "/me", ME)
    monkeypatch.setenv("DET_HUB_MASTER", fake_master.url)
    monkeypatch.setenv("DET_HUB_TOKEN", "from-env")
    assert main(["user", "whoami"]) == 0
    assert fake_master.requests[0].headers["authorization"] == "Bearer from-env"
    assert fake_master.url in capsys.readouterr().out


def test_config_file_missing(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    result = det("experiment", "create", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert result.code == 1 and result.err.strip() == f"Error: config file {tmp_path / 'nope.yaml'} not found"
    result = det("experiment", "create", str(tmp_path), str(tmp_path))
    assert result.code == 1 and "is a directory" in result.err
    assert fake_master.requests == []


def test_context_too_large(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    config, context = _context(tmp_path)
    with (context / "data.bin").open("wb") as handle:
        handle.truncate(MAX_CONTEXT_BYTES + 1)

    result = det("experiment", "create", str(config), str(context))

    assert result.code == 1 and "over the limit of 96.0 MiB" in result.err and ".detignore" in result.err
    assert fake_master.requests == []


def test_context_missing(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    config, _ = _context(tmp_path)
    result = det("experiment", "create", str(config), str(tmp_path / "nowhere"))
    assert result.code == 1 and "does not exist" in result.err


# -- master / up ----------------------------------------------------------------------------


def test_master_and_up_pass_argv_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, list[str]]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(("main", argv))
        return 0

    def fake_up(argv: list[str]) -> int:
        seen.append(("up", argv))
        return 3

    app = types.ModuleType("det_hub.service.app")
    app.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "det_hub.service.app", app)
    # `det-hub up` is the hub package's, which the master does not import.
    up = types.ModuleType("det_hub.hub.up")
    up.main = fake_up  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "det_hub.hub.up", up)

    assert main(["master", "--data-dir", "/d", "--db", "sqlite:///x", "--port", "8081", "--help"]) == 0
    assert main(["-m", "http://x", "up", "--host", "0.0.0.0"]) == 3
    assert main(["master"]) == 0

    assert seen == [
        ("main", ["--data-dir", "/d", "--db", "sqlite:///x", "--port", "8081", "--help"]),
        ("up", ["--host", "0.0.0.0"]),
        ("main", []),
    ]


def test_master_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "det_hub.service.app", None)  # import fails
    assert main(["master", "--port", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: `det-hub master` needs the det_hub master") and "Traceback" not in err


def test_create_with_overrides_merges_them_into_the_file(
        fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    config, context = _context(tmp_path)
    config.write_text("name: c\nentrypoint: model_def:T\nsearcher: {name: single, metric: loss, "
                      "max_length: {batches: 5}}\n")
    result = det("experiment", "create", str(config), str(context),
                 "--config", "searcher.max_length.batches=50", "--config", "max_restarts=0",
                 "--config", "hyperparameters.layers=[8, 8]")
    assert result.code == 0, result.err
    sent = yaml.safe_load(fake_master.calls("POST", "/experiments")[0].json()["config"])
    assert sent["searcher"]["max_length"] == {"batches": 50}
    assert sent["searcher"]["name"] == "single"  # the rest of the section is kept
    assert sent["max_restarts"] == 0 and sent["hyperparameters"]["layers"] == [8, 8]


def test_create_fork_starts_from_the_source_config(fake_master: FakeMaster, det: Det) -> None:
    fake_master.json("GET", "/experiments/2", {"experiment": EXPERIMENT_DONE})
    fake_master.json("POST", "/experiments", {"experiment": {**EXPERIMENT, "forked_from": 2}},
                     201)
    result = det("experiment", "create", "--fork", "2", "--config", "searcher.metric=acc")
    assert result.code == 0, result.err
    assert result.out.strip() == "Created experiment 3 (a fork of experiment 2)"
    body = fake_master.calls("POST", "/experiments")[0].json()
    assert body["parent_id"] == 2 and body["context"] is None  # the master reuses the parent's
    sent = yaml.safe_load(body["config"])
    assert sent["name"] == "mnist-const" and sent["searcher"] == {"name": "single",
                                                                   "metric": "acc"}


def test_create_needs_config_and_context_unless_forking(det: Det) -> None:
    result = det("experiment", "create")
    assert result.code == 1
    assert "needs CONFIG and CONTEXT (or --fork ID" in result.err


def test_continue_sends_the_overrides(fake_master: FakeMaster, det: Det, tmp_path: Path) -> None:
    fake_master.json("POST", "/experiments/2/continue", {"experiment": EXPERIMENT})
    changes = tmp_path / "more.yaml"
    changes.write_text("searcher:\n  max_length:\n    batches: 2000\nmax_restarts: 1\n")
    result = det("experiment", "continue", "2", "--config-file", str(changes),
                 "--config", "max_restarts=3")
    assert result.code == 0, result.err
    assert result.out.strip() == "Continued experiment 3: ACTIVE"
    text = fake_master.calls("POST", "/experiments/2/continue")[0].json()["config"]
    assert yaml.safe_load(text) == {"searcher": {"max_length": {"batches": 2000}},
                                    "max_restarts": 3}


@pytest.mark.parametrize(("argv", "message"), [
    (("--config", "max_restarts"), "expected KEY=VALUE"),
    (("--config", "a..b=1"), "empty part in the key"),
    (("--config", "x=[1, 2"), "the value is not YAML"),
])
def test_continue_refuses_bad_overrides_before_asking(
        fake_master: FakeMaster, det: Det, argv: tuple[str, ...], message: str) -> None:
    result = det("experiment", "continue", "2", *argv)
    assert result.code == 1 and message in result.err and "Traceback" not in result.err
    assert fake_master.calls("POST", "/experiments/2/continue") == []


def test_preview_search_prints_trials_lengths_and_rungs(det: Det, tmp_path: Path) -> None:
    config = tmp_path / "asha.yaml"
    config.write_text(yaml.safe_dump({
        "entrypoint": "model_def:T", "reproducibility": {"experiment_seed": 3},
        "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1}},
        "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 16,
                     "max_length": {"batches": 937}, "mode": "standard"}}))
    result = det("preview-search", str(config))
    assert result.code == 0, result.err
    assert result.out.startswith("Searcher adaptive_asha: 16 trials, metric loss")
    assert "Trained to (batches)" in result.out and "937" in result.out
    assert "of 14,992 for every trial at full length" in result.out
    assert "Rungs:" in result.out
    as_json = json.loads(det("preview-search", str(config), "--json").out)
    assert as_json["trials"] == 16 and as_json["full_total"] == 16 * 937
    assert sum(row["trials"] for row in as_json["lengths"]) == 16
    assert as_json["total"] == sum(r["trials"] * r["length"] for r in as_json["lengths"])
    single = det("preview-search", str(config), "--config", "searcher.name=single")
    assert single.code == 0 and "Searcher single: 1 trials" in single.out
    bad = det("preview-search", str(config), "--config", "searcher.max_trials=0")
    assert bad.code == 1 and "searcher.max_trials" in bad.err
