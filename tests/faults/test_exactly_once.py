"""Every metric row exactly once, whatever happens around the trial that reports it.

* A trial reports 50,000 rows, one per step, while the master is killed (SIGKILL) and started
  again three times, the trial's own processes are killed twice (it restarts from its latest
  checkpoint, and what it reported past that is rolled back), and, on PostgreSQL, the
  database is restarted once. Afterwards each step is stored exactly once, none is missing,
  and the rolled-back rows are in no read or chart.
* A metric report whose answer is lost on the way back (a proxy between the trial and the
  master drops the answers of the first reports) is sent again and stored once: the master
  recognises the repeat by the batch's key.
"""

from __future__ import annotations

import http.server
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.testing import MasterProcess, free_port, kill_trial_processes

from .conftest import StartMaster
from .private_postgres import PrivatePostgres

REPORTER = Path(__file__).resolve().parent / "contexts" / "reporter"

pytestmark = pytest.mark.slow


def _experiment(steps: int, checkpoint_every: int, sleep: float,
                max_restarts: int = 0) -> dict[str, Any]:
    return {"name": "exactly-once", "entrypoint": "python3 train.py",
            "hyperparameters": {"steps": steps, "checkpoint_every": checkpoint_every,
                                "sleep": sleep},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": steps}},
            "max_restarts": max_restarts}


def _trial(master: MasterProcess, trial_id: int) -> dict[str, Any] | None:
    """The trial as the master shows it, or None while the master cannot answer."""
    try:
        r = master.api("GET", f"/trials/{trial_id}")
    except requests.RequestException:
        return None
    return r.json()["trial"] if r.status_code == 200 else None


def _past(master: MasterProcess, trial_id: int, steps: int, timeout: float = 120) -> None:
    """Wait until the trial has reported past ``steps``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trial = _trial(master, trial_id)
        if trial is not None and trial["steps_completed"] >= steps:
            return
        if trial is not None and trial["state"] in ("COMPLETED", "ERROR", "CANCELED"):
            raise AssertionError(f"trial {trial_id} ended {trial['state']} before step {steps}")
        time.sleep(0.1)
    raise AssertionError(f"trial {trial_id} did not pass step {steps} in {timeout} s:\n"
                         + "\n".join(master.logs(trial_id)[-20:]))


def _restart(master: MasterProcess) -> None:
    master.stop(signal.SIGKILL)
    time.sleep(0.5)  # the trial trains on, and retries its reports meanwhile
    master.start()


def _steps(master: MasterProcess, trial_id: int, query: str = "") -> list[int]:
    rows = master.get(f"/trials/{trial_id}/metrics?group=training{query}")["metrics"]
    return [row["steps_completed"] for row in rows]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_50000_rows_through_master_kills_trial_kills_and_a_database_restart(
        start_master: StartMaster, tmp_path: Path, database: str,
        request: pytest.FixtureRequest) -> None:
    total, every = 50_000, 2_500
    pg: PrivatePostgres | None = None
    if database == "postgresql":
        pg = request.getfixturevalue("private_pg")
        db_url = pg.url
    else:
        db_url = f"sqlite:///{tmp_path / 'det_hub.db'}"
    master = start_master(db_url, context=REPORTER)
    eid = master.create_ok(_experiment(total, every, sleep=0.0005, max_restarts=2))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]

    faults: list[str] = []
    _past(master, trial_id, 5_000)
    _restart(master)
    faults.append("master killed")
    # Each trial kill comes well inside a checkpoint period: past the checkpoint by enough
    # stored rows for its run to roll some back, and far from the next one. (At 12,000, 500
    # steps before the checkpoint at 12,500, the kill could land just after that checkpoint,
    # before any row past it was stored, leaving its run nothing to roll back.)
    _past(master, trial_id, 11_000)
    assert kill_trial_processes(trial_id) >= 1
    faults.append("trial killed")
    _past(master, trial_id, 20_000)
    _restart(master)
    faults.append("master killed")
    if pg is not None:
        _past(master, trial_id, 26_000)
        pg.stop()
        time.sleep(3)
        pg.start()
        faults.append("database restarted")
    _past(master, trial_id, 33_000)
    assert kill_trial_processes(trial_id) >= 1
    faults.append("trial killed")
    _past(master, trial_id, 40_000)
    _restart(master)
    faults.append("master killed")

    exp = master.wait_state(eid, timeout=300)
    logs = master.logs(trial_id)
    assert exp["state"] == "COMPLETED", (faults, logs[-30:])
    trial = master.get(f"/trials/{trial_id}")["trial"]
    assert (trial["restarts"], trial["run_id"], trial["steps_completed"]) == (2, 3, total)

    steps = _steps(master, trial_id)
    assert len(steps) == total and steps == list(range(1, total + 1)), (
        f"{len(steps)} rows for {total} steps: {len(steps) - len(set(steps))} repeated, "
        f"{total - len(set(steps))} missing")
    validation = master.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
    assert [row["steps_completed"] for row in validation] == [total]
    assert trial["best_validation"]["steps_completed"] == total

    # Each trial kill rolled back what its run reported past the checkpoint it resumed from.
    rolled_back = master.get(f"/trials/{trial_id}/metrics/rolled_back")["metrics"]
    by_run: dict[int, list[int]] = {}
    for row in rolled_back:
        by_run.setdefault(row["rolled_back_by_run"], []).append(row["steps_completed"])
    assert sorted(by_run) == [2, 3], by_run
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at ")]
    assert len(resumed) == 2 and all(r % every == 0 for r in resumed), resumed
    for run, first in zip((2, 3), resumed, strict=True):
        assert min(by_run[run]) == first + 1, (run, first, by_run[run][:5])

    # The chart's downsampled read holds no rolled-back row either.
    charted = _steps(master, trial_id, "&max_points=500")
    assert charted == sorted(set(charted)) and charted[-1] == total
    print(f"\n{database}: {total} rows once each through {', '.join(faults)}; "
          f"{len(rolled_back)} rows rolled back by runs 2 and 3")


class _DroppingProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy on 127.0.0.1 to the master that forwards every request and its answer,
    except that it forwards the first ``drop`` metric batches and then hangs up instead of
    answering them: their answer is lost on the way back (once per batch)."""

    daemon_threads = True

    def __init__(self, port: int, master_port: int, drop: int) -> None:
        self.master = f"http://127.0.0.1:{master_port}"
        self.drop = drop
        self.dropped: list[str] = []
        self.repeats = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _DroppingProxy

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "content-length", "connection")}
        answer = requests.request(self.command, self.server.master + self.path, data=body,
                                  headers=headers, timeout=60)
        metrics = self.command == "POST" and self.path.split("?")[0].endswith("/metrics")
        key = json.loads(body or b"{}").get("key", "") if metrics else ""
        with self.server.lock:
            # The first answer of each of the first batches: their resending goes through.
            drop = metrics and len(self.server.dropped) < self.server.drop \
                and key not in self.server.dropped
            if drop:
                self.server.dropped.append(key)
            elif metrics and answer.ok and answer.json().get("repeat"):
                self.server.repeats += 1
        if drop:
            self.close_connection = True  # stored by the master; the trial never hears so
            return
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection",
                                   "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_report_whose_answer_is_lost_is_sent_again_and_stored_once(
        start_master: StartMaster, sqlite_url: str) -> None:
    proxy_port, master_port = free_port(), free_port()
    proxy = _DroppingProxy(proxy_port, master_port, drop=3)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        # Trials reach the master through the proxy; the test talks to the master itself.
        master = start_master(sqlite_url, ("--master-url", f"http://127.0.0.1:{proxy_port}"),
                              context=REPORTER, port=master_port)
        eid = master.create_ok(_experiment(3_000, 1_000, sleep=0.001))
        assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
        [trial] = master.trials(eid)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert len(set(proxy.dropped)) == 3 and all(proxy.dropped), proxy.dropped
    # Each lost answer's batch was sent again with its key and recognised as a repeat.
    assert proxy.repeats == 3
    assert _steps(master, trial["id"]) == list(range(1, 3_001))
    assert master.logs(trial["id"])[-1] == "done"
