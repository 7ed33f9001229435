"""Time from `experiment create` to the first reported metric, for a trivial Core API script.

The clock starts when the create request is sent and stops when the master has stored the
trial's first metric (polled every 10 ms through the API). SQLite store, local agent.

    python bench/first_metric.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master, script_context, single_config  # noqa: E402

TRIVIAL = """
import det_hub.core as core
with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with running_master("sqlite") as master, tempfile.TemporaryDirectory() as tmp:
        ctx = script_context(Path(tmp) / "ctx", TRIVIAL)
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            eid = master.create_ok(single_config("first-metric"), context=ctx)
            trial = master.wait(lambda eid=eid: master.trials(eid), every=0.01)[0]
            master.wait(lambda t=trial["id"]: master.get(f"/trials/{t}/metrics")["metrics"],
                        every=0.01)
            times.append(time.perf_counter() - t0)
            master.wait_state(eid)
        print(f"first metric: median {statistics.median(times):.2f} s, best {min(times):.2f} s,"
              f" worst {max(times):.2f} s over {args.runs} experiments")


if __name__ == "__main__":
    main()
