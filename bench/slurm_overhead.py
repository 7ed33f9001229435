"""What a Slurm pool costs a trial: its start, and how fast a queue of short trials drains.

Two figures, each beside the same run on the embedded local agent (a process per trial, the
same machine):

* **First metric**: seconds from the create request to the trial's first stored metric, for a
  trivial Core API script (``first_metric.py``'s clock), ``--runs`` experiments one after the
  other. On Slurm this adds ``sbatch``, Slurm's own start of the batch step on a node, and the
  agent's next look at the queue (``squeue`` every ``--poll-interval`` seconds).
* **Queue throughput**: one random search of ``--trials`` trials (default 200), each reporting
  one metric and ending, with ``max_concurrent_trials`` equal to the pool's slots so that the
  rest wait in det_hub's queue (det_hub never hands Slurm more than the pool's slots): wall
  seconds from create to the experiment's end, and trials ended per second.

Needs the test Slurm cluster (``scripts/test-services.sh start``, which prints
DET_HUB_TEST_SLURM_CONF, DET_HUB_TEST_SLURM_PARTITION and DET_HUB_TEST_SLURM_PYTHON) and
root, as the Slurm agent submits as its tasks' users.

    python bench/slurm_overhead.py [--runs 5] [--trials 200] [--poll-interval 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master, script_context, single_config  # noqa: E402
from first_metric import TRIVIAL, figures, time_one  # noqa: E402

from det_hub.testing import MasterProcess  # noqa: E402

POOL = "hpc"
SLURM_ENV = ("DET_HUB_TEST_SLURM_CONF", "DET_HUB_TEST_SLURM_PARTITION",
             "DET_HUB_TEST_SLURM_PYTHON")


def slurm_settings() -> tuple[str, str, str]:
    values = [os.environ.get(name, "") for name in SLURM_ENV]
    if not all(values):
        sys.exit(f"{', '.join(SLURM_ENV)} are not set: start the test Slurm with "
                 "`scripts/test-services.sh start > .test-services.env` and "
                 "`. ./.test-services.env` first")
    if os.geteuid() != 0:
        sys.exit("the Slurm agent submits as its tasks' users only where the master runs as "
                 "root: run this as root")
    conf, partition, python = values
    return conf, partition, python


@contextlib.contextmanager
def slurm_master(poll_interval: float) -> Iterator[tuple[MasterProcess, Path]]:
    """A master whose one pool is the test Slurm partition, and the directory its jobs and
    checkpoints share with the nodes."""
    conf, partition, python = slurm_settings()
    shared = Path(tempfile.mkdtemp(prefix="det-hub-bench-slurm-"))
    shared.chmod(0o755)
    (shared / "checkpoints").mkdir()
    (shared / "checkpoints").chmod(0o1777)
    manager = {"type": "slurm", "partition": partition, "slurm_conf": conf, "python": python,
               "job_root": str(shared / "jobs"), "poll_interval": poll_interval}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "det_hub_config.py"
            config.write_text("c.MasterApp.local_agent = False\n"
                              f"c.MasterApp.resource_pools = [{{'name': {POOL!r}, "
                              f"'resource_manager': {manager!r}}}]\n")
            master = MasterProcess(Path(tmp) / "data", f"sqlite:///{tmp}/bench.db",
                                   [f"--MasterApp.config_file={config}"])
            master.start()
            try:
                yield master, shared
            finally:
                master.stop()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def on_slurm(config: dict[str, Any], shared: Path) -> dict[str, Any]:
    return {**config, "resources": {"resource_pool": POOL},
            "checkpoint_storage": {"type": "shared_fs",
                                   "host_path": str(shared / "checkpoints")}}


def pool_slots(master: MasterProcess) -> int:
    return sum(len(a["slots"]) for a in master.get("/agents")["agents"])


def search_config(trials: int, concurrent: int) -> dict[str, Any]:
    return {**single_config("queue-throughput"),
            "searcher": {"name": "random", "metric": "loss", "max_trials": trials,
                         "max_concurrent_trials": concurrent,
                         "max_length": {"batches": 1}},
            "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}}}


def drain(master: MasterProcess, config: dict[str, Any], ctx: Path, trials: int,
          timeout: float) -> float:
    """Wall seconds for the search to end; every trial must have completed."""
    t0 = time.perf_counter()
    eid = master.create_ok(config, context=ctx)
    state = master.wait_state(eid, timeout=timeout)["state"]
    wall = time.perf_counter() - t0
    ended = master.trials(eid)
    done = sum(t["state"] == "COMPLETED" for t in ended)
    if state != "COMPLETED" or done != trials:
        raise AssertionError(f"experiment {eid} ended {state} with {done} of {trials} trials "
                             "completed; master log:\n" + master.log_path.read_text()[-3000:])
    return wall


def measure(where: str, master: MasterProcess, shared: Path | None, ctx: Path, runs: int,
            trials: int) -> dict[str, Any]:
    def placed(config: dict[str, Any]) -> dict[str, Any]:
        return on_slurm(config, shared) if shared is not None else config

    slots = pool_slots(master)
    first = [time_one(master, ctx, config=placed(single_config("first-metric")))[1]
             for _ in range(runs)]
    wall = drain(master, placed(search_config(trials, slots)), ctx, trials,
                 timeout=60 + trials * 10)
    return {"where": where, "slots": slots, "first": first, "wall": wall}


def report(row: dict[str, Any], trials: int) -> None:
    print(f"{row['where']} ({row['slots']} slots):")
    print(f"  create to first metric: {figures(row['first'])}")
    print(f"  {trials} queued trials: {row['wall']:.1f} s, {trials / row['wall']:.2f} trials/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="first-metric experiments")
    parser.add_argument("--trials", type=int, default=200, help="trials in the queue")
    parser.add_argument("--poll-interval", type=float, default=2.0,
                        help="seconds between the Slurm agent's looks at the queue (the "
                             "pool's default, 2)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.trials < 1 or args.poll_interval <= 0:
        parser.error("--runs and --trials must be at least 1, --poll-interval above 0")
    slurm_settings()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = script_context(Path(tmp) / "ctx", TRIVIAL)
        with slurm_master(args.poll_interval) as (master, shared):
            rows.append(measure(f"Slurm pool (squeue every {args.poll_interval:g} s)",
                                master, shared, ctx, args.runs, args.trials))
        with running_master("sqlite") as master:
            rows.append(measure("local agent", master, None, ctx, args.runs, args.trials))
    print(f"{args.trials} queued trials and {args.runs} first metrics, SQLite store:")
    for row in rows:
        report(row, args.trials)
    slurm, local = rows
    print(f"  Slurm against the local agent: first metric "
          f"+{statistics.median(slurm['first']) - statistics.median(local['first']):.2f} s "
          f"(medians); queue {slurm['wall'] / local['wall']:.1f}x the wall time")


if __name__ == "__main__":
    main()
