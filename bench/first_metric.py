"""Time from `experiment create` to the first reported metric, for a trivial Core API script.

The clock starts when the create request is sent. Two moments are taken: when the trial's task
was started (a process on the local agent, a container on a Docker engine), as the master
stored it (its allocation's ``started_at``, the moment its ``run_state`` became RUNNING; the
master runs on this host, on the same clock), and when the master has stored the trial's first
metric, from the API polled every 10 ms. A trial forked from a warm zygote can start, report and
end between two polls, so its start is read from the database rather than seen by a poll.
SQLite store.

* ``--agent local``: the embedded local agent, a process per trial.
* ``--agent docker``: container start to first metric, the same clock when the trial runs in
  a container on one of the test Docker engines (DET_HUB_TEST_DOCKER_HOST and DET_HUB_TEST_IMAGE, as
  ``scripts/test-services.sh start`` prints them), with this checkout's Python bind-mounted.
* ``--agent both`` (the default): one after the other.

    python bench/first_metric.py [--runs 7] [--agent local|docker|both]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master, script_context, single_config  # noqa: E402

from det_hub.store.models import Allocation  # noqa: E402
from det_hub.testing import MasterProcess  # noqa: E402

TRIVIAL = """
import det_hub.core as core
with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
"""

AGENTS = {
    "local": "local agent, a process per trial",
    "docker": "docker agent, a container per trial on one engine",
}


def time_one(master: MasterProcess, ctx: Path, timeout: float = 120.0,
             config: dict[str, Any] | None = None) -> tuple[float | None, float]:
    """Seconds from create to RUNNING (None when the master stored no start) and to the
    first stored metric, for one experiment (``config``, by default a single trial
    anywhere); waits for it to end."""
    t0, wall0 = time.perf_counter(), time.time()
    eid = master.create_ok(config or single_config("first-metric"), context=ctx)
    trial_id: int | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trial_id is None:
            trials = master.trials(eid)
            trial_id = trials[0]["id"] if trials else None
        if trial_id is not None and master.get(f"/trials/{trial_id}/metrics")["metrics"]:
            metric = time.perf_counter() - t0
            break
        time.sleep(0.01)
    else:
        raise AssertionError(f"experiment {eid}: no metric in {timeout:.0f} s; master log:\n"
                             + master.log_path.read_text()[-3000:])
    state = master.wait_state(eid, timeout=timeout)["state"]
    assert state == "COMPLETED", f"experiment {eid} ended {state}"
    started = first_start(master.db_url, trial_id)
    return (None if started is None else started - wall0), metric


def first_start(db_url: str, trial_id: int) -> float | None:
    """When the trial's first allocation started (seconds since the epoch), as the master
    stored it; None when it stored no start."""
    engine = sqlalchemy.create_engine(db_url)
    try:
        with engine.connect() as conn:
            started = conn.execute(
                sqlalchemy.select(Allocation.started_at)
                .where(Allocation.trial_id == trial_id)
                .order_by(Allocation.created_at).limit(1)).scalar()
    finally:
        engine.dispose()
    if started is None:
        return None
    if started.tzinfo is None:  # stored as UTC
        started = started.replace(tzinfo=datetime.timezone.utc)
    return float(started.timestamp())


def figures(values: list[float]) -> str:
    if not values:
        return "not seen"
    return (f"median {statistics.median(values):.3f} s, best {min(values):.3f} s, "
            f"worst {max(values):.3f} s")


def run_agent(agent: str, runs: int) -> None:
    with running_master("sqlite", agents=agent, engines=1) as master, \
            tempfile.TemporaryDirectory() as tmp:
        ctx = script_context(Path(tmp) / "ctx", TRIVIAL)
        results = [time_one(master, ctx) for _ in range(runs)]
    to_running = [r for r, _ in results if r is not None]
    to_metric = [m for _, m in results]
    running_to_metric = [m - r for r, m in results if r is not None]
    task = "container" if agent == "docker" else "process"
    rows = [(f"create to RUNNING ({task} started)", to_running),
            ("create to first metric", to_metric),
            ("RUNNING to first metric", running_to_metric)]
    width = max(len(label) for label, _ in rows)
    title = "container start to first metric" if agent == "docker" else "first metric"
    print(f"{title}, {AGENTS[agent]}, SQLite store, {runs} experiments:")
    for label, values in rows:
        print(f"  {label + ':':<{width + 1}}  {figures(values)}")
    if len(to_running) < runs:
        print(f"  (no start was stored for {runs - len(to_running)} of {runs})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--agent", choices=("local", "docker", "both"), default="both")
    args = parser.parse_args(argv)
    for agent in ("local", "docker") if args.agent == "both" else (args.agent,):
        run_agent(agent, args.runs)


if __name__ == "__main__":
    main()
