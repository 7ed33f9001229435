"""Short trials: an adaptive ASHA search of 1 ms batches on a real master, beside Optuna.

The problem is the synthetic learning curves of ``_search_problems.py`` (a batch sleeps
``--unit-ms``, 1 ms; a trial trains at most ``--max-length`` batches, 937). Both sides search
the same space with the same number of trials N on the same W slots (2):

* det_hub: a real ``det-hub master`` (SQLite, the embedded local agent with W CPU slots) runs
  an ``adaptive_asha`` search (``mode: aggressive``, ``stop_once: true``, divisor 4, 3 rungs:
  one bracket whose rungs are R/16, R/4 and R, as Optuna's single one),
  ``max_concurrent_trials: W`` (W + ``--queued``). Each trial is a Core API script that uses
  only the public loop: it trains batch by batch, reports a validation at each of the
  searcher's rungs (``op.validate_at``) and at the operation's end, and asks
  ``core_context.preempt.should_preempt()`` after every batch; when it answers True the
  script returns. As it ends it reports one training row with the batches it trained and the
  seconds it spent training (``busy_s``: its batches and validations, nothing else).
* Optuna: ``SuccessiveHalvingPruner(min_resource=R/16, reduction_factor=4)`` in threads
  (``study.optimize(n_jobs=W)``, in-memory storage), reporting at the same rungs and asking
  ``should_prune`` there. It is given the N configurations det_hub's search trained, in the
  order det_hub created them (``enqueue_trial``), so both sides train the same candidates.

Figures, per search:

* wall: det_hub from just before the experiment is created to its ``ended_at``; Optuna around
  ``study.optimize``.
* slot utilisation: busy slot-seconds of trials training (the ``busy_s`` of every trial) over
  W x wall.
* compute: batches trained, every trial's.
* late stops: batches a trial trained after the validation the searcher stopped it on. A
  stop-mode ASHA stops a trial only on that trial's own report at a rung, so these are the
  batches trained past the trial's last validation; 0 means the decision reached the trial
  at its rung.

With ``--check``, exits non-zero naming each target missed, in any seed: slot utilisation at
least 0.8, wall at most 1.5 x Optuna's, and no batch trained after a stop decision.

    python bench/short_trials.py [--trials 16[,64]] [--seeds 3] [--slots 2] [--queued 0]
        [--unit-ms 1]
        [--max-length 937] [--db sqlite|postgresql] [--check] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _search_problems import Problem, ProblemSpec, make_problem  # noqa: E402
from _setup import fresh_database  # noqa: E402

from det_hub.testing import TERMINAL, MasterProcess  # noqa: E402

DIVISOR = 4
RUNGS = 3
#: The targets ``--check`` holds every search to.
MIN_UTILISATION = 0.8
MAX_WALL_RATIO = 1.5

#: The trial: one configuration of the synthetic curves, trained with the public Core API loop.
TRIAL_SCRIPT = '''\
"""One configuration of the synthetic curves, trained with the Core API's public loop."""

import json
import time
from pathlib import Path

import det_hub.core as core
from _search_problems import ProblemSpec, make_problem


def main() -> None:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None, "not run as a trial"
    spec = ProblemSpec(**json.loads(Path("problem.json").read_text()))
    run = make_problem(spec).new_run(info.trial.hparams)
    busy, trained = 0.0, 0
    with core.init() as core_context:
        try:
            for op in core_context.searcher.operations():
                points = {*op.validate_at, op.length}
                metric = None
                while run.length < op.length:
                    began = time.perf_counter()
                    run.train_to(run.length + 1)
                    validate = run.length in points
                    if validate:
                        metric = run.validate()
                    busy += time.perf_counter() - began
                    trained += 1
                    if validate:
                        core_context.train.report_validation_metrics(
                            steps_completed=run.length, metrics={"loss": metric})
                    if core_context.preempt.should_preempt():
                        return
                op.report_completed(metric)
        finally:
            core_context.train.report_training_metrics(
                steps_completed=run.length, metrics={"busy_s": busy, "trained": trained})


if __name__ == "__main__":
    main()
'''


@dataclasses.dataclass
class Search:
    """One search's figures."""

    wall: float
    busy: float
    slots: int
    batches: int
    trials: int
    stopped: int
    #: Batches each late-stopped trial trained after its stop decision (only those > 0).
    late: list[int]
    configs: list[dict[str, Any]]

    @property
    def utilisation(self) -> float:
        return self.busy / (self.slots * self.wall)

    @property
    def extra(self) -> int:
        return sum(self.late)


def rung_lengths(problem: Problem, trials: int, slots: int, max_length: int,
                 seed: int) -> list[int]:
    """The rungs det_hub's search validates at, from the search method itself."""
    from det_hub.searcher import build_search_method

    method = build_search_method(searcher_config(problem, trials, slots, max_length),
                                 problem.space, seed)
    [bracket] = method.brackets
    return list(bracket.lengths)


def searcher_config(problem: Problem, trials: int, concurrent: int,
                    max_length: int) -> dict[str, Any]:
    return {"name": "adaptive_asha", "metric": problem.metric, "smaller_is_better": True,
            "max_length": {"batches": max_length}, "max_trials": trials,
            "max_concurrent_trials": concurrent, "mode": "aggressive", "stop_once": True,
            "divisor": DIVISOR, "max_rungs": RUNGS}


def _epoch(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_det_hub(master: MasterProcess, context: Path, problem: Problem, trials: int,
                slots: int, seed: int, queued: int = 0) -> Search:
    """One adaptive ASHA search on ``master``; every figure from what its trials reported."""
    spec = problem.spec
    (context / "problem.json").write_text(json.dumps(dataclasses.asdict(spec)))
    config = {
        "name": f"short-trials-{trials}-{seed}", "entrypoint": "python3 train.py",
        "hyperparameters": problem.space,
        "searcher": searcher_config(problem, trials, slots + queued, spec.max_length),
        "reproducibility": {"experiment_seed": seed},
        "max_restarts": 0,
    }
    began = time.time()
    eid = master.create_ok(config, context=context)
    # Looked at twice a second: the wall time is the master's own ended_at, and reading the
    # experiment ten times a second (every trial's summary) took CPU from the trials.
    exp = master.wait(lambda: (e := master.experiment(eid))["state"] in TERMINAL and e,
                      timeout=60 + 5 * trials, every=0.5)
    if exp["state"] != "COMPLETED":
        raise RuntimeError(f"experiment {eid} ended {exp['state']}")
    wall = _epoch(exp["ended_at"]) - began
    busy, batches, stopped, late, configs = 0.0, 0, 0, [], []
    for trial in sorted(master.trials(eid), key=lambda t: t["id"]):
        tid = trial["id"]
        if trial["state"] != "COMPLETED":
            raise RuntimeError(f"trial {tid} ended {trial['state']}; its last lines:\n"
                               + "\n".join(master.logs(tid)[-20:]))
        rows = master.get(f"/trials/{tid}/metrics")["metrics"]
        ends = [r for r in rows if r["group"] == "training" and "busy_s" in r["metrics"]]
        validations = [r["steps_completed"] for r in rows if r["group"] == "validation"]
        if len(ends) != 1 or not validations:
            raise RuntimeError(f"trial {tid} reported {len(ends)} end rows and "
                               f"{len(validations)} validations; its script ran once and "
                               f"validated at its first rung")
        [end] = ends
        busy += float(end["metrics"]["busy_s"])
        trained = int(end["metrics"]["trained"])
        if trained != end["steps_completed"]:
            raise RuntimeError(f"trial {tid} trained {trained} batches but ended at "
                               f"{end['steps_completed']}")
        batches += trained
        if max(validations) < spec.max_length:
            stopped += 1
        past = trained - max(validations)
        if past > 0:
            late.append(past)
        configs.append(problem.normalize(trial["hparams"]))
    return Search(wall, busy, slots, batches, len(configs), stopped, late, configs)


def run_optuna(problem: Problem, configs: Sequence[dict[str, Any]], slots: int,
               points: Sequence[int], seed: int) -> Search:
    """Optuna's successive halving over ``configs`` in ``slots`` threads."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=points[0], reduction_factor=DIVISOR, min_early_stopping_rate=0)
    study = optuna.create_study(direction="minimize", pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    for config in configs:
        study.enqueue_trial(dict(config))
    lock = threading.Lock()
    ends: list[tuple[float, int, int]] = []  # (busy_s, trained, last validation)
    final = points[-1]

    def objective(trial: optuna.Trial) -> float:
        run = problem.new_run(problem.optuna_params(trial))
        busy, last = 0.0, 0
        try:
            while True:
                began = time.perf_counter()
                run.train_to(run.length + 1)
                validate = run.length in points
                metric = run.validate() if validate else math.nan
                busy += time.perf_counter() - began
                if not validate:
                    continue
                last = run.length
                if run.length == final:
                    return metric
                trial.report(metric, run.length)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        finally:
            with lock:
                ends.append((busy, run.length, last))

    began = time.perf_counter()
    study.optimize(objective, n_trials=len(configs), n_jobs=slots)
    wall = time.perf_counter() - began
    failed = [t.number for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    if failed:
        raise RuntimeError(f"optuna trials {failed} failed")
    late = [trained - last for _, trained, last in ends if trained > last]
    return Search(wall, sum(b for b, _, _ in ends), slots, sum(t for _, t, _ in ends),
                  len(ends), sum(1 for _, _, last in ends if last < final), late,
                  [problem.normalize(t.params) for t in study.trials])


def start_master(data: Path, db_url: str, slots: int, extra: list[str]) -> MasterProcess:
    master = MasterProcess(data, db_url, [f"--LocalAgent.max_cpu_slots={slots}", *extra])
    master.start()
    have = sum(len(a["slots"]) for a in master.get("/agents")["agents"])
    if have != slots:
        master.stop()
        sys.exit(f"short_trials: the local agent has {have} slots here, not {slots} "
                 f"(the host has {os.cpu_count()} cores); pass --slots {have}")
    return master


def describe(label: str, s: Search) -> str:
    late = (f"{s.extra} in {len(s.late)} of {s.stopped} stopped trials (median "
            f"{statistics.median(s.late):g}, max {max(s.late)})" if s.late
            else f"0 ({s.stopped} trials stopped)")
    return (f"  {label:8s} wall {s.wall:6.2f} s, slot utilisation {s.utilisation:.3f}, "
            f"{s.batches} batches ({s.trials} trials), busy {s.busy:.2f} slot-s, "
            f"late stops: {late}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="16",
                        help="N, or several comma-separated (16,64); default 16")
    parser.add_argument("--seeds", type=int, default=3, help="searches of each N (default 3)")
    parser.add_argument("--slots", type=int, default=2, help="W slots (default 2)")
    parser.add_argument("--queued", type=int, default=0,
                        help="trials the search keeps queued beside the W running ones "
                             "(max_concurrent_trials W + QUEUED; default 0). Determined's "
                             "default max_concurrent_trials (16) queues the rest of a search, "
                             "which is what lets LocalAgent.warm_start prepare them")
    parser.add_argument("--unit-ms", type=float, default=1.0,
                        help="milliseconds of sleep per batch (default 1)")
    parser.add_argument("--max-length", type=int, default=937,
                        help="R, batches a trial trains at most (default 937)")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero if a search misses a target")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--master-arg", action="append", default=[],
                        help="a setting for the master, e.g. --master-arg="
                             "--LocalAgent.warm_start=False (repeatable)")
    args = parser.parse_args(argv)
    try:
        counts = [int(n) for n in args.trials.split(",")]
    except ValueError:
        parser.error(f"--trials: {args.trials!r} is not a comma-separated list of integers")
    if min(counts) < 1 or args.seeds < 1 or args.slots < 1 or args.max_length < DIVISOR ** 2 \
            or args.queued < 0:
        parser.error("--trials, --seeds and --slots must be at least 1, --queued at least 0, "
                     f"--max-length at least {DIVISOR ** 2}")

    print(f"short trials: adaptive_asha (aggressive, stop_once, divisor {DIVISOR}, {RUNGS} "
          f"rungs) on a det_hub master ({args.db}, local agent, {args.slots} slots) beside "
          f"Optuna's SuccessiveHalvingPruner in {args.slots} threads; R={args.max_length} "
          f"batches of {args.unit_ms:g} ms; {os.cpu_count()} CPUs, 1-min load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    missed: list[str] = []
    results: list[dict[str, Any]] = []
    with fresh_database(args.db) as url, tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp) / "context"
        context.mkdir()
        (context / "train.py").write_text(TRIAL_SCRIPT)
        shutil.copy(Path(__file__).parent / "_search_problems.py", context)
        master = start_master(Path(tmp) / "data", url, args.slots, args.master_arg)
        try:
            for trials in counts:
                for seed in range(args.seeds):
                    spec = ProblemSpec("synthetic", args.max_length, seed,
                                       unit_seconds=args.unit_ms / 1000)
                    problem = make_problem(spec)
                    points = rung_lengths(problem, trials, args.slots, args.max_length, seed)
                    ours = run_det_hub(master, context, problem, trials, args.slots, seed,
                                       args.queued)
                    theirs = run_optuna(problem, ours.configs, args.slots, points, seed)
                    if sorted(map(json.dumps, theirs.configs)) != \
                            sorted(map(json.dumps, ours.configs)):
                        raise RuntimeError("Optuna trained other configurations than det_hub")
                    ratio = ours.wall / theirs.wall
                    print(f"N={trials} seed {seed}: rungs {points}; det_hub wall "
                          f"{ratio:.1f} x Optuna's", flush=True)
                    print(describe("det_hub", ours), flush=True)
                    print(describe("optuna", theirs), flush=True)
                    results.append({"trials": trials, "seed": seed, "rungs": points,
                                    "wall_ratio": ratio,
                                    **{name: {**dataclasses.asdict(s),
                                              "utilisation": s.utilisation, "extra": s.extra}
                                       for name, s in (("det_hub", ours),
                                                       ("optuna", theirs))}})
                    where = f"N={trials} seed {seed}"
                    if ours.utilisation < MIN_UTILISATION:
                        missed.append(f"{where}: slot utilisation {ours.utilisation:.3f} < "
                                      f"{MIN_UTILISATION}")
                    if ratio > MAX_WALL_RATIO:
                        missed.append(f"{where}: wall {ours.wall:.2f} s is {ratio:.2f} x "
                                      f"Optuna's {theirs.wall:.2f} s > {MAX_WALL_RATIO} x")
                    if ours.extra:
                        missed.append(f"{where}: {ours.extra} batches trained after stop "
                                      "decisions")
        finally:
            master.stop()
    for trials in counts:
        mine = [r for r in results if r["trials"] == trials]
        print(f"N={trials}, median of {len(mine)}: det_hub wall "
              f"{statistics.median(r['det_hub']['wall'] for r in mine):.2f} s (Optuna "
              f"{statistics.median(r['optuna']['wall'] for r in mine):.2f} s), utilisation "
              f"{statistics.median(r['det_hub']['utilisation'] for r in mine):.3f} (Optuna "
              f"{statistics.median(r['optuna']['utilisation'] for r in mine):.3f}), batches "
              f"{statistics.median(r['det_hub']['batches'] for r in mine):g} (Optuna "
              f"{statistics.median(r['optuna']['batches'] for r in mine):g}), batches after "
              f"stop decisions {sum(r['det_hub']['extra'] for r in mine)} in all")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"figures written to {args.json}")
    if args.check and missed:
        sys.exit("short_trials: targets missed: " + "; ".join(missed))


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"benchmark took {time.perf_counter() - began:.0f} s")
