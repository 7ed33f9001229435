"""Reading a curve back: 100,000 points of one metric of a trial, every one of them.

Stores N points (default 100,000) of ``loss`` (with ``accuracy`` and ``lr`` beside it, as
bench/ingest.py reports them) for a trial on a fresh master, then reads the whole ``loss``
curve back, median of RUNS reads each:

* REST, rows: ``GET /api/v1/trials/{id}/metrics?group=training`` (a JSON object per point);
* REST, columns: ``GET /api/v1/trials/{id}/metrics/columns?group=training&metric=loss``;
* SDK: ``Client.trial_metric_columns`` and ``Client.trial_metrics_frame`` (a pandas frame).

The target for the bulk reads is 0.3 s; ``--check`` fails when one misses it, or when a read
does not return every point.

    python bench/read_curve.py [--points 100000] [--runs 5] [--db postgresql] [--check]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master, script_context, single_config  # noqa: E402

from det_hub.client import Client  # noqa: E402

SLEEPER = "import time\ntime.sleep(3600)\n"
TARGET_S = 0.3


def _timed(read: Callable[[], int], runs: int, points: int, what: str) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got = read()
        times.append(time.perf_counter() - t0)
        if got != points:
            sys.exit(f"read_curve: {what} returned {got:,} points of {points:,}")
    return statistics.median(times)


def run(kind: str, points: int, runs: int, check: bool) -> list[str]:
    missed: list[str] = []
    with running_master(kind) as master, tempfile.TemporaryDirectory() as tmp:
        eid = master.create_ok(single_config("curve"), context=script_context(
            Path(tmp) / "ctx", SLEEPER))
        trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {master.token}"
        base = f"{master.url}/api/v1/trials/{trial_id}"
        for start in range(0, points, 5_000):
            steps = list(range(start, min(start + 5_000, points)))
            session.post(f"{base}/metrics", json={
                "group": "training", "steps": steps,
                "metrics": {"loss": [1.0 / (s + 1) for s in steps],
                            "accuracy": [0.5] * len(steps), "lr": [0.01] * len(steps)}},
                timeout=120).raise_for_status()
        client = Client(master.url, token=master.token)

        def rows() -> int:
            answer = session.get(f"{base}/metrics", params={"group": "training"}, timeout=300)
            answer.raise_for_status()
            return len(answer.json()["metrics"])

        def columns() -> int:
            answer = session.get(f"{base}/metrics/columns",
                                 params={"group": "training", "metric": "loss"}, timeout=300)
            answer.raise_for_status()
            return len(answer.json()["groups"]["training"]["metrics"]["loss"])

        def sdk_columns() -> int:
            return len(client.trial_metric_columns(trial_id, "training", ["loss"])
                       ["training"]["metrics"]["loss"])

        def sdk_frame() -> int:
            frame: Any = client.trial_metrics_frame(trial_id, "training", ["loss"])
            return len(frame["loss"])

        reads = [("REST rows", rows, False), ("REST columns", columns, True),
                 ("SDK columns", sdk_columns, True), ("SDK pandas frame", sdk_frame, True)]
        for what, read, bulk in reads:
            seconds = _timed(read, runs, points, what)
            print(f"read_curve[{kind}]: {points:,} points, {what}: {seconds:.3f} s "
                  f"(median of {runs})", flush=True)
            if bulk and seconds > TARGET_S:
                missed.append(f"{kind} {what}: {seconds:.3f} s > {TARGET_S} s")
        master.api("POST", f"/experiments/{eid}/kill")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--db", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--check", action="store_true",
                        help=f"fail when a bulk read takes more than {TARGET_S} s")
    args = parser.parse_args()
    kinds = ["postgresql", "sqlite"] if args.db == "both" else [args.db]
    missed = [m for kind in kinds for m in run(kind, args.points, args.runs, args.check)]
    if args.check and missed:
        sys.exit("read_curve: targets missed: " + "; ".join(missed))


if __name__ == "__main__":
    main()
