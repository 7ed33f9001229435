"""Metric ingest: 8 concurrent reporters post batched metrics through the REST API.

Prints metric rows (points) per second stored in PostgreSQL (the production store) and in
SQLite (the embedded default), each beside the ceiling of the same database: the same
reporters writing the same rows straight into a bare table (COPY on PostgreSQL, one
executemany per batch on SQLite), with no master, no index and no checks. Each reporter is its
own process with its own HTTP connection (the Core API's own client,
:class:`det_hub.core.MasterSession`), posting batches of BATCH rows with a key and the trial's
own token, where the Core API's background sender would (the master's ingest workers when it
runs them, else the master): as columns (``--form columns``, what the Core API sends) or as
rows. Every row must be stored exactly once, or the bench fails.

    python bench/ingest.py [--seconds 10] [--batch 500] [--reporters 8] [--trials 1]
                           [--db postgresql]
                           [--form columns|rows] [--no-ceiling]
                           [--master-arg=--MasterApp.ingest_workers=0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _setup import (  # noqa: E402
    fresh_database,
    percentile,
    running_master,
    script_context,
    single_config,
)

from det_hub.core import MasterSession  # noqa: E402

# Training code's own address and token, for the reporters to post as the Core API would:
# to the ingest workers where the master runs them, else to the master.
SLEEPER = """import os, time
print("REPORT-TO", os.environ.get("DET_HUB_INGEST_URL") or os.environ["DET_HUB_MASTER"],
      os.environ["DET_HUB_ALLOCATION_TOKEN"], flush=True)
time.sleep(3600)
"""


def _metrics(step: int) -> dict[str, float]:
    return {"loss": 1.0 / (step + 1), "accuracy": 0.5, "lr": 0.01}


def _body(form: str, step: int, batch: int, key: str) -> dict[str, Any]:
    steps = range(step, step + batch)
    if form == "rows":
        return {"group": "training", "key": key,
                "metrics": [{"steps_completed": s, "metrics": _metrics(s)} for s in steps]}
    rows = [_metrics(s) for s in steps]
    return {"group": "training", "key": key, "steps": list(steps),
            "metrics": {n: [r[n] for r in rows] for n in rows[0]}}


def _wait_until(start_at: float) -> None:
    while time.time() < start_at:
        time.sleep(0.001)


def reporter(url: str, token: str, trial_id: int, index: int, reporters: int, batch: int,
             seconds: float, form: str, start_at: float, out: mp.Queue) -> None:
    """Posts batches of steps taken in turn with the other reporters, as the ranks of one
    trial report: the n-th batch of reporter i holds steps from (n * reporters + i) * batch
    on, so the trial's steps advance together."""
    session = MasterSession(url, token, timeout=60)
    rows_sent, latencies, n = 0, [], 0
    _wait_until(start_at)
    deadline = start_at + seconds
    while time.time() < deadline:
        step = (n * reporters + index) * batch
        n += 1
        body = _body(form, step, batch, f"bench-{index}:{n}")
        t0 = time.perf_counter()  # the body's encoding is the client's, and inside the time
        session.post(f"/trials/{trial_id}/metrics", body)
        latencies.append(time.perf_counter() - t0)
        rows_sent += batch
    session.close()
    out.put((rows_sent, latencies))


def ceiling_reporter(url: str, index: int, batch: int, seconds: float, start_at: float,
                     out: mp.Queue) -> None:
    """Writes what a reporter sends straight into the bare table ``points``."""
    rows_sent, latencies, step = 0, [], index * 10**9
    if url.startswith("sqlite"):
        conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=60,
                                    isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    else:
        import psycopg

        conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    _wait_until(start_at)
    deadline = start_at + seconds
    while time.time() < deadline:
        rows = [(1, "training", s, json.dumps(_metrics(s))) for s in range(step, step + batch)]
        step += batch
        t0 = time.perf_counter()
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO points VALUES (?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        else:
            with conn.cursor() as cur, cur.copy(
                    "COPY points (trial_id, group_name, step, metrics) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            conn.commit()
        latencies.append(time.perf_counter() - t0)
        rows_sent += batch
    conn.close()
    out.put((rows_sent, latencies))


def _run_reporters(target: Any, args: list[tuple[Any, ...]], seconds: float
                   ) -> tuple[int, list[float]]:
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start_at = time.time() + 3.0  # let every process start before the clock runs
    procs = [ctx.Process(target=target, args=(*a, start_at, out)) for a in args]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(r[0] for r in results), sorted(x for r in results for x in r[1])


def _line(what: str, reporters: int, batch: int, seconds: float, total: int,
          latencies: list[float]) -> str:
    return (f"{what}: {reporters} reporters x batches of {batch} rows for {seconds:.0f} s: "
            f"{total / seconds:,.0f} rows/s (requests p50 "
            f"{percentile(latencies, 50) * 1000:.0f} ms, p99 "
            f"{percentile(latencies, 99) * 1000:.0f} ms)")


def run(kind: str, seconds: float, batch: int, reporters: int, form: str,
        master_args: list[str], trials: int = 1) -> float:
    """Rows stored per second, with the reporters shared out in turn among ``trials``
    running trials (one experiment each, so each needs a slot of the local agent)."""
    with running_master(kind, master_args=master_args) as master, tempfile.TemporaryDirectory() as tmp:
        context = script_context(Path(tmp) / "ctx", SLEEPER)
        experiments = [master.create_ok(single_config(f"ingest-{n}"), context=context)
                       for n in range(trials)]
        trial_ids = [master.wait(lambda e=e: master.trials(e))[0]["id"] for e in experiments]
        targets = [master.wait(lambda t=t: _report_to(master, t)) for t in trial_ids]
        via = "ingest workers" if targets[0][0] != master.url else "master"
        # Reporter n reports for trial n % trials, as the (n // trials)-th of its reporters.
        shares = [len(range(t, reporters, trials)) for t in range(trials)]
        total, latencies = _run_reporters(
            reporter, [(*targets[n % trials], trial_ids[n % trials], n // trials,
                        shares[n % trials], batch, seconds, form)
                       for n in range(reporters)], seconds)
        stored: list[int] = []
        for trial_id in trial_ids:
            answer = requests.get(f"{master.url}/api/v1/trials/{trial_id}/metrics/columns",
                                  params={"group": "training", "metric": "loss"},
                                  headers={"Authorization": f"Bearer {master.token}"},
                                  timeout=300)
            answer.raise_for_status()
            steps = answer.json()["groups"].get("training", {"steps": []})["steps"]
            if len(steps) != len(set(steps)):
                sys.exit(f"ingest[{kind}]: trial {trial_id} holds {len(steps)} rows of "
                         f"{len(set(steps))} distinct steps: a row stored twice")
            stored.extend(steps)
        for eid in experiments:
            master.api("POST", f"/experiments/{eid}/kill")
        over = f" over {trials} trials" if trials > 1 else ""
        print(_line(f"ingest[{kind}, {form}, via {via}]", reporters, batch, seconds, total,
                    latencies) + f"{over}; stored {len(stored):,} of {total:,} rows", flush=True)
        if len(stored) != total:
            sys.exit(f"ingest[{kind}]: {total} rows sent, {len(stored)} stored: not every "
                     "row stored exactly once")
        return total / seconds


def _report_to(master: Any, trial_id: int) -> tuple[str, str] | None:
    """Where the trial's training code sends metrics, and its token (from its log)."""
    for line in master.api("GET", f"/trials/{trial_id}/logs").text.splitlines():
        if "REPORT-TO" in line:
            words = json.loads(line)["message"].split()
            return words[words.index("REPORT-TO") + 1], words[words.index("REPORT-TO") + 2]
    return None


def ceiling(kind: str, seconds: float, batch: int, reporters: int) -> float:
    with fresh_database(kind) as url:
        if kind == "sqlite":
            conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"))
        else:
            import psycopg

            conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                                   autocommit=True)
        conn.execute("CREATE TABLE points (trial_id integer, group_name text, step bigint, "
                     f"metrics {'jsonb' if kind != 'sqlite' else 'text'})")
        conn.close()
        total, latencies = _run_reporters(
            ceiling_reporter, [(url, n, batch, seconds) for n in range(reporters)], seconds)
    print(_line(f"ceiling[{kind}, bare table]", reporters, batch, seconds, total, latencies),
          flush=True)
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--reporters", type=int, default=8)
    parser.add_argument("--trials", type=int, default=1,
                        help="running trials the reporters report for, in turn (each takes "
                             "a slot of the local agent)")
    parser.add_argument("--db", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--form", choices=["columns", "rows"], default="columns")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="skip the bare-table runs")
    parser.add_argument("--master-arg", action="append", default=[],
                        help="a setting for the master, e.g. "
                             "--master-arg=--MasterApp.ingest_workers=0")
    args = parser.parse_args()
    kinds = ["postgresql", "sqlite"] if args.db == "both" else [args.db]
    for kind in kinds:
        rate = run(kind, args.seconds, args.batch, args.reporters, args.form,
                   args.master_arg, args.trials)
        if not args.no_ceiling:
            top = ceiling(kind, args.seconds, args.batch, args.reporters)
            print(f"ingest[{kind}]: {rate / top:.0%} of the bare table's rate "
                  f"(cores: {os.cpu_count()})", flush=True)


if __name__ == "__main__":
    main()
