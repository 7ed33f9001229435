"""How long the ``det-hub`` command takes to start: ``--help``, and ``experiment list``
against a running master.

Each round runs, one after the other, ``python -c pass`` (the interpreter's own start, the
floor under every figure), ``det-hub --help``, ``det --help`` (Determined's spelling, the same
entry point) and ``det-hub experiment list`` against a master on a fresh database holding a
few paused experiments; the rounds interleave the commands so that a busy moment of the
machine falls on all of them alike. Prints the median and the spread of each.

With ``--check``, exits non-zero naming each target missed: ``det-hub --help`` (and
``det --help``) at most 0.25 s, ``det-hub experiment list`` at most 0.4 s (medians).

    python bench/cli_start.py [--runs 15] [--experiments 10] [--db sqlite] [--check]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master, script_context, single_config  # noqa: E402

BIN = Path(sys.executable).parent

#: The medians a command must not exceed, in seconds, by the label it is printed under.
TARGETS = {"det-hub --help": 0.25, "det --help": 0.25, "det-hub experiment list": 0.4}


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds ``argv`` takes from start to exit, and its standard output; a command that
    fails stops the benchmark with its output."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"cli_start: {' '.join(argv)} exited {done.returncode}:\n"
                 f"{done.stdout}{done.stderr}")
    return elapsed, done.stdout


def run(kind: str, runs: int, experiments: int) -> dict[str, list[float]]:
    """Seconds of each run of each command, by label."""
    with running_master(kind) as master, tempfile.TemporaryDirectory() as tmp:
        ctx = script_context(Path(tmp) / "ctx", "print('never runs')\n")
        names = [f"cli-start-{i}" for i in range(experiments)]
        for name in names:
            master.create(single_config(name), context=ctx, activate=False).raise_for_status()
        # The master and token come from the environment, as a user's shell would give them.
        env = dict(os.environ, DET_HUB_MASTER=master.url, DET_HUB_TOKEN=master.token)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "det-hub --help": [str(BIN / "det-hub"), "--help"],
            "det --help": [str(BIN / "det"), "--help"],
            "det-hub experiment list": [str(BIN / "det-hub"), "experiment", "list"],
        }
        # One untimed round first: the files are in the page cache before the clock runs.
        for argv in commands.values():
            time_once(argv, env)
        times: dict[str, list[float]] = {label: [] for label in commands}
        for _ in range(runs):
            for label, argv in commands.items():
                elapsed, out = time_once(argv, env)
                times[label].append(elapsed)
                if label.endswith("--help") and "usage:" not in out:
                    sys.exit(f"cli_start: {label} printed no usage:\n{out}")
                if label == "det-hub experiment list":
                    missing = [n for n in names if n not in out]
                    if missing:
                        sys.exit(f"cli_start: {label} did not list {', '.join(missing)}:\n{out}")
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--experiments", type=int, default=10,
                        help="paused experiments the master holds for the listing")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero if a median misses its target")
    args = parser.parse_args()
    times = run(args.db, args.runs, args.experiments)
    floor = statistics.median(times["python -c pass"])
    missed = []
    for label, values in times.items():
        median = statistics.median(values)
        target = TARGETS.get(label)
        over = f", {median - floor:.3f} s over python" if label != "python -c pass" else ""
        goal = f"; target <= {target:.2f} s" if target is not None else ""
        print(f"cli start[{args.db}] {label}: median {median:.3f} s (min {min(values):.3f}, "
              f"max {max(values):.3f}, {len(values)} runs{over}{goal})")
        if target is not None and median > target:
            missed.append(f"{label}: median {median:.3f} s > {target:.2f} s")
    if args.check and missed:
        sys.exit("cli_start: targets missed: " + "; ".join(missed))


if __name__ == "__main__":
    main()
