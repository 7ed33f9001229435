"""Metric ingest: 8 concurrent reporters post batched metrics through the REST API.

Prints metric rows per second stored in PostgreSQL (the production store), and the same for
SQLite. Each reporter is its own process with its own HTTP connection, posting batches of
BATCH rows as the Core API's background sender does.

    python bench/ingest.py [--seconds 10] [--batch 500] [--reporters 8] [--db postgresql]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _setup import percentile, running_master, script_context, single_config  # noqa: E402

SLEEPER = "import time\ntime.sleep(3600)\n"


def reporter(url: str, token: str, trial_id: int, index: int, batch: int, seconds: float,
             start_at: float, out: mp.Queue) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    rows_sent, latencies, step = 0, [], index * 10**9
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.time() < deadline:
        rows = [{"steps_completed": step + i,
                 "metrics": {"loss": 1.0 / (step + i + 1), "accuracy": 0.5, "lr": 0.01}}
                for i in range(batch)]
        step += batch
        t0 = time.perf_counter()
        r = session.post(f"{url}/api/v1/trials/{trial_id}/metrics",
                         json={"group": "training", "metrics": rows}, timeout=60)
        latencies.append(time.perf_counter() - t0)
        r.raise_for_status()
        rows_sent += batch
    out.put((rows_sent, latencies))


def run(kind: str, seconds: float, batch: int, reporters: int) -> None:
    with running_master(kind) as master, tempfile.TemporaryDirectory() as tmp:
        eid = master.create_ok(single_config("ingest"), context=script_context(
            Path(tmp) / "ctx", SLEEPER))
        trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
        ctx = mp.get_context("spawn")
        out: mp.Queue = ctx.Queue()
        start_at = time.time() + 3.0  # let every process start before the clock runs
        procs = [ctx.Process(target=reporter, args=(master.url, master.token, trial_id, n,
                                                    batch, seconds, start_at, out))
                 for n in range(reporters)]
        for p in procs:
            p.start()
        results = [out.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        total = sum(r[0] for r in results)
        latencies = sorted(x for r in results for x in r[1])
        stored = len(master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"])
        master.api("POST", f"/experiments/{eid}/kill")
        print(f"ingest[{kind}]: {reporters} reporters x batches of {batch} rows for "
              f"{seconds:.0f} s: {total / seconds:,.0f} rows/s "
              f"(requests p50 {percentile(latencies, 50) * 1000:.0f} ms, "
              f"p99 {percentile(latencies, 99) * 1000:.0f} ms; stored {stored:,} of "
              f"{total:,} rows)")
        if stored != total:
            sys.exit(f"ingest[{kind}]: {total - stored} rows were lost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--reporters", type=int, default=8)
    parser.add_argument("--db", choices=["postgresql", "sqlite", "both"], default="both")
    args = parser.parse_args()
    kinds = ["postgresql", "sqlite"] if args.db == "both" else [args.db]
    for kind in kinds:
        run(kind, args.seconds, args.batch, args.reporters)


if __name__ == "__main__":
    main()
