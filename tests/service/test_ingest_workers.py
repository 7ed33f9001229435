"""The master's ingest workers on PostgreSQL: training code's metric reports stored by
processes beside the master, exactly as the master stores them, heard by the master (live
streams, progress) in commit order, refused as the master refuses them, and outliving a worker
that dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.client import Client
from det_hub.store.metric_writes import StoredNotice
from det_hub.testing import MasterProcess, reap_tasks

pytestmark = pytest.mark.postgres

STEPS = Path(__file__).resolve().parents[1] / "e2e" / "contexts" / "steps"

#: Training code that tells the test where it would report, and with which token.
REPORTER = """import json, os, time
print("REPORT-TO " + json.dumps({"url": os.environ.get("DET_HUB_INGEST_URL"),
                                 "token": os.environ["DET_HUB_ALLOCATION_TOKEN"]}), flush=True)
time.sleep(300)
"""


@pytest.fixture
def master(postgresql_url: str, tmp_path: Path) -> Iterator[MasterProcess]:
    proc = MasterProcess(tmp_path / "data", postgresql_url, ["--MasterApp.ingest_workers=2"])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        reap_tasks(tmp_path)


def idle_reporter(master: MasterProcess, tmp_path: Path, name: str) -> tuple[int, int, str, str]:
    """An experiment whose one trial waits, and ``(experiment, trial, ingest URL, token)``."""
    context = tmp_path / name
    context.mkdir()
    (context / "train.py").write_text(REPORTER)
    eid = master.create_ok({"name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
                            "searcher": {"name": "single", "metric": "loss",
                                         "max_length": {"batches": 1000}}}, context=context)
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]

    def told() -> dict[str, Any] | None:
        for line in master.logs(trial_id):
            if line.startswith("REPORT-TO "):
                return json.loads(line.removeprefix("REPORT-TO "))
        return None

    where = master.wait(told, timeout=60)
    assert where["url"], "a trial must be told where the ingest workers are"
    return eid, trial_id, where["url"], where["token"]


def post(url: str, token: str, trial_id: int, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{url}/api/v1/trials/{trial_id}/metrics", json=body,
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)


def columns(first: int, n: int, key: str) -> dict[str, Any]:
    steps = list(range(first, first + n))
    return {"group": "training", "key": key, "steps": steps,
            "metrics": {"loss": [1.0 / s for s in steps]}}


def worker_pids(master: MasterProcess) -> set[int]:
    assert master.proc is not None
    out = subprocess.run(["pgrep", "-P", str(master.proc.pid), "-f", "ingest_worker"],
                         capture_output=True, text=True, check=False).stdout
    return {int(p) for p in out.split()}


def stored_steps(master: MasterProcess, trial_id: int) -> list[int]:
    return [m["steps_completed"] for m in
            master.get(f"/trials/{trial_id}/metrics", params={"group": "training"})["metrics"]]


@pytest.mark.slow
def test_workers_store_once_and_the_master_streams_every_row_in_order(
        master: MasterProcess, tmp_path: Path) -> None:
    eid, trial_id, url, token = idle_reporter(master, tmp_path, "ingest")
    assert url != master.url
    assert len(worker_pids(master)) == 2

    events: list[tuple[str, Any]] = []
    client = Client(master.url, master.token)

    def follow() -> None:
        events.extend(client.stream_experiment_events(eid, heartbeat=1))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    time.sleep(0.5)
    answers = [post(url, token, trial_id, columns(1 + 10 * i, 10, f"k{i}")) for i in range(30)]
    assert [a.status_code for a in answers] == [200] * 30, answers[0].text
    assert all(a.json() == {"count": 10, "repeat": False} for a in answers)

    # A repeat, to the workers or to the master, stores nothing, and says how many the first
    # copy stored.
    again = post(url, token, trial_id, columns(1, 10, "k0"))
    assert again.json() == {"count": 10, "repeat": True}
    via_master = post(master.url, token, trial_id, columns(1, 10, "k1"))
    assert via_master.status_code == 200 and via_master.json()["repeat"] is True
    assert stored_steps(master, trial_id) == list(range(1, 301))

    # The master heard of every batch: the trial's steps, and its live stream, in order.
    master.wait(lambda: master.trials(eid)[0]["steps_completed"] == 300, timeout=10)
    master.api("POST", f"/experiments/{eid}/kill")
    reader.join(timeout=60)
    streamed = [data["steps_completed"] for name, data in events if name == "metrics"]
    assert streamed == list(range(1, 301))
    assert not reader.is_alive(), "the stream ends with the experiment"
    assert [data for name, data in events if name == "state"][-1]["state"] == "CANCELED"


@pytest.mark.slow
def test_workers_refuse_what_the_master_refuses(master: MasterProcess, tmp_path: Path) -> None:
    eid, trial_id, url, token = idle_reporter(master, tmp_path, "refusals")
    other_eid, other_trial, _, other_token = idle_reporter(master, tmp_path, "other")

    no_token = requests.post(f"{url}/api/v1/trials/{trial_id}/metrics",
                             json=columns(1, 1, "a"), timeout=30)
    assert no_token.status_code == 401
    assert post(url, "0" * 64, trial_id, columns(1, 1, "a")).status_code == 401
    assert post(url, master.token, trial_id, columns(1, 1, "a")).status_code == 401
    forbidden = post(url, other_token, trial_id, columns(1, 1, "a"))
    assert forbidden.status_code == 403
    assert f"not valid for trial {trial_id}" in forbidden.json()["error"]
    bad_body = {"group": "training", "steps": [1, 2], "metrics": {"loss": [1.0]}}
    bad = post(url, token, trial_id, bad_body)
    assert bad.status_code == 400 and bad.json()["error"]
    # As at the master, a token nobody holds is answered before the body is read.
    for where in (url, master.url):
        assert post(where, "0" * 64, trial_id, bad_body).status_code == 401
    validation = post(url, token, trial_id, {**columns(1, 1, "v"), "group": "validation"})
    assert validation.status_code == 421
    assert "master" in validation.json()["error"]
    assert stored_steps(master, trial_id) == []

    master.api("POST", f"/experiments/{eid}/kill")
    master.wait_state(eid)
    ended = post(url, token, trial_id, columns(1, 1, "late"))
    # The trial's allocation has ended: its token is no running trial's any more.
    assert ended.status_code in (401, 409), ended.text
    assert stored_steps(master, trial_id) == []
    assert post(url, other_token, other_trial, columns(1, 1, "b")).status_code == 200
    master.api("POST", f"/experiments/{other_eid}/kill")


@pytest.mark.slow
def test_a_worker_that_dies_is_replaced(master: MasterProcess, tmp_path: Path) -> None:
    eid, trial_id, url, token = idle_reporter(master, tmp_path, "replaced")
    before = worker_pids(master)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    after = master.wait(lambda: (p := worker_pids(master)) and len(p) == 2 and victim not in p
                        and p, timeout=30)
    assert after - before
    for i in range(20):  # every worker that takes one stores it
        assert post(url, token, trial_id, columns(1 + i, 1, f"r{i}")).status_code == 200
    assert stored_steps(master, trial_id) == list(range(1, 21))
    assert "exited with -9; starting another" in master.log_path.read_text()
    master.api("POST", f"/experiments/{eid}/kill")


@pytest.mark.slow
def test_a_core_api_trial_reports_through_the_workers(
        master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=60, sleep=0.0, report_every=1),
                           context=STEPS)
    assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
    trial = master.trials(eid)[0]
    assert stored_steps(master, trial["id"]) == list(range(1, 61))
    assert trial["steps_completed"] == 60
    assert master.experiment(eid)["progress"] == 1.0
    logs = "\n".join(master.logs(trial["id"]))
    assert "did not take" not in logs, logs


def test_workers_need_postgresql(tmp_path: Path) -> None:
    master = MasterProcess(tmp_path / "data", f"sqlite:///{tmp_path / 'db.sqlite'}",
                           ["--MasterApp.ingest_workers=2"])
    with pytest.raises(AssertionError, match="ingest_workers = 2 needs PostgreSQL"):
        master.start()
    master.stop()


def test_a_stored_notice_reads_back() -> None:
    notice = StoredNotice.parse("7 41 9 a group with spaces")
    assert notice == StoredNotice(7, 41, "a group with spaces", 9)
    with pytest.raises(ValueError):
        StoredNotice.parse("not a notice")


@pytest.mark.slow
def test_a_restarted_master_serves_the_port_its_trials_were_told(
        master: MasterProcess) -> None:
    kept = master.data_dir / "ingest-port"
    port = int(kept.read_text())
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    master.stop()
    master.start()
    assert int(kept.read_text()) == port
    assert f"2 ingest workers at http://127.0.0.1:{port}" in master.log_path.read_text()


@pytest.mark.slow
def test_announcements_lost_with_the_listening_connection_lose_no_streamed_row(
        master: MasterProcess, tmp_path: Path) -> None:
    import psycopg

    from det_hub.service.ingest import libpq_url

    eid, trial_id, url, token = idle_reporter(master, tmp_path, "relisten")
    events: list[tuple[str, Any]] = []
    client = Client(master.url, master.token)
    reader = threading.Thread(
        target=lambda: events.extend(client.stream_experiment_events(eid, heartbeat=1)),
        daemon=True)
    reader.start()
    time.sleep(0.5)

    def send(first: int, count: int) -> None:
        for i in range(first, first + count):
            assert post(url, token, trial_id, columns(10 * i + 1, 10, f"b{i}")).status_code == 200

    send(0, 10)
    with psycopg.connect(libpq_url(master.db_url), autocommit=True) as conn:
        cut = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                           ).fetchall()
    assert cut == [(True,)]
    send(10, 10)  # stored while the master hears nothing
    master.wait(lambda: "stopped hearing of stored metrics" in master.log_path.read_text(),
                timeout=10)
    send(20, 10)
    master.wait(lambda: master.trials(eid)[0]["steps_completed"] == 300, timeout=20)
    master.api("POST", f"/experiments/{eid}/kill")
    reader.join(timeout=60)
    assert not reader.is_alive()
    streamed = [data["steps_completed"] for name, data in events if name == "metrics"]
    assert streamed == list(range(1, 301))


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, "http://127.0.0.1:9001"),
    ({"host": "0.0.0.0"}, "http://127.0.0.1:9001"),
    ({"base_url": "/services/det-hub/"}, "http://127.0.0.1:9001"),  # the master's own path
    ({"master_url": "https://det.example.org:8443"}, "https://det.example.org:9001"),
    ({"master_url": "https://hub.example.org/services/det-hub"}, None),  # a proxy's path
    ({"master_url": "https://hub.example.org/services/det-hub",
      "ingest_url": "http://10.1.2.3:9001/"}, "http://10.1.2.3:9001"),
])
def test_trials_are_told_where_the_workers_are(settings: dict[str, str],
                                               expected: str | None) -> None:
    from det_hub.service.app import MasterApp

    app = MasterApp(port=8080, **settings)
    assert app.effective_ingest_url(9001) == expected


def test_workers_run_on_postgresql_only_unless_asked() -> None:
    from det_hub.service.app import MasterApp

    assert MasterApp().ingest_settings("sqlite") == 0
    assert 1 <= MasterApp().ingest_settings("postgresql") <= 4
    assert MasterApp(ingest_workers=0).ingest_settings("postgresql") == 0
    assert MasterApp(ingest_workers=3).ingest_settings("postgresql") == 3
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        MasterApp(ingest_workers=1).ingest_settings("sqlite")


def test_workers_run_on_uvloop_and_on_asyncio_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import sys

    import uvloop

    from det_hub.service.ingest_worker import new_event_loop

    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed: its import fails
    loop = new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop) and not isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
