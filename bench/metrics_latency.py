"""Live metrics in notebooks: how soon a reported metric reaches a ``MetricsPlot``, and how
long a chart of a million-point trial takes to build.

(a) Latency. A Core API script reports, every 0.2 s, one training and one validation row
whose value is the wall-clock time of the report call (``sent_at``). A ``MetricsPlot`` of the
experiment, made before the trial starts, follows the master's event stream; a watcher polls
the plot's points every 2 ms and takes, for each row, the time it first holds it minus
``sent_at``. Training rows wait in the Core API's sender for up to its batch interval (0.25 s by
default, ``core.init(metric_batch_interval=...)``) before they are posted; validation rows are
posted at once, so theirs is the master-to-widget latency.

(b) Drawing. A trial of ``--points`` training rows (a noisy decaying curve) is written
straight into the database through the store, then the master serves it. Timed: a
``MetricsPlot`` of it until its stored curve is drawn (the REST call with
``max_points=1000&metric=loss``, LTTB in the master, and the chart), the REST call alone with
LTTB, the REST call with every-k-th thinning (no ``metric``), and LTTB alone over the points in
memory.

(a) runs on an SQLite store with the embedded local agent; (b) on SQLite or, with
``--db postgres``, on the PostgreSQL server named by DET_HUB_TEST_PG_URL.

    python bench/metrics_latency.py [--points 1000000] [--reports 40] [--runs 3]
                                    [--only latency|drawing] [--db sqlite|postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _setup import fresh_database, percentile, script_context  # noqa: E402

from det_hub.client import Client  # noqa: E402
from det_hub.lttb import lttb_indices  # noqa: E402
from det_hub.states import ExperimentState, TrialState  # noqa: E402
from det_hub.store import Store  # noqa: E402
from det_hub.testing import MasterProcess  # noqa: E402
from det_hub.widgets import MetricsPlot  # noqa: E402

REPORTER = """
import time
import det_hub.core as core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step in range(1, op.length + 1):
            time.sleep(0.2)
            ctx.train.report_training_metrics(steps_completed=step,
                                              metrics={"sent_at": time.time()})
            ctx.train.report_validation_metrics(steps_completed=step,
                                                metrics={"sent_at": time.time()})
        op.report_completed(0.0)
"""


def figures(label: str, values: list[float]) -> None:
    print(f"  {label}: median {statistics.median(values):.3f} s, best {min(values):.3f} s, "
          f"worst {max(values):.3f} s")


def latency(reports: int) -> dict[str, list[float]]:
    """(a): per group, the seconds from each report call to the plot holding the row."""
    with tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp) / "data", f"sqlite:///{tmp}/bench.db")
        master.start()
        try:
            context = script_context(Path(tmp) / "ctx", REPORTER)
            eid = master.create_ok({
                "name": "latency", "entrypoint": "python3 train.py",
                "searcher": {"name": "single", "metric": "validation_loss",
                             "max_length": {"batches": reports}}}, context=context)
            client = Client(master.url, master.token)
            plot = MetricsPlot(eid, metric="sent_at", client=client)
            seen: dict[str, list[float]] = {"training": [], "validation": []}
            done = threading.Event()
            tid = master.wait(lambda: master.trials(eid), timeout=30)[0]["id"]

            def watch() -> None:
                counts = dict.fromkeys(seen, 0)
                while not done.is_set():
                    now = time.time()
                    for group in seen:
                        values = plot.points(tid, group)[1]
                        seen[group].extend(now - sent_at for sent_at in values[counts[group]:])
                        counts[group] = len(values)
                    time.sleep(0.002)

            watcher = threading.Thread(target=watch)
            watcher.start()
            master.wait_state(eid, timeout=60 + reports)
            wait_until(lambda: not plot.following, 10)
            time.sleep(0.1)
            done.set()
            watcher.join()
            plot.stop()
            return seen
        finally:
            master.stop()


def drawn_plot(experiment_id: int, client: Client) -> MetricsPlot:
    """A ``MetricsPlot`` of the experiment's loss, once its stored curves are drawn."""
    plot = MetricsPlot(experiment_id, "loss", client)
    plot.wait(120)
    plot.stop()
    return plot


def wait_until(what: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)


async def fill(url: str, points: int) -> tuple[int, int]:
    """A finished experiment with one trial of ``points`` training rows; (experiment, trial)."""
    store = await Store.open(url)
    try:
        user = await store.create_user("bench")
        exp = await store.create_experiment(
            name="million", owner_id=user.id,
            config={"searcher": {"name": "single", "metric": "loss"}}, original_config="",
            context=None, state=ExperimentState.COMPLETED.value, searcher_metric="loss",
            smaller_is_better=True)
        trial = await store.create_trial(experiment_id=exp.id, request_id="r", hparams={},
                                         seed=1, state=TrialState.COMPLETED.value)
        rng = random.Random(0)
        batch = 50_000
        for start in range(0, points, batch):
            await store.add_metrics(trial.id, "training", [
                {"steps_completed": s, "metrics": {"loss": curve(s, rng)}}
                for s in range(start, min(points, start + batch))])
        return exp.id, trial.id
    finally:
        await store.close()


def curve(step: int, rng: random.Random) -> float:
    spike = 5.0 if step % 250_007 == 1 else 0.0
    return 2.0 * math.exp(-step / 200_000) + 0.05 * rng.random() + spike


def drawing(points: int, runs: int, db: str) -> dict[str, list[float]]:
    """(b): seconds for each way of drawing a ``points``-row trial."""
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, fresh_database(db) as url:
        started = time.perf_counter()
        eid, tid = asyncio.run(fill(url, points))
        print(f"  (stored {points} rows in {time.perf_counter() - started:.1f} s)")
        master = MasterProcess(Path(tmp) / "data", url)
        master.start()
        try:
            client = Client(master.url, master.token)
            timed: dict[str, Callable[[], object]] = {
                "MetricsPlot built and drawn (LTTB, 1000 points)":
                    lambda: drawn_plot(eid, client),
                "REST call, LTTB on loss":
                    lambda: client.downsampled_metrics(tid, "loss", max_points=1000),
                "REST call, every k-th row":
                    lambda: client.trial_metrics(tid, max_points=1000),
            }
            for label, call in timed.items():
                out[label] = []
                for _ in range(runs):
                    started = time.perf_counter()
                    call()
                    out[label].append(time.perf_counter() - started)
            plot = drawn_plot(eid, client)
            xs, ys = plot.points(tid)
            print(f"  (the plot holds {len(xs)} points, from step {xs[0]:.0f} to "
                  f"{xs[-1]:.0f}; highest value {max(ys):.2f})")
        finally:
            master.stop()
    rng = random.Random(0)
    xs = list(range(points))
    ys = [curve(s, rng) for s in xs]
    out["LTTB alone, in memory"] = []
    for _ in range(runs):
        started = time.perf_counter()
        lttb_indices(xs, ys, 1000)
        out["LTTB alone, in memory"].append(time.perf_counter() - started)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--reports", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["latency", "drawing"], default=None,
                        help="run only part (a) or only part (b)")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite",
                        help="the store of part (b)")
    args = parser.parse_args(argv)

    if args.only != "drawing":
        print(f"(a) report to MetricsPlot, {args.reports} reports per group:")
        seen = latency(args.reports)
        for group, values in seen.items():
            if not values:
                print(f"  {group}: no rows arrived")
                continue
            print(f"  {group} ({len(values)} rows): median {statistics.median(values):.3f} s, "
                  f"p95 {percentile(values, 95):.3f} s, worst {max(values):.3f} s")
    if args.only == "latency":
        return
    print(f"(b) drawing a {args.points}-point trial on {args.db}, {args.runs} runs:")
    for label, values in drawing(args.points, args.runs, args.db).items():
        figures(label, values)


if __name__ == "__main__":
    main()
