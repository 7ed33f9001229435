from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest
import yaml
from fake_master import FakeMaster, Reply, Request, closed_port, log_row, ndjson

from det_hub.client import (
    Agent,
    Client,
    Experiment,
    Job,
    MasterError,
    MasterUnreachable,
    ResourcePool,
    Trial,
)

EXPERIMENT = {
    "id": 3, "name": "mnist", "description": "", "owner": "admin", "state": "ACTIVE",
    "archived": False, "progress": 0.25, "created_at": "2026-11-22T10:00:00.123456Z",
    "ended_at": None, "config": {"name": "mnist", "searcher": {"name": "single"}},
    "searcher_metric": "validation_loss", "smaller_is_better": True,
    "num_trials": 1, "resource_pool": "default", "priority": 42,
}
TRIAL = {
    "id": 7, "experiment_id": 3, "request_id": "0f3c", "state": "ACTIVE", "run_state": "RUNNING",
    "hparams": {"lr": 0.1}, "seed": 123, "restarts": 0, "created_at": "2026-11-22T10:00:01Z",
    "ended_at": None, "steps_completed": 500, "progress": 0.5, "latest_checkpoint": None,
    "best_validation": {"steps_completed": 400, "metrics": {"validation_loss": 0.1}},
    "searcher_metric_value": 0.1,
}


def test_error_body_becomes_master_error(fake_master: FakeMaster) -> None:
    details = [{"path": "searcher.max_trials", "message": "must be >= 1"}]
    fake_master.json("POST", "/experiments", {"error": "invalid experiment config", "details": details}, 400)

    with pytest.raises(MasterError) as info:
        Client(fake_master.url, "t").create_experiment("searcher: {max_trials: 0}\n", None)

    assert info.value.status == 400
    assert info.value.message == "invalid experiment config"
    assert info.value.details == details
    assert info.value.detail_lines() == ["searcher.max_trials: must be >= 1"]


def test_error_without_json_body(fake_master: FakeMaster) -> None:
    fake_master.route("GET", "/experiments/9", lambda _r: Reply(502, b"<html>bad gateway</html>", "text/html"))
    with pytest.raises(MasterError) as info:
        Client(fake_master.url, "t").get_experiment(9)
    assert info.value.status == 502 and "502" in info.value.message


def test_unreachable_names_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(MasterUnreachable) as info:
        Client(url, "t", timeout=5).health()
    assert info.value.url == url
    assert url in str(info.value) and "refused" in str(info.value).lower()


def test_create_experiment_body_and_progress(fake_master: FakeMaster, tmp_path: Path) -> None:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    (tmp_path / "model_def.py").write_text("print('hi')\n")
    # Enough incompressible bytes for several upload chunks.
    (tmp_path / "weights.bin").write_bytes(os.urandom(900_000))
    seen: list[tuple[int, int]] = []

    experiment = Client(fake_master.url, "t").create_experiment(
        "name: mnist\n", tmp_path, activate=False, progress=lambda s, t: seen.append((s, t))
    )

    request = fake_master.calls("POST", "/experiments")[0]
    body = request.json()
    assert body["config"] == "name: mnist\n" and body["activate"] is False
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["context"])), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["model_def.py", "weights.bin"]
    assert request.headers["content-type"] == "application/json"
    assert int(request.headers["content-length"]) == len(request.body)
    # progress: starts at 0, grows, ends at the full body size.
    total = len(request.body)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert len(seen) > 3 and all(a[0] < b[0] for a, b in zip(seen, seen[1:], strict=False))
    assert isinstance(experiment, Experiment)
    assert experiment.id == 3 and experiment.state == "ACTIVE" and experiment.progress == 0.25
    assert experiment.created_at == dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.timezone.utc)
    assert experiment.raw == EXPERIMENT


def test_create_experiment_name_and_no_context(fake_master: FakeMaster) -> None:
    fake_master.json("POST", "/experiments", {"experiment": EXPERIMENT}, 201)
    Client(fake_master.url, "t").create_experiment("name: old\nentrypoint: train.py\n", None, name="new")
    body = fake_master.requests[0].json()
    assert body["context"] is None and body["activate"] is True
    assert body["config"] == "name: new\nentrypoint: train.py\n"


def test_list_experiments_query_and_pagination(fake_master: FakeMaster) -> None:
    answer = {"experiments": [EXPERIMENT], "pagination": {"offset": 10, "limit": 5, "total": 11}}
    fake_master.json("GET", "/experiments", answer)

    page = Client(fake_master.url, "t").list_experiments(
        state="ACTIVE", archived=False, owner="admin", limit=5, offset=10
    )

    assert fake_master.requests[0].query == {
        "state": "ACTIVE", "archived": "false", "owner": "admin", "limit": "5", "offset": "10",
    }
    assert [e.id for e in page] == [3] and page.total == 11 and page.raw == answer


def test_actions_post_to_their_paths(fake_master: FakeMaster) -> None:
    client = Client(fake_master.url, "t")
    for action in ("pause", "activate", "kill", "archive", "unarchive"):
        fake_master.json("POST", f"/experiments/3/{action}", {"experiment": {**EXPERIMENT, "state": action.upper()}})
        result = getattr(client, f"{action}_experiment")(3)
        assert result.state == action.upper()
    fake_master.json("POST", "/experiments/4/pause", {"error": "experiment 4 is COMPLETED", "details": []}, 409)
    with pytest.raises(MasterError) as info:
        client.pause_experiment(4)
    assert info.value.status == 409


def test_wait_for_experiment(fake_master: FakeMaster) -> None:
    fake_master.sequence("GET", "/experiments/3", [
        {"experiment": EXPERIMENT},
        {"experiment": {**EXPERIMENT, "state": "STOPPING_COMPLETED"}},
        {"experiment": {**EXPERIMENT, "state": "COMPLETED", "progress": 1.0}},
    ])
    result = Client(fake_master.url, "t").wait_for_experiment(3, poll=0.01)
    assert result.state == "COMPLETED" and result.is_terminal
    assert len(fake_master.calls("GET", "/experiments/3")) == 3


def test_wait_for_experiment_timeout(fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/experiments/3", {"experiment": EXPERIMENT})
    with pytest.raises(TimeoutError, match="still ACTIVE"):
        Client(fake_master.url, "t").wait_for_experiment(3, poll=0.01, timeout=0.05)


def test_trial_objects(fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/experiments/3/trials", {"trials": [TRIAL]})
    fake_master.json("GET", "/trials/7", {"trial": {**TRIAL, "state": "COMPLETED"}})
    client = Client(fake_master.url, "t")

    trials = client.list_trials(3)
    trial = client.get_trial(7)

    assert isinstance(trials[0], Trial) and trials[0].hparams == {"lr": 0.1}
    assert trials[0].best_validation == TRIAL["best_validation"] and not trials[0].is_terminal
    assert trial.is_terminal and trial.searcher_metric_value == 0.1


def test_metrics_query(fake_master: FakeMaster) -> None:
    answer = {"metrics": [
        {"group": "validation", "steps_completed": 100, "report_time": "2026-11-22T10:00:00Z",
         "metrics": {"validation_loss": 0.5}},
    ]}
    fake_master.json("GET", "/trials/7/metrics", answer)
    reports = Client(fake_master.url, "t").trial_metrics(7, group="validation", max_points=50)
    assert fake_master.requests[0].query == {"group": "validation", "max_points": "50"}
    assert reports[0].metrics == {"validation_loss": 0.5} and reports.raw == answer


def test_logs_without_follow(fake_master: FakeMaster) -> None:
    rows = [log_row(i, f"line {i}") for i in (4, 5, 6)]
    fake_master.route("GET", "/trials/7/logs", lambda _r: Reply(200, ndjson(rows), "application/x-ndjson"))

    got = list(Client(fake_master.url, "t").trial_logs(7, after_id=3))

    assert got == rows
    assert fake_master.requests[0].query == {"follow": "false", "after_id": "3"}


def _stream_server(fake_master: FakeMaster, total: int, cuts: list[int], trial_states: list[str]) -> None:
    """Serves log lines 1..total; the n-th connection is cut after line cuts[n], in the middle of
    the next line, until the cuts run out."""
    rows = [log_row(i, f"step {i}") for i in range(1, total + 1)]
    remaining_cuts = list(cuts)

    def logs(request: Request) -> Reply:
        after = int(request.query.get("after_id", "0"))
        pending = [r for r in rows if r["id"] > after]
        if remaining_cuts:
            cut = remaining_cuts.pop(0)
            sent = [r for r in pending if r["id"] <= cut]
            partial = json.dumps(rows[cut]).encode()[:25]  # half of the next line
            # Lines arrive in small pieces, as from a real stream.
            data = ndjson(sent) + partial
            chunks = [data[i : i + 40] for i in range(0, len(data), 40)]
            return Reply(200, chunks=chunks, drop=True, content_type="application/x-ndjson")
        data = ndjson(pending)
        return Reply(200, chunks=[data[i : i + 33] for i in range(0, len(data), 33)],
                     content_type="application/x-ndjson")

    fake_master.route("GET", "/trials/7/logs", logs)
    fake_master.sequence("GET", "/trials/7", [{"trial": {**TRIAL, "state": s}} for s in trial_states])


def test_follow_reconnects_after_drop_without_repeats(fake_master: FakeMaster) -> None:
    _stream_server(fake_master, total=20, cuts=[5, 12], trial_states=["COMPLETED"])

    got = list(Client(fake_master.url, "t").trial_logs(7, follow=True))

    assert [row["id"] for row in got] == list(range(1, 21))
    assert [row["message"] for row in got] == [f"step {i}\n" for i in range(1, 21)]
    follows = [r.query for r in fake_master.calls("GET", "/trials/7/logs") if r.query["follow"] == "true"]
    assert [q["after_id"] for q in follows] == ["0", "5", "12"]


def test_follow_after_id_is_honoured(fake_master: FakeMaster) -> None:
    _stream_server(fake_master, total=10, cuts=[6], trial_states=["COMPLETED"])
    got = list(Client(fake_master.url, "t").trial_logs(7, follow=True, after_id=3))
    assert [row["id"] for row in got] == [4, 5, 6, 7, 8, 9, 10]


def test_follow_clean_close_before_trial_ends_reconnects(fake_master: FakeMaster) -> None:
    # A proxy closing the stream cleanly looks like the end; the trial's state tells otherwise.
    batches = [[log_row(1, "a"), log_row(2, "b")], [log_row(3, "c")], []]

    def logs(request: Request) -> Reply:
        if request.query["follow"] == "false":
            return Reply(200, ndjson([log_row(4, "d")]), "application/x-ndjson")
        return Reply(200, chunks=[ndjson(batches.pop(0))], content_type="application/x-ndjson")

    fake_master.route("GET", "/trials/7/logs", logs)
    fake_master.sequence("GET", "/trials/7", [{"trial": TRIAL}, {"trial": {**TRIAL, "state": "COMPLETED"}}])

    got = list(Client(fake_master.url, "t").trial_logs(7, follow=True))

    assert [row["message"] for row in got] == ["a\n", "b\n", "c\n", "d\n"]
    queries = [(r.query["follow"], r.query["after_id"]) for r in fake_master.calls("GET", "/trials/7/logs")]
    assert queries == [("true", "0"), ("true", "2"), ("false", "3")]


def test_follow_quiet_stream_is_not_a_failure(fake_master: FakeMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial that prints nothing for longer than the read timeout: the client reconnects
    # from the last id, and the silence never counts against max_reconnects.
    monkeypatch.setattr("det_hub.client._client._FOLLOW_READ_TIMEOUT", 0.2)
    rows = [log_row(i, f"line {i}") for i in range(1, 5)]
    quiet_connections = [2]

    def logs(request: Request) -> Reply:
        after = int(request.query["after_id"])
        pending = ndjson([r for r in rows if r["id"] > after][:1])
        if quiet_connections[0]:
            quiet_connections[0] -= 1
            return Reply(200, chunks=[pending], pause=0.6)
        return Reply(200, chunks=[ndjson([r for r in rows if r["id"] > after])])

    fake_master.route("GET", "/trials/7/logs", logs)
    fake_master.json("GET", "/trials/7", {"trial": {**TRIAL, "state": "COMPLETED"}})

    got = list(Client(fake_master.url, "t").trial_logs(7, follow=True, max_reconnects=0))

    assert [row["id"] for row in got] == [1, 2, 3, 4]
    follows = [r.query["after_id"] for r in fake_master.calls("GET", "/trials/7/logs") if r.query["follow"] == "true"]
    assert follows == ["0", "1", "2"]


def test_follow_headers_late_is_not_a_failure(fake_master: FakeMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    # A master that answers a followed request only when the first line exists.
    monkeypatch.setattr("det_hub.client._client._FOLLOW_READ_TIMEOUT", 0.2)
    rows = [log_row(1, "late")]
    calls: list[str] = []

    def logs(request: Request) -> Reply:
        calls.append(request.query["after_id"])
        if len(calls) == 1:
            time.sleep(0.5)
        return Reply(200, chunks=[ndjson(rows)])

    fake_master.route("GET", "/trials/7/logs", logs)
    fake_master.json("GET", "/trials/7", {"trial": {**TRIAL, "state": "COMPLETED"}})

    got = list(Client(fake_master.url, "t").trial_logs(7, follow=True, max_reconnects=0))

    assert [row["message"] for row in got] == ["late\n"]
    assert calls[:2] == ["0", "0"]


def test_follow_gives_up_when_master_stays_away() -> None:
    client = Client(f"http://127.0.0.1:{closed_port()}", "t", timeout=2)
    with pytest.raises(MasterUnreachable):
        list(client.trial_logs(7, follow=True, max_reconnects=1))


def test_logs_unknown_trial(fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/trials/99/logs", {"error": "trial 99 not found", "details": []}, 404)
    with pytest.raises(MasterError, match="trial 99 not found"):
        list(Client(fake_master.url, "t").trial_logs(99, follow=True))


AGENT = {"id": "local", "type": "local", "resource_pool": "default", "enabled": True,
         "address": "127.0.0.1", "connected": False, "slots": [
             {"id": 0, "type": "cpu", "device": "cpu0-3", "allocation_id": "7.0"},
             {"id": 1, "type": "cpu", "device": "cpu4-7", "allocation_id": None}]}
JOB = {"job_id": "exp-3", "type": "EXPERIMENT", "name": "mnist", "owner": "admin",
       "resource_pool": "default", "queue_position": 2, "priority": 42, "weight": 1.5,
       "state": "SCHEDULED_PARTIALLY", "slots_requested": 4, "slots_allocated": 2,
       "allocations": 2, "preemptible": True, "submitted": "2026-11-22T10:00:00Z",
       "queued_at": "2026-11-22T10:00:01Z", "experiment_id": 3}


def test_cluster_lists(fake_master: FakeMaster) -> None:
    pools = {"resource_pools": [{
        "name": "default", "description": "CPUs", "type": "local", "agents": 1,
        "slots_total": 2, "slots_used": 1, "slot_type": "cpu", "scheduler": "fair_share",
        "preemption": True, "fitting_policy": "best", "preemption_timeout": 600,
        "default": True}]}
    users = {"users": [{"id": 1, "username": "admin", "admin": True}]}
    for path, body in (("/agents", {"agents": [AGENT]}), ("/resource_pools", pools),
                       ("/jobs", {"jobs": [JOB]}), ("/users", users)):
        fake_master.json("GET", path, body)
    fake_master.json("POST", "/users", {"user": {"id": 2, "username": "ann", "admin": False}, "token": "tok"}, 201)
    client = Client(fake_master.url, "t")

    [agent] = client.list_agents()
    assert [s.allocation_id for s in agent.slots] == ["7.0", None]
    assert [s.id for s in agent.slots] == ["0", "1"]
    assert (agent.resource_pool, agent.address, agent.connected) == ("default", "127.0.0.1", False)
    [pool] = client.list_resource_pools()
    assert (pool.slots_used, pool.scheduler, pool.preemption, pool.preemption_timeout,
            pool.default, pool.description) == (1, "fair_share", True, 600.0, True, "CPUs")
    [job] = client.list_jobs()
    assert (job.job_id, job.experiment_id, job.queue_position, job.state) == (
        "exp-3", 3, 2, "SCHEDULED_PARTIALLY")
    assert (job.slots_requested, job.slots_allocated, job.weight) == (4, 2, 1.5)
    assert job.submitted == dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.timezone.utc)
    assert "resource_pool" not in fake_master.calls("GET", "/jobs")[0].query
    assert client.list_users()[0].admin is True
    created = client.create_user("ann")
    assert created.token == "tok" and created.user.username == "ann"
    assert fake_master.calls("POST", "/users")[0].json() == {"username": "ann", "admin": False}


def test_jobs_of_a_pool_one_job_and_updates(fake_master: FakeMaster) -> None:
    moved = {**JOB, "queue_position": 1, "priority": 10}
    fake_master.json("GET", "/jobs", {"jobs": []})
    fake_master.json("GET", "/jobs/exp-3", {"job": JOB})
    fake_master.json("PATCH", "/jobs/exp-3", {"job": moved})
    fake_master.json("PATCH", "/jobs/3", {"job": moved})
    client = Client(fake_master.url, "t")

    assert list(client.list_jobs(resource_pool="gpu")) == []
    assert fake_master.calls("GET", "/jobs")[0].query == {"resource_pool": "gpu"}
    assert client.get_job("exp-3").raw == JOB
    updated = client.update_job("exp-3", ahead_of=5, weight=0.5)
    assert updated.queue_position == 1 and updated.priority == 10
    assert fake_master.calls("PATCH", "/jobs/exp-3")[0].json() == {"weight": 0.5,
                                                                   "ahead_of": "5"}
    client.update_job(3, priority=10)
    assert fake_master.calls("PATCH", "/jobs/3")[0].json() == {"priority": 10}
    with pytest.raises(ValueError, match="nothing to change"):
        client.update_job("exp-3")
    assert len(fake_master.calls("PATCH", "/jobs/exp-3")) == 1


def test_job_update_errors_carry_the_master_message(fake_master: FakeMaster) -> None:
    fake_master.json("PATCH", "/jobs/exp-9", {
        "error": "job exp-9 is not in the queue", "details": []}, 404)
    with pytest.raises(MasterError) as info:
        Client(fake_master.url, "t").update_job("exp-9", priority=3)
    assert info.value.status == 404 and "exp-9" in info.value.message


def test_agents_one_enable_and_disable(fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/agents/gpu%2Fa", {"agent": {**AGENT, "id": "gpu/a"}})
    fake_master.json("POST", "/agents/local/enable", {"agent": AGENT})
    fake_master.json("POST", "/agents/local/disable", {"agent": {**AGENT, "enabled": False}})
    client = Client(fake_master.url, "t")

    # An id is always one path segment, whatever it holds.
    assert client.get_agent("gpu/a").id == "gpu/a"
    assert client.enable_agent("local").enabled is True
    assert client.disable_agent("local").enabled is False
    client.disable_agent("local", drain=False)
    assert [c.json() for c in fake_master.calls("POST", "/agents/local/disable")] == [
        {"drain": True}, {"drain": False}]


def test_checkpoints(fake_master: FakeMaster) -> None:
    checkpoint = {
        "uuid": "c0ffee", "trial_id": 7, "experiment_id": 3, "allocation_id": "7.0",
        "state": "COMPLETED", "steps_completed": 500, "report_time": "2026-11-22T10:05:00Z",
        "resources": {"model.pt": 1234}, "metadata": {"steps_completed": 500}, "size": 1234,
        "storage": {"type": "shared_fs", "host_path": "/root/.det_hub/checkpoints", "storage_path": None},
    }
    fake_master.json("GET", "/experiments/3/checkpoints", {"checkpoints": [checkpoint]})
    fake_master.json("GET", "/checkpoints/c0ffee", {"checkpoint": checkpoint})
    client = Client(fake_master.url, "t")
    assert client.list_checkpoints(3)[0].resources == {"model.pt": 1234}
    assert client.get_checkpoint("c0ffee").raw == checkpoint


def test_cluster_objects_tolerate_missing_fields() -> None:
    job = Job.from_json({"job_id": "exp-1", "state": "QUEUED", "priority": True})
    assert job.queue_position is None and job.priority is None and job.submitted is None
    assert job.type == "EXPERIMENT" and job.slots_requested == 0 and job.preemptible is True
    agent = Agent.from_json({"id": "a"})
    assert agent.enabled and agent.connected and agent.resource_pool == "" and agent.slots == []
    pool = ResourcePool.from_json({"name": "p", "agents": ["a", "b"]})
    assert pool.agents == 2 and pool.scheduler == "" and pool.preemption_timeout is None


def test_objects_tolerate_missing_fields() -> None:
    experiment = Experiment.from_json({"id": 1, "state": "COMPLETED"})
    assert experiment.is_terminal and experiment.created_at is None and experiment.progress is None
    trial = Trial.from_json({"id": 2})
    assert trial.run_state is None and trial.hparams == {}


COMMAND = {
    "id": 4, "type": "COMMAND", "description": "Command (sh -c exit 3)", "owner": "admin",
    "state": "RUNNING", "entrypoint": ["sh", "-c", "exit 3"], "resource_pool": "default",
    "priority": 42, "slots": 1, "job_id": "cmd-4", "created_at": "2026-11-22T10:00:00Z",
    "ended_at": None, "exit_code": None, "exit_reason": None, "config": {},
}


def test_run_command_sends_the_entrypoint_in_the_config(fake_master: FakeMaster,
                                                        tmp_path: Path) -> None:
    fake_master.json("POST", "/commands", {"command": {**COMMAND, "state": "QUEUED"}}, 201)
    (tmp_path / "prep.py").write_text("print('hi')\n")
    command = Client(fake_master.url, "t").run_command(
        ["python3", "prep.py"], config="resources: {slots: 2}\nentrypoint: ignored\n",
        context_dir=tmp_path)
    body = fake_master.calls("POST", "/commands")[0].json()
    assert yaml.safe_load(body["config"]) == {"resources": {"slots": 2},
                                              "entrypoint": ["python3", "prep.py"]}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["context"])), mode="r:gz") as tar:
        assert tar.getnames() == ["prep.py"]
    assert (command.id, command.state, command.job_id, command.is_terminal) == (
        4, "QUEUED", "cmd-4", False)
    with pytest.raises(ValueError):
        Client(fake_master.url, "t").run_command(config={"description": "nothing"})


def test_command_logs_follow_until_the_command_ends(fake_master: FakeMaster) -> None:
    batches = [[log_row(1, "a"), log_row(2, "b")], [log_row(3, "c")]]

    def logs(request: Request) -> Reply:
        rows = batches.pop(0) if batches and request.query["follow"] == "true" else []
        return Reply(200, chunks=[ndjson(rows)], content_type="application/x-ndjson")

    fake_master.route("GET", "/commands/4/logs", logs)
    fake_master.sequence("GET", "/commands/4", [
        {"command": COMMAND}, {"command": {**COMMAND, "state": "TERMINATED", "exit_code": 3}}])
    fake_master.json("POST", "/commands/4/kill", {"command": {**COMMAND, "state": "TERMINATING"}})
    client = Client(fake_master.url, "t")
    assert [row["message"] for row in client.command_logs(4, follow=True)] == ["a\n", "b\n", "c\n"]
    assert client.get_command(4).exit_code == 3
    assert client.kill_command(4).state == "TERMINATING"
