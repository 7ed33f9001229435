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
from fake_master import FakeMaster, Reply, Request, closed_port, log_row, ndjson

from det_hub.client import (
    Client,
    Experiment,
    MasterError,
    MasterUnreachable,
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


def test_cluster_lists(fake_master: FakeMaster) -> None:
    agents = {"agents": [{"id": "local", "type": "local", "enabled": True, "slots": [
        {"id": "0", "type": "cpu", "device": "cpu0-3", "allocation_id": "7.0"},
        {"id": "1", "type": "cpu", "device": "cpu4-7", "allocation_id": None}]}]}
    pools = {"resource_pools": [{"name": "default", "type": "local", "agents": 1, "slots_total": 2, "slots_used": 1}]}
    jobs = {"jobs": [{"allocation_id": "7.0", "trial_id": 7, "experiment_id": 3, "owner": "admin",
                      "state": "RUNNING", "slots": 1, "priority": 42, "queued_at": "2026-11-22T10:00:00Z"}]}
    users = {"users": [{"id": 1, "username": "admin", "admin": True}]}
    for path, body in (("/agents", agents), ("/resource_pools", pools), ("/jobs", jobs), ("/users", users)):
        fake_master.json("GET", path, body)
    fake_master.json("POST", "/users", {"user": {"id": 2, "username": "ann", "admin": False}, "token": "tok"}, 201)
    client = Client(fake_master.url, "t")

    assert [s.allocation_id for s in client.list_agents()[0].slots] == ["7.0", None]
    assert client.list_resource_pools()[0].slots_used == 1
    assert client.list_jobs()[0].trial_id == 7
    assert client.list_users()[0].admin is True
    created = client.create_user("ann")
    assert created.token == "tok" and created.user.username == "ann"
    assert fake_master.calls("POST", "/users")[0].json() == {"username": "ann", "admin": False}


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


def test_objects_tolerate_missing_fields() -> None:
    experiment = Experiment.from_json({"id": 1, "state": "COMPLETED"})
    assert experiment.is_terminal and experiment.created_at is None and experiment.progress is None
    trial = Trial.from_json({"id": 2})
    assert trial.run_state is None and trial.hparams == {}
