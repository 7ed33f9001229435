"""`GET /api/v1/experiments` with 1,000 experiments stored and 20 concurrent clients.

Prints p50 and p99 latency and the request rate, for PostgreSQL and SQLite.

    python bench/list_experiments.py [--experiments 1000] [--clients 20] [--requests 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _setup import percentile, running_master, script_context, single_config  # noqa: E402


def run(kind: str, experiments: int, clients: int, per_client: int) -> None:
    with running_master(kind) as master, tempfile.TemporaryDirectory() as tmp:
        ctx = script_context(Path(tmp) / "ctx", "print('never runs')\n")
        for i in range(experiments):
            r = master.create(single_config(f"exp-{i}"), context=ctx, activate=False)
            r.raise_for_status()
        latencies: list[float] = []
        lock = threading.Lock()

        def client() -> None:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {master.token}"
            mine = []
            for _ in range(per_client):
                t0 = time.perf_counter()
                r = session.get(f"{master.url}/api/v1/experiments", timeout=60)
                mine.append(time.perf_counter() - t0)
                assert r.status_code == 200 and len(r.json()["experiments"]) == 100
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        latencies.sort()
        print(f"list experiments[{kind}]: {experiments} stored, {clients} clients, "
              f"{len(latencies)} requests of 100 experiments: p50 "
              f"{percentile(latencies, 50) * 1000:.0f} ms, p99 "
              f"{percentile(latencies, 99) * 1000:.0f} ms, {len(latencies) / elapsed:.0f} req/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--db", choices=["postgresql", "sqlite", "both"], default="both")
    args = parser.parse_args()
    for kind in (["postgresql", "sqlite"] if args.db == "both" else [args.db]):
        run(kind, args.experiments, args.clients, args.requests)


if __name__ == "__main__":
    main()
