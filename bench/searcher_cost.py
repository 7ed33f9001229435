"""The searcher's decision cost per validation event as trials grow to 10,000, against Optuna.

No master, database or training: each search method (a pure object) is driven by a small
simulated master that applies its actions as ``det_hub/service/experiment.py`` does (``Create`` -> ``on_trial_created``, ``ValidateAfter`` -> a new target,
``Stop`` -> the trial closes at its next step, a waiting trial parks until promoted or
stopped). Trials take turns round robin, one validation per turn; trial ``i`` (in creation
order) reports the metric ``u(i, length) + 1 / sqrt(length)`` at each length, ``u`` a seeded
uniform draw, so every search, det_hub's and Optuna's, sees the same value for the same trial
and length. A trial validates where the master tells it: ASHA's rungs (``validation_lengths``)
and its target; a ``random`` trial, which has none below its target, at the same lengths as
the 5-rung schedule (as a ``min_validation_period`` would make it).

The searches are ``adaptive_asha`` (default ``mode: standard``: brackets of 5, 4 and 3 rungs)
with ``stop_once`` true and false, ``async_halving`` with 5 rungs and ``random``, each with
``max_trials`` ``--trials``, 16 trials at once (``max_concurrent_trials``' default), then
``adaptive_asha`` and ``random`` with ``sampler: tpe`` at ``--tpe-trials``.

Each measurement runs in a fresh process, timed with ``time.perf_counter_ns``; the driver's
own bookkeeping is outside the clock. The garbage collector runs as it does in the master, so
its passes are in the figures (in the p99 of events; for ``snapshot()``, whose tens of
thousands of new containers set off collections, a second figure is taken with it off):

* decision, per validation event: the method's ``on_validation`` plus ``on_trial_created`` of
  every trial it creates in response (ASHA creates a replacement when it stops one);
  ``closes``: ``on_trial_closed`` plus what it creates (``random`` creates its next trial
  there, so its sampling cost shows in that column). p50 and p99 over the events in each
  bucket of how many trials existed when the event came: 1-100, 901-1,100, 9,001-10,000 (and
  the last tenth of ``--trials`` when that is another size).
* persisted state, when the search first holds 100, 1,000 and ``--trials`` trials (median of
  ``--repeat``): ``snapshot()`` (and with the collector off); ``json.dumps`` of it, which the master does (through
  SQLAlchemy's JSON column) after every event, and its size in bytes (the master's stored
  document adds ``completed_lengths``, one entry per trial); restore, what a master start
  does: ``json.loads`` + ``build_search_method`` + ``restore``; and ``progress()``, which the
  master also calls after every event, given every trial's length.
* Optuna: an in-memory study, ``RandomSampler``, ``SuccessiveHalvingPruner`` with
  ``min_resource`` the bottom rung of the 5-rung schedule (10,000 / 4**4 = 39 by default) and
  ``reduction_factor`` ``--divisor``, the same number of trials in flight as ``async_halving``
  (16), each asked with the same space; an event is ``trial.report(value, step)`` plus
  ``trial.should_prune()`` at each rung below the top, and where the trial ends there (pruned,
  or at the top rung with ``tell(value)``) also ``tell`` and the ``ask()`` of the next trial,
  so that it covers what det_hub's decision event covers.
* TPE, whose cost grows with its history: one draw of det_hub's ``sampler: tpe`` (multivariate
  optuna TPE over the results at one length, as ``random`` search gives it) with 100, 1,000
  and 10,000 results told; its first draw after a restore (it rebuilds its study from the
  history); and ``ask()`` of an Optuna study holding the same results, with the default
  ``TPESampler()`` (univariate) and with ``TPESampler(multivariate=True)``. Whole ``random``
  and ``adaptive_asha`` searches with ``sampler: tpe`` run at ``--tpe-trials``.

    python bench/searcher_cost.py [--trials 10000] [--tpe-trials 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _setup import percentile  # noqa: E402

from det_hub.searcher import (  # noqa: E402
    Create,
    SearchMethod,
    Stop,
    ValidateAfter,
    build_search_method,
)
from det_hub.searcher.asha import initial_concurrency, rung_lengths  # noqa: E402
from det_hub.searcher.samplers import RandomSampler, TPESampler  # noqa: E402

SPACE: dict[str, Any] = {
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "lr": {"type": "log", "minval": -5, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 8},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam"]},
}
NUM_RUNGS = 5  # async_halving's, and the top of adaptive_asha's brackets for these sizes
CONCURRENCY = 16  # max_concurrent_trials' default
RESULT = "RESULT"  # marks the line with a part's figures in its output


def metric(index: int, length: int, seed: int) -> float:
    """The value trial ``index`` reports after ``length`` units: the same in every search."""
    noise = random.Random((seed * 1_000_003 + index) * 1_000_033 + length).random()
    return noise + 1.0 / math.sqrt(length)


def buckets_for(trials: int) -> list[tuple[int, int]]:
    """Trial-count buckets: 1-100, 901-1,100, 9,001-10,000, and the last tenth of ``trials``."""
    found = [(lo, hi) for lo, hi in ((1, 100), (901, 1100), (9001, 10000)) if hi <= trials]
    last = (int(trials * 0.9) + 1, trials)
    if not any(lo <= last[0] <= hi or lo <= last[1] <= hi for lo, hi in found):
        found.append(last)
    return found


def state_points(trials: int) -> list[int]:
    return sorted({n for n in (100, 1000, trials) if n <= trials})


class Run:
    """What one search gave: (trials existing, ns) per decision and per close, and the
    persisted-state figures at each of :func:`state_points`."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.decisions: list[tuple[int, int]] = []
        self.closes: list[tuple[int, int]] = []
        self.states: dict[int, dict[str, float]] = {}
        self.seconds = 0.0
        self.trials = 0

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        run = cls(data["label"])
        run.decisions = [(n, ns) for n, ns in data["decisions"]]
        run.closes = [(n, ns) for n, ns in data["closes"]]
        run.states = {int(n): s for n, s in data["states"].items()}
        run.seconds, run.trials = data["seconds"], data["trials"]
        return run


def measure_state(method: SearchMethod, make: Callable[[], SearchMethod],
                  done: Mapping[str, int], repeat: int) -> dict[str, float]:
    snap, dumps, restore, progress, quiet = [], [], [], [], []
    text = ""
    for _ in range(repeat):
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            method.snapshot()
            quiet.append(time.perf_counter_ns() - t0)
        finally:
            gc.enable()
        t0 = time.perf_counter_ns()
        state = method.snapshot()
        t1 = time.perf_counter_ns()
        text = json.dumps(state)
        t2 = time.perf_counter_ns()
        fresh = make()
        fresh.restore(json.loads(text))
        t3 = time.perf_counter_ns()
        method.progress(done)
        t4 = time.perf_counter_ns()
        snap.append(t1 - t0)
        dumps.append(t2 - t1)
        restore.append(t3 - t2)
        progress.append(t4 - t3)
    med = statistics.median
    return {"snapshot": med(snap) / 1e6, "quiet": med(quiet) / 1e6,
            "dumps": med(dumps) / 1e6, "bytes": len(text),
            "restore": med(restore) / 1e6, "progress": med(progress) / 1e6}


def drive(label: str, searcher: dict[str, Any], seed: int, repeat: int,
          schedule: list[int]) -> Run:
    """Run one det_hub search to its end (see the module docstring)."""
    run = Run(label)

    def make() -> SearchMethod:
        return build_search_method(searcher, SPACE, seed)

    method = make()
    index: dict[str, int] = {}
    target: dict[str, int] = {}
    done: dict[str, int] = {}
    stopping: set[str] = set()
    queue: collections.deque[str] = collections.deque()
    queued: set[str] = set()
    created_ns = 0
    points = state_points(searcher["max_trials"])

    def push(request_id: str) -> None:
        if request_id not in queued:
            queued.add(request_id)
            queue.append(request_id)

    def apply(actions: list[Any]) -> None:
        nonlocal created_ns
        for action in actions:
            if isinstance(action, Create):
                index[action.request_id] = len(index)
                done[action.request_id] = 0
                t0 = time.perf_counter_ns()
                more = method.on_trial_created(action.request_id)
                created_ns += time.perf_counter_ns() - t0
                apply(more)
            elif isinstance(action, ValidateAfter):
                target[action.request_id] = action.length
                push(action.request_id)
            elif isinstance(action, Stop):
                stopping.add(action.request_id)
                push(action.request_id)

    def timed(call: Callable[[], list[Any]]) -> int:
        nonlocal created_ns
        created_ns = 0
        t0 = time.perf_counter_ns()
        actions = call()
        elapsed = time.perf_counter_ns() - t0
        apply(actions)
        return elapsed + created_ns

    gc.collect()
    started = time.perf_counter()
    apply(method.initial_actions())
    while queue:
        if points and len(index) >= points[0]:
            t0 = time.perf_counter()
            run.states[points.pop(0)] = measure_state(method, make, done, repeat)
            started += time.perf_counter() - t0  # not part of the run's own time
        rid = queue.popleft()
        queued.discard(rid)
        existing = len(index)
        if rid in stopping:
            run.closes.append((existing, timed(lambda rid=rid: method.on_trial_closed(rid))))
            continue
        ahead = [n for n in method.validation_lengths(rid) if n > done[rid]]
        ahead += [n for n in schedule if done[rid] < n < target[rid]]
        length = min(ahead) if ahead else target[rid]
        done[rid] = length
        value = metric(index[rid], length, seed)
        run.decisions.append((existing, timed(
            lambda rid=rid, value=value, length=length: method.on_validation(rid, value, length)
        )))
        if rid in stopping or done[rid] < target[rid]:
            push(rid)
        elif not method.is_waiting(rid):
            run.closes.append((existing, timed(lambda rid=rid: method.on_trial_closed(rid))))
    run.seconds = time.perf_counter() - started
    run.trials = len(index)
    if not method.shutdown:
        raise RuntimeError(f"{label}: the search did not shut down")
    return run


def drive_optuna(trials: int, lengths: list[int], divisor: int, seed: int) -> Run:
    """The Optuna side (see the module docstring)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dist = optuna.distributions
    space = {
        "x": dist.FloatDistribution(0.0, 1.0),
        "lr": dist.FloatDistribution(1e-5, 1e-1, log=True),
        "layers": dist.IntDistribution(1, 8),
        "optimizer": dist.CategoricalDistribution(["sgd", "adam"]),
    }
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=lengths[0], reduction_factor=divisor, min_early_stopping_rate=0),
    )
    run = Run(f"optuna SHA pruner, {trials:,} trials")
    asked = 0
    # Each entry: [trial, index of the next rung it reports at].
    active: collections.deque[list[Any]] = collections.deque()
    gc.collect()
    started = time.perf_counter()
    for _ in range(min(CONCURRENCY, trials)):
        active.append([study.ask(space), 0])
        asked += 1
    top = len(lengths) - 1
    while active:
        entry = active.popleft()
        trial, rung = entry
        step = lengths[rung]
        value = metric(trial.number, step, seed)
        existing = asked
        t0 = time.perf_counter_ns()
        trial.report(value, step)
        if rung < top and not trial.should_prune():
            entry[1] = rung + 1
            active.append(entry)
        else:
            if rung < top:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, value)
            if asked < trials:
                active.append([study.ask(space), 0])
                asked += 1
        run.decisions.append((existing, time.perf_counter_ns() - t0))
    run.seconds = time.perf_counter() - started
    run.trials = asked
    return run


def tpe_draws(sizes: list[int], seed: int, repeat: int) -> list[dict[str, float]]:
    """ms per draw of det_hub's TPE sampler and of Optuna's TPE with ``n`` results."""
    import optuna

    rows = []
    for n in sizes:
        rng = random.Random(seed)
        tpe = TPESampler(SPACE, smaller_is_better=True)
        uniform = RandomSampler(SPACE, smaller_is_better=True)
        for i in range(n):
            tpe.tell(uniform.sample(rng), 10_000, metric(i, 10_000, seed))
        gc.collect()
        state = json.loads(json.dumps(tpe.snapshot()))
        t0 = time.perf_counter()
        restored = TPESampler(SPACE, smaller_is_better=True)
        restored.restore(state)
        restored.sample(random.Random(seed))
        first = time.perf_counter() - t0
        draws = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            tpe.sample(rng)
            draws.append(time.perf_counter() - t0)
        # The same results in a plain Optuna study (tpe's own distributions and values).
        study = optuna.create_study(direction="minimize")
        study.add_trials([
            optuna.trial.create_trial(params=params, distributions=tpe._distributions, value=value)
            for params, _, value in tpe._history
        ])
        asks: dict[str, float] = {}
        for name, multivariate in (("optuna", False), ("optuna_mv", True)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.sampler = optuna.samplers.TPESampler(seed=seed, multivariate=multivariate)
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                trial = study.ask(tpe._distributions)
                times.append(time.perf_counter() - t0)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # out of TPE's sight
            asks[name] = statistics.median(times) * 1000
        rows.append({"n": n, "det_hub": statistics.median(draws) * 1000, "first": first * 1000,
                     **asks})
    return rows


# --- printing -----------------------------------------------------------------------------
def _us(values: list[int], q: float) -> str:
    return f"{percentile([v / 1000 for v in values], q):,.1f}" if values else "-"


def print_decisions(runs: list[Run], buckets_of: Callable[[Run], list[tuple[int, int]]]) -> None:
    print("\nDecision cost per validation event, and per close (µs; see the docstring)")
    header = (f"{'search':<44} {'trials':>13} {'events':>7} {'p50':>9} {'p99':>9}"
              f" {'closes':>7} {'p50':>8} {'p99':>8}")
    print(header)
    print("-" * len(header))
    for run in runs:
        for i, (lo, hi) in enumerate(buckets_of(run)):
            dec = [ns for n, ns in run.decisions if lo <= n <= hi]
            clo = [ns for n, ns in run.closes if lo <= n <= hi]
            label = run.label if i == 0 else ""
            print(f"{label:<44} {f'{lo:,}-{hi:,}':>13} {len(dec):>7,} {_us(dec, 50):>9}"
                  f" {_us(dec, 99):>9} {len(clo) if run.closes else '':>7} "
                  f"{_us(clo, 50) if run.closes else '':>8} {_us(clo, 99) if run.closes else '':>8}")
        total = len(run.decisions) + len(run.closes)
        print(f"{'':<44} {'whole run':>13} {total:>7,} events, {run.trials:,} trials, "
              f"{run.seconds:.1f} s with the driver")


def print_states(runs: list[Run]) -> None:
    print("\nPersisted state, per event in the master (ms, median; see the docstring)")
    header = (f"{'search':<44} {'trials':>7} {'snapshot':>9} {'(no gc)':>8} {'dumps':>8}"
              f" {'bytes':>11} {'restore':>8} {'progress':>9}")
    print(header)
    print("-" * len(header))
    for run in runs:
        for i, (n, s) in enumerate(sorted(run.states.items(), key=lambda kv: int(kv[0]))):
            label = run.label if i == 0 else ""
            print(f"{label:<44} {int(n):>7,} {s['snapshot']:>9.2f} {s['quiet']:>8.2f} {s['dumps']:>8.2f}"
                  f" {int(s['bytes']):>11,} {s['restore']:>8.1f} {s['progress']:>9.2f}")


def print_tpe(rows: list[dict[str, float]]) -> None:
    print("\nTPE: ms per draw with n results at one length (median; see the docstring)")
    header = (f"{'results':>8} {'det_hub tpe':>12} {'first after restore':>20}"
              f" {'optuna TPE ask':>15} {'optuna mv TPE ask':>18}")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{int(row['n']):>8,} {row['det_hub']:>12.1f} {row['first']:>20.1f}"
              f" {row['optuna']:>15.1f} {row['optuna_mv']:>18.1f}")


def searches(n: int, tpe_n: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"adaptive_asha stop_once=true, {n:,}",
         {"name": "adaptive_asha", "max_trials": n, "stop_once": True}),
        (f"adaptive_asha stop_once=false, {n:,}",
         {"name": "adaptive_asha", "max_trials": n, "stop_once": False}),
        (f"async_halving {NUM_RUNGS} rungs, {n:,}",
         {"name": "async_halving", "max_trials": n, "num_rungs": NUM_RUNGS}),
        (f"random, {n:,}", {"name": "random", "max_trials": n}),
        (f"adaptive_asha stop_once=true tpe, {tpe_n:,}",
         {"name": "adaptive_asha", "max_trials": tpe_n, "stop_once": True, "sampler": "tpe"}),
        (f"random tpe, {tpe_n:,}", {"name": "random", "max_trials": tpe_n, "sampler": "tpe"}),
    ]


def run_part(part: str, args: argparse.Namespace) -> Any:
    """One measurement, in this process: ``search:I``, ``optuna`` or ``tpe:N``."""
    schedule = rung_lengths(NUM_RUNGS, args.divisor, args.max_length)
    kind, _, arg = part.partition(":")
    if kind == "search":
        label, searcher = searches(args.trials, args.tpe_trials)[int(arg)]
        base = {"metric": "loss", "max_length": {"batches": args.max_length},
                "divisor": args.divisor}
        return drive(label, {**base, **searcher}, args.seed, args.repeat, schedule).to_json()
    if kind == "optuna":
        return drive_optuna(args.trials, schedule, args.divisor, args.seed).to_json()
    if kind == "tpe":
        return tpe_draws([int(arg)], args.seed, args.repeat)[0]
    raise ValueError(f"unknown part {part!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000,
                        help="max_trials of each search (default 10,000)")
    parser.add_argument("--max-length", type=int, default=10_000, help="in batches")
    parser.add_argument("--divisor", type=int, default=4)
    parser.add_argument("--tpe-trials", type=int, default=2_000,
                        help="max_trials of the searches with sampler: tpe (default 2,000: "
                             "a draw's cost grows with the results it learns from)")
    parser.add_argument("--tpe-history", default="100,1000,10000",
                        help="results told before timing single TPE draws")
    parser.add_argument("--repeat", type=int, default=5,
                        help="repetitions of each state and TPE measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-optuna", action="store_true",
                        help="leave out Optuna's pruner (the slowest part)")
    parser.add_argument("--part", help=argparse.SUPPRESS)  # one measurement, run by main
    args = parser.parse_args()
    if args.part:
        print(RESULT, json.dumps(run_part(args.part, args)))
        return

    import optuna

    schedule = rung_lengths(NUM_RUNGS, args.divisor, args.max_length)
    assert initial_concurrency(CONCURRENCY, args.divisor, NUM_RUNGS, args.trials) == min(
        CONCURRENCY, args.trials)
    print(f"Python {sys.version.split()[0]}, optuna {optuna.__version__}; max_length "
          f"{args.max_length:,} batches, divisor {args.divisor}, rungs {schedule}; "
          f"1-min load average {os.getloadavg()[0]:.2f}", flush=True)
    # Each measurement in a fresh process: the objects one leaves behind would otherwise make
    # the garbage collector's passes in the next one longer.
    parts = [f"search:{i}" for i in range(len(searches(args.trials, args.tpe_trials)))]
    parts += [] if args.skip_optuna else ["optuna"]
    parts += [f"tpe:{n}" for n in args.tpe_history.split(",") if n]
    forwarded = [f"--trials={args.trials}", f"--max-length={args.max_length}",
                 f"--divisor={args.divisor}", f"--tpe-trials={args.tpe_trials}",
                 f"--repeat={args.repeat}", f"--seed={args.seed}"]
    results: dict[str, Any] = {}
    for part in parts:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, f"--part={part}", *forwarded],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"{part} failed:\n{done.stdout}{done.stderr}")
        line = next(x for x in done.stdout.splitlines() if x.startswith(RESULT))
        results[part] = json.loads(line[len(RESULT):])
        print(f"  {part}: {time.perf_counter() - t0:.1f} s", flush=True)

    runs = [Run.from_json(data) for part, data in results.items() if not part.startswith("tpe")]
    print_decisions(runs, lambda run: buckets_for(run.trials))
    print_states([r for r in runs if r.states])
    print_tpe([data for part, data in results.items() if part.startswith("tpe")])
    print(f"1-min load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
