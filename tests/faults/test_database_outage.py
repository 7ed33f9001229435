"""The database goes away under a running trial, and comes back: a PostgreSQL restart of a few
seconds, and a SQLite file that cannot grow. Meanwhile the master answers 503 with Retry-After
(never 500); afterwards the trial ends as it would have, every metric row it reported is
stored once, and nothing is left running in the database, all without a master restart.

The PostgreSQL here is the test's own (initdb in a temporary directory, on a free port), never
the suite's shared server: it is stopped in the middle of the test.
"""

from __future__ import annotations

import collections
import contextlib
import os
import resource
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from det_hub.agents.local import FOLLOW_ON_PREFIX, ZYGOTE_PREFIX
from det_hub.store.packing import Pack
from det_hub.testing import TERMINAL, MasterProcess

from .conftest import StartMaster
from .private_postgres import PrivatePostgres

LENGTH = 60


def _experiment(sleep: float) -> dict[str, Any]:
    # max_restarts 0: a trial the outage made fail would end ERROR rather than run again.
    return {"name": "outage", "entrypoint": "python3 train.py",
            "hyperparameters": {"sleep": sleep, "report_every": 1, "checkpoint_every": 20},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": LENGTH}},
            "max_restarts": 0}


#: A trial that needs no master: it ends once something listens on the port it is given, so
#: that a test can make it end while the database is away.
WAITER = """\
import socket, sys, time
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
print("released", flush=True)
"""


def _start_waiter(master: MasterProcess, tmp_path: Path) -> tuple[int, int, socket.socket]:
    """An experiment of one trial that ends when the returned socket listens; its id, its
    trial's id and the (not yet listening) socket."""
    context = tmp_path / "waiter"
    context.mkdir()
    (context / "wait.py").write_text(WAITER)
    release = socket.socket()
    release.bind(("127.0.0.1", 0))
    port = release.getsockname()[1]
    eid = master.create_ok({
        "name": "waiter", "entrypoint": f"python3 wait.py {port}", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}},
        context=context)
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    return eid, trial_id, release


def _running(master: MasterProcess, trial_id: int) -> bool:
    return master.get(f"/trials/{trial_id}")["trial"].get("run_state") == "RUNNING"


def _steps_stored(master: MasterProcess, trial_id: int) -> int:
    trial = master.get(f"/trials/{trial_id}")["trial"]
    return int(trial.get("steps_completed") or 0)


def _refused(master: MasterProcess, method: str, path: str, **kwargs: Any) -> str | None:
    """The error of a 503 answer to this call, checked for Retry-After; None if it went
    through. Any other answer (a 500 above all) fails the test."""
    try:
        r = master.api(method, path, **kwargs)
    except requests.RequestException as e:
        raise AssertionError(f"{method} {path}: no answer: {e}") from e
    if r.status_code == 503:
        assert r.headers.get("Retry-After", "").isdigit(), dict(r.headers)
        return str(r.json()["error"])
    assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
    return None


def _trial_processes(under: Path) -> int:
    """How many allocations' local tasks run with their files under ``under``: not the
    zygotes warm start keeps, nor a follower prepared that no allocation has taken yet."""
    marker = str(under).encode()
    found = 0
    for pid_dir in Path("/proc").iterdir():
        if pid_dir.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
                if b"det_hub.agents.local_runner" in argv and marker in b" ".join(argv):
                    found += _an_allocations(Path(os.fsdecode(argv[argv.index(b"--log") + 1])))
    return found


def _an_allocations(log: Path) -> bool:
    """Whether the runner that writes ``log`` runs an allocation's task."""
    task_dir = log.parent
    if task_dir.name.startswith(ZYGOTE_PREFIX):
        return False
    if task_dir.name.startswith(FOLLOW_ON_PREFIX):  # an allocation's once one links to it
        return any(p.is_symlink() and os.readlink(p) == task_dir.name
                   for p in task_dir.parent.iterdir())
    return True


def _stored_rows(chunks: Any) -> list[tuple[str, int, int]]:
    """``(group, step, copies)`` of the rows in the database's chunks ``(group, payload)``."""
    copies = collections.Counter((group, step) for group, payload in chunks
                                 for step in Pack.decode(bytes(payload)).steps)
    return [(group, step, n) for (group, step), n in copies.items()]


def _assert_all_stored_once(rows: list[tuple[str, int, int]]) -> None:
    counts = {(group, steps): n for group, steps, n in rows}
    assert {k: n for k, n in counts.items() if n != 1} == {}, "rows stored more than once"
    assert sorted(s for g, s in counts if g == "training") == list(range(1, LENGTH + 1))
    assert [s for g, s in counts if g == "validation"] == [LENGTH]


@pytest.mark.slow
def test_a_postgresql_restart_under_a_running_trial(
        private_pg: PrivatePostgres, start_master: StartMaster,
        tmp_path: Path) -> None:
    master = start_master(private_pg.url)
    eid = master.create_ok(_experiment(sleep=0.2))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    waiter_eid, waiter_id, release = _start_waiter(master, tmp_path)
    master.wait(lambda: _steps_stored(master, trial_id) >= 10 and _running(master, waiter_id),
                timeout=90)

    private_pg.stop()
    down_at = time.monotonic()
    refusals: list[str] = []
    with release:
        released = False
        while time.monotonic() - down_at < 6:
            for method, path in (("GET", f"/experiments/{eid}"), ("GET", "/health")):
                error = _refused(master, method, path)
                assert error is not None, f"{method} {path} answered 200, the database down"
                refusals.append(error)
            if time.monotonic() - down_at > 2 and not released:
                release.listen()  # the waiter's trial ends while the database is down
                master.wait(lambda: _trial_processes(tmp_path) == 1, 10)  # the waiter ends
                released = True
            time.sleep(0.5)
        assert _trial_processes(tmp_path) == 1
        private_pg.start()
    back_at = time.monotonic()

    assert refusals[0].startswith("the database is unavailable (PostgreSQL: ")
    assert refusals[0].endswith("); try again in 2 s")
    # The trial went on reporting through the outage, and is done now, as it would have been;
    # the one that ended during the outage is settled as it ended.
    state = master.wait_state(eid, timeout=120)["state"]
    assert state == "COMPLETED", master.logs(trial_id)[-30:]
    assert master.wait_state(waiter_eid, timeout=30)["state"] == "COMPLETED"
    trial = master.get(f"/trials/{trial_id}")["trial"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert "released" in master.logs(waiter_id)
    print(f"\n{len(refusals)} answers 503 over {back_at - down_at:.1f} s of outage; "
          f"the experiment completed {time.monotonic() - back_at:.1f} s after the restart")

    with psycopg.connect(f"host=127.0.0.1 port={private_pg.port} user=dethub "
                         "dbname=dethub") as conn:
        rows = _stored_rows(conn.execute(
            "SELECT group_name, payload FROM metric_chunks WHERE trial_id = %s", (trial_id,)))
        allocations = conn.execute("SELECT state FROM allocations").fetchall()
        states = conn.execute("SELECT state FROM trials").fetchall()
    _assert_all_stored_once(rows)
    assert allocations == [("TERMINATED",), ("TERMINATED",)]
    assert states == [("COMPLETED",), ("COMPLETED",)]
    assert not _trial_processes(tmp_path)
    log = master.log_path.read_text()
    assert log.count("calls that need it fail until it is back") == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.slow
def test_a_sqlite_file_that_cannot_grow_while_trials_report_and_end(
        start_master: StartMaster, tmp_path: Path) -> None:
    db = tmp_path / "det_hub.db"
    master = start_master(f"sqlite:///{db}")
    assert master.proc is not None
    pid = master.proc.pid
    eid = master.create_ok(_experiment(sleep=0.1))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    waiter_eid, waiter_id, release = _start_waiter(master, tmp_path)
    master.wait(lambda: _steps_stored(master, trial_id) >= 10 and _running(master, waiter_id),
                timeout=90)

    # No file of the master's may grow from here on, as on a full disk (the trials' own files
    # are their processes', which keep their limits): every write of the store fails.
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))
    try:
        refusals = []
        for probe in range(6):
            error = _refused(master, "POST", "/users", json={"username": f"probe{probe}"})
            assert error is not None, "a user was stored on a database that cannot grow"
            refusals.append(error)
            time.sleep(0.5)
        with release:
            release.listen()  # the waiter's trial ends now, with nothing stored
            master.wait(lambda: _trial_processes(tmp_path) == 1, 10)  # the waiter ends
        time.sleep(2)
        # Reads still work, and tell the truth: nothing has been settled yet.
        assert master.experiment(waiter_eid)["state"] not in TERMINAL
        assert master.experiment(eid)["state"] not in TERMINAL
        stuck_at = _steps_stored(master, trial_id)
        assert stuck_at < LENGTH
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
    room_at = time.monotonic()

    assert all(e.startswith("the database") for e in refusals), refusals
    assert master.wait_state(waiter_eid, timeout=30)["state"] == "COMPLETED"
    assert "released" in master.logs(waiter_id)  # its last line waited, and was kept
    state = master.wait_state(eid, timeout=90)["state"]
    assert state == "COMPLETED", master.logs(trial_id)[-30:]
    print(f"\n{len(refusals)} answers 503; the trials were settled "
          f"{time.monotonic() - room_at:.1f} s after room returned ({stuck_at} steps stored "
          "before)")
    trial = master.get(f"/trials/{trial_id}")["trial"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0

    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = _stored_rows(conn.execute(
            "SELECT group_name, payload FROM metric_chunks WHERE trial_id = ?", (trial_id,)))
        allocations = conn.execute("SELECT state FROM allocations").fetchall()
        users = conn.execute("SELECT count(*) FROM users WHERE username LIKE 'probe%'"
                             ).fetchone()
    _assert_all_stored_once(rows)
    assert allocations == [("TERMINATED",), ("TERMINATED",)]
    assert users == (0,)  # refused means not stored


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 24 MiB tmpfs of the test's own: a disk the test can fill to its last byte."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here ({done.stderr.strip()}): a full disk needs "
                    "root with the right to mount")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to its last byte with one file; answers the file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_under_the_database_is_named_and_outlived(
        start_master: StartMaster, small_disk: Path) -> None:
    """The database's disk fills while a trial reports: writes answer 503 saying the disk is
    full, reads go on; once there is room again the trial goes on, with nothing it was told
    was stored lost, and no master restart."""
    db = small_disk / "det_hub.db"
    master = start_master(f"sqlite:///{db}")
    eid = master.create_ok(_experiment(sleep=0.1))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: _steps_stored(master, trial_id) >= 10, timeout=90)

    filler = _fill(small_disk)
    full_at = time.monotonic()
    refusals: list[str] = []
    try:
        probe = 0
        while len(refusals) < 4:
            assert time.monotonic() - full_at < 60, f"no write was refused: {refusals}"
            error = _refused(master, "POST", "/users", json={"username": f"probe{probe}"})
            probe += 1
            if error is not None:
                refusals.append(error)
            time.sleep(0.25)
        assert master.experiment(eid)["state"] not in TERMINAL  # reads still answer
        stuck_at = _steps_stored(master, trial_id)
    finally:
        filler.unlink()
    room_at = time.monotonic()

    assert all(e.startswith("the database's disk is full (") for e in refusals), refusals
    assert refusals[0].endswith("; try again in 5 s")
    state = master.wait_state(eid, timeout=120)["state"]
    assert state == "COMPLETED", master.logs(trial_id)[-30:]
    trial = master.get(f"/trials/{trial_id}")["trial"]
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    print(f"\nthe disk filled at step {stuck_at}; {len(refusals)} writes answered 503 (disk "
          f"full); the trial completed {time.monotonic() - room_at:.1f} s after room returned")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = _stored_rows(conn.execute(
            "SELECT group_name, payload FROM metric_chunks WHERE trial_id = ?", (trial_id,)))
    _assert_all_stored_once(rows)
    log = master.log_path.read_text()
    assert "the database's disk is full" in log and "Traceback" not in log, log[-3000:]
