"""What a searcher event costs the master, store writes included, and how long a close-out takes.

``bench/searcher_cost.py`` times the search methods alone; this drives a real
:class:`~det_hub.service.experiment.ExperimentRun` on a real store (a fresh SQLite file, or a
fresh PostgreSQL database with ``--db postgresql``), with a host that starts no process: it
keeps each trial's allocation in a dict and, when a trial ends, runs the master's checkpoint
GC pass over the experiment as the master does. Trials report where the run tells them to
(``run.operation``), trial ``i`` reporting ``u(i, length) + 1 / sqrt(length)`` as in
``searcher_cost.py``, checkpoint after each report (untimed, so that GC has checkpoints to
rank), and exit as soon as their operation is done.

* **event cost at N trials** (``--trials``, default 10,000): an ``async_halving`` search with
  promotions (``stop_once: false``, 5 rungs) is first driven to N trials by its method alone;
  the trials are stored with the method's state, the run is built from them as a master
  start does, and then ``--events`` validations and exits are timed through the run, each
  with every store write it makes. p50, p99 and max of each kind: a validation that starts
  no trial (the searcher records the result), one after which a trial starts (a new one,
  or a promoted one), and a trial's exit.
* **close-out** of a 64-trial promotion-based search (``async_halving``, 3 rungs, divisor 4,
  64 trials at once): the whole search is run through the run; the figure is the event that
  closes the most trials at once (when the search ends, every trial still waiting at a rung
  is closed), and the whole search's time.

    python bench/searcher_events.py [--trials 10000] [--events 300] [--db sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
import uuid as uuid_module
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _setup import fresh_database, percentile  # noqa: E402
from searcher_cost import SPACE, metric  # noqa: E402

from det_hub.agents import ExitStatus  # noqa: E402
from det_hub.config import ExperimentConfig, parse_experiment_config  # noqa: E402
from det_hub.searcher import Create, Stop, ValidateAfter, build_search_method  # noqa: E402
from det_hub.service.checkpoint_gc import CheckpointGC  # noqa: E402
from det_hub.service.cluster import Allocation, LaunchSpec  # noqa: E402
from det_hub.service.experiment import ExperimentRun  # noqa: E402
from det_hub.states import AllocationState  # noqa: E402
from det_hub.store import Store  # noqa: E402
from det_hub.store.models import Experiment, Trial  # noqa: E402

SEED = 11
#: Where the (empty) checkpoints are, for GC to delete.
CHECKPOINTS = tempfile.mkdtemp(prefix="det-hub-bench-checkpoints-")


class Host:
    """A run's host that starts nothing: allocations live in a dict, and a trial's end runs
    the checkpoint GC pass the master runs then."""

    def __init__(self, store: Store) -> None:
        self.open: dict[int, Allocation] = {}
        self.gc = CheckpointGC(store)
        self.launched: collections.deque[Trial] = collections.deque()
        self.gc_passes = 0
        self.ended = 0
        self.launches = 0

    async def launch(self, experiment: Experiment, config: ExperimentConfig,
                     trial: Trial) -> None:
        self.launches += 1
        spec = LaunchSpec(owner="bench", slots=1, argv=["true"], env={}, cluster_info={},
                          context=None, trial_id=trial.id, experiment_id=experiment.id)
        self.open[trial.id] = Allocation(f"{trial.id}.{self.launches}", spec, token="")
        self.launched.append(trial)

    def allocation(self, trial_id: int) -> Allocation | None:
        return self.open.get(trial_id)

    async def dequeue(self, alloc: Allocation) -> bool:
        if alloc.state != AllocationState.QUEUED:
            return False
        del self.open[alloc.spec.trial_id or -1]
        return True

    async def preempt(self, alloc: Allocation) -> None:
        alloc.preempt_requested = True

    async def kill(self, alloc: Allocation) -> None:
        alloc.killed = True

    async def trials_ended(self, run: ExperimentRun, trials: list[Trial]) -> None:
        self.gc_passes += 1
        self.ended += len(trials)
        await self.gc.collect(run.row, run.trials.values())

    async def rolled_back(self, run: ExperimentRun, trial: Trial, steps: int) -> None:
        pass  # no stream follows the bench's metrics

    async def start_launched(self, run: ExperimentRun) -> list[Trial]:
        """Every queued allocation gets its slot and runs."""
        started = []
        while self.launched:
            trial = self.launched.popleft()
            alloc = self.open.get(trial.id)
            if alloc is not None and alloc.state == AllocationState.QUEUED:
                alloc.state = AllocationState.RUNNING
                await run.on_run_state(trial.id, AllocationState.RUNNING)
                started.append(trial)
        return started

    async def exit(self, run: ExperimentRun, trial: Trial) -> None:
        alloc = self.open.pop(trial.id)
        alloc.state = AllocationState.TERMINATED
        await run.on_allocation_exit(alloc, ExitStatus(0))


def asha(trials: int, rungs: int, divisor: int, concurrent: int,
         max_length: int) -> ExperimentConfig:
    return parse_experiment_config({
        "name": "bench", "entrypoint": "true", "hyperparameters": SPACE,
        "checkpoint_storage": {"type": "shared_fs", "host_path": CHECKPOINTS},
        "searcher": {"name": "async_halving", "metric": "loss", "smaller_is_better": True,
                     "max_length": {"batches": max_length}, "max_trials": trials,
                     "num_rungs": rungs, "divisor": divisor, "stop_once": False,
                     "max_concurrent_trials": concurrent}})


async def new_experiment(store: Store, config: ExperimentConfig,
                         searcher_state: dict[str, Any] | None = None) -> Experiment:
    owner = await store.get_user("bench") or await store.create_user("bench")
    row = await store.create_experiment(
        name=config.name, owner_id=owner.id, config=config.to_dict(), original_config="",
        context=None, state="ACTIVE", searcher_metric="loss", smaller_is_better=True,
        seed=SEED)
    if searcher_state is not None:
        row = await store.update_experiment(row.id, searcher_state=searcher_state)
    return row


class Driver:
    """Reports for the run's trials, round robin, where the run tells them to."""

    def __init__(self, run: ExperimentRun, host: Host) -> None:
        self.run, self.host = run, host
        self.order = {t.request_id: i for i, t in
                      enumerate(sorted(run.trials.values(), key=lambda t: t.id))}
        self.turns: collections.deque[Trial] = collections.deque()
        self.timings: list[tuple[str, float]] = []

    def add(self, trials: list[Trial]) -> None:
        for trial in trials:
            self.order.setdefault(trial.request_id, len(self.order))
            self.turns.append(trial)

    async def step(self) -> bool:
        """One event: the next running trial validates, or exits when its operation is done.
        False when nothing runs."""
        self.add(await self.host.start_launched(self.run))
        while self.turns:
            trial = self.turns.popleft()
            if trial.id in self.host.open and trial.run_state == "RUNNING":
                break
        else:
            return False
        alloc = self.host.open[trial.id]
        op = self.run.operation(trial)["operation"]
        t0 = time.perf_counter()
        if op is None or alloc.preempt_requested or trial.state != "ACTIVE":
            await self.host.exit(self.run, trial)
            kind = "exit"
        else:
            length = min([*op["validate_at"], op["length"]])
            value = metric(self.order[trial.request_id], length, SEED)
            launched = self.host.launches
            await self.run.on_validation(trial, length, value)
            self.timings.append(("validation" if self.host.launches == launched
                                 else "validation, a trial started",
                                 time.perf_counter() - t0))
            await self.checkpoint(trial, length)  # untimed: the training code's own report
            # A trial whose operation is done exits at its next turn, which comes at once:
            # training code asks for its next operation right after reporting.
            self.turns.appendleft(trial) if self.run.operation(trial)["operation"] is None \
                else self.turns.append(trial)
            return True
        self.timings.append((kind, time.perf_counter() - t0))
        return True

    async def checkpoint(self, trial: Trial, steps: int) -> None:
        """The trial checkpoints after each validation, as training code does: the GC
        passes that follow a trial's end have these to rank."""
        uuid = str(uuid_module.uuid4())
        await self.run.store.add_checkpoint(
            uuid=uuid, trial_id=trial.id, experiment_id=trial.experiment_id,
            allocation_id=None, state="COMPLETED", steps_completed=steps, resources={},
            metadata={}, storage=self.run.row.config["checkpoint_storage"])
        trial.latest_checkpoint = uuid
        await self.run.store.update_trial(trial.id, latest_checkpoint=uuid)


def method_to(trials: int, config: ExperimentConfig) -> tuple[Any, dict[str, dict[str, Any]],
                                                             set[str], dict[str, int]]:
    """The search method driven alone until it has made ``trials`` trials: the method, each
    trial's hyperparameters, the trials it closed, and each trial's length done."""
    method = build_search_method(config.searcher, config.hyperparameters, SEED)
    hparams: dict[str, dict[str, Any]] = {}
    index: dict[str, int] = {}
    target: dict[str, int] = {}
    done: dict[str, int] = {}
    closed: set[str] = set()
    queue: collections.deque[str] = collections.deque()

    def apply(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Create):
                index[action.request_id] = len(index)
                hparams[action.request_id] = dict(action.hparams)
                done[action.request_id] = 0
                apply(method.on_trial_created(action.request_id))
            elif isinstance(action, ValidateAfter):
                target[action.request_id] = action.length
                queue.append(action.request_id)
            elif isinstance(action, Stop) and action.request_id not in closed:
                closed.add(action.request_id)
                apply(method.on_trial_closed(action.request_id))

    apply(method.initial_actions())
    while queue and len(hparams) < trials:
        rid = queue.popleft()
        if rid in closed or done[rid] >= target.get(rid, 0):
            continue
        ahead = [n for n in method.validation_lengths(rid) if n > done[rid]]
        length = min(ahead) if ahead else target[rid]
        done[rid] = length
        apply(method.on_validation(rid, metric(index[rid], length, SEED), length))
        if done[rid] < target[rid]:
            queue.append(rid)
        elif not method.is_waiting(rid) and rid not in closed:
            closed.add(rid)
            apply(method.on_trial_closed(rid))
    return method, hparams, closed, done


async def event_cost(url: str, trials: int, events: int) -> dict[str, Any]:
    config = asha(trials * 10, rungs=5, divisor=4, concurrent=16, max_length=4 ** 5)
    t0 = time.perf_counter()
    method, hparams, closed, done = method_to(trials, config)
    store = await Store.open(url)
    try:
        row = await new_experiment(store, config, {"method": method.snapshot(),
                                                   "completed_lengths": done})
        for rid, hp in hparams.items():
            await store.create_trial(experiment_id=row.id, request_id=rid, hparams=hp,
                                     seed=1, state="COMPLETED" if rid in closed else "ACTIVE")
        setup = time.perf_counter() - t0
        host = Host(store)
        stored = await store.list_trials(row.id)
        run = await ExperimentRun.restore(row, config, stored, store, host)
        driver = Driver(run, host)
        running = [t for t in stored if t.state == "ACTIVE"
                   and not method.is_waiting(t.request_id)]
        for trial in running:
            await host.launch(row, config, trial)
        driver.add(await host.start_launched(run))
        while len(driver.timings) < events and await driver.step():
            pass
        by_kind: dict[str, list[float]] = collections.defaultdict(list)
        for kind, seconds in driver.timings:
            by_kind[kind].append(seconds * 1000)
        return {"trials": len(run.trials), "setup_s": setup, "kinds": {
            kind: {"events": len(ms), "p50_ms": percentile(sorted(ms), 50),
                   "p99_ms": percentile(sorted(ms), 99), "max_ms": max(ms)}
            for kind, ms in sorted(by_kind.items())}}
    finally:
        await store.close()


async def close_out(url: str) -> dict[str, Any]:
    config = asha(64, rungs=3, divisor=4, concurrent=64, max_length=64)
    store = await Store.open(url)
    try:
        host = Host(store)
        row = await new_experiment(store, config)
        run = ExperimentRun(row, config, [], store, host)
        started = time.perf_counter()
        await run.start()
        driver = Driver(run, host)
        # The event that closed the most trials: seconds, trials closed, GC passes.
        ending = (0.0, 0, 0)
        while not run.done.is_set():
            ended_before, passes_before = host.ended, host.gc_passes
            if not await driver.step():
                raise RuntimeError("the search stopped with nothing running and not done")
            closed = host.ended - ended_before
            if closed > ending[1]:
                ending = (driver.timings[-1][1], closed, host.gc_passes - passes_before)
        total = time.perf_counter() - started
        return {"trials": len(run.trials), "close_out_s": ending[0],
                "closed_in_close_out": ending[1], "gc_passes": ending[2], "search_s": total,
                "events": len(driver.timings),
                "slowest_event_s": max(s for _, s in driver.timings)}
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    kind = "sqlite" if args.db == "sqlite" else "postgres"
    with fresh_database(kind) as url:
        out = asyncio.run(close_out(url))
    print(f"close-out, {args.db}: {out['trials']} trials; the event that closed the most "
          f"trials ({out['closed_in_close_out']}, {out['gc_passes']} GC passes) took "
          f"{out['close_out_s']:.3f} s; whole "
          f"search {out['search_s']:.1f} s over {out['events']} events, slowest "
          f"{out['slowest_event_s']:.3f} s")
    with fresh_database(kind) as url:
        out = asyncio.run(event_cost(url, args.trials, args.events))
    print(f"event cost, {args.db}, {out['trials']} trials (setup {out['setup_s']:.0f} s):")
    for kind, figures in out["kinds"].items():
        print(f"  {kind}: p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, "
              f"max {figures['max_ms']:.2f} ms over {figures['events']} events")


if __name__ == "__main__":
    main()
