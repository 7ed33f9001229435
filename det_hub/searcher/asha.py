"""Asynchronous successive halving (ASHA): the rung logic of one bracket, and ``async_halving``.

A bracket has ``num_rungs`` rungs; rung ``i`` trains trials to
``max(int(max_length / divisor ** (num_rungs - 1 - i)), 1)`` units, so the top rung is
``max_length``. Two ways to run it, as in Determined:

``stop_once: true`` (asynchronous successive halving with early stopping, Determined's
``asha_stopping.go``)
    Each trial is told to train straight to ``max_length`` and reports validations on the way.
    A validation at a length of at least a rung's target counts for that rung (one report can
    pass several rungs). At each rung passed, the trial's result is ranked among the rung's
    results so far; it continues if it is among the best ``max(int(n / divisor), 1)`` of the
    ``n`` results, else it is stopped, for good. :meth:`validation_lengths` names the rungs
    below the target, and the master passes them to the trial (``validate_at``), so the
    harness validates there without a ``min_validation_period`` set to match.

``stop_once: false`` (promotion-based ASHA, Determined's ``asha.go``, the ASHA paper's promote
step)
    Each trial is told to train to its rung's length. When it reports there, it is promoted at
    once (a :class:`ValidateAfter` with the next rung's length) if it ranks among the best
    ``int((n + 1) / divisor)`` of the rung; otherwise it waits (:meth:`is_waiting`), and is
    promoted later if another trial's result raises that count to include it. Once every trial
    of the bracket has a bottom-rung result, trials in rungs that can no longer promote are
    stopped.

Either way a new trial is created whenever fewer trials are training than the bracket's
concurrency and fewer than its ``max_trials`` have been created, so the number training stays at
the initial count as Determined's does. An ERRORED trial (or one that ends before reporting at
its rung) takes the worst result of its rung; if that worst result is ever promoted, it is
passed up as the worst result of the next rung, never trained. An INVALID_HP trial's results
are removed and it is replaced by a trial that does not count against ``max_trials``.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
from collections.abc import Callable, Mapping, Set
from typing import Any

from det_hub.config import SearcherConfig
from det_hub.searcher._base import (
    ERRORED,
    INVALID_HP,
    Action,
    SearchMethod,
    Stop,
    ValidateAfter,
)
from det_hub.searcher.samplers import Sampler, build_sampler

# Trial states within a bracket.
TRAINING = "training"  # has a target it has not reported at yet; holds a slot
WAITING = "waiting"  # reported at its rung, not promoted (stop_once: false only)
STOPPING = "stopping"  # told to stop, not closed yet
FINISHING = "finishing"  # reported at the top rung; ends by itself
CLOSED = "closed"

_WORST = math.inf

#: Makes a new trial for a bracket: given its first target, returns its request id,
#: hyperparameters and the actions that create it.
_NewTrial = Callable[[int], "tuple[str, Mapping[str, Any], list[Action]]"]
#: Tells the sampler a result: hyperparameters, length, metric (in the metric's own sign).
_Tell = Callable[[Mapping[str, Any], int, float], None]


def rung_lengths(num_rungs: int, divisor: float, max_length: int) -> list[int]:
    """Each rung's target length: ``max_length`` divided by ``divisor`` once per rung above it,
    truncated, at least 1 (Determined's ``makeRungs``)."""
    return [
        max(int(float(max_length) / math.pow(divisor, num_rungs - i - 1)), 1)
        for i in range(num_rungs)
    ]


def initial_concurrency(
    max_concurrent_trials: int, divisor: float, num_rungs: int, max_trials: int
) -> int:
    """How many trials a bracket trains at once: ``max_concurrent_trials`` (at most
    ``max_trials``), or when that is 0, ``divisor ** (num_rungs - 1)`` clamped to
    ``1..max_trials``, enough for one trial to reach the top rung (Determined's
    ``initialTrials``)."""
    if max_concurrent_trials > 0:
        return min(max_concurrent_trials, max_trials)
    return max(min(int(math.pow(divisor, num_rungs - 1)), max_trials), 1)


@dataclasses.dataclass
class _Trial:
    request_id: str
    hparams: Mapping[str, Any]
    rung: int = 0  # the rung it trains towards (or reported at, when waiting or stopped)
    state: str = TRAINING
    done: int = 0  # the longest length it reported at
    metric: float | None = None  # its last reported metric, smaller is better
    errored: bool = False
    invalid: bool = False

    @property
    def ending(self) -> bool:
        """Closed, or told to stop: it trains no further."""
        return self.state in (CLOSED, STOPPING)

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "hparams": dict(self.hparams),
            "rung": self.rung,
            "state": self.state,
            "done": self.done,
            "metric": self.metric,
            "errored": self.errored,
            "invalid": self.invalid,
        }


@dataclasses.dataclass
class _Result:
    request_id: str
    metric: float | None  # smaller is better; None: the worst possible (the trial exited)
    promoted: bool = False

    @property
    def key(self) -> float:
        return _WORST if self.metric is None else self.metric


class AshaBracket:
    """One bracket of successive halving: its rungs, its trials and their states.

    Pure bookkeeping; the search method owning it supplies new trials through ``new_trial`` (a
    callable returning the request id, hyperparameters and actions of a new trial) and turns
    the returned actions over to the master.

    Args:
        index: the bracket's position in its search (0 for ``async_halving``).
        num_rungs: how many rungs.
        max_trials: how many trials it creates (INVALID_HP replacements not counted).
        concurrency: how many of its trials train at once.
        divisor: the rung-to-rung reduction factor.
        max_length: the top rung's length.
        stop_once: early stopping (True) or promotion (False), see the module docstring.
        smaller_is_better: whether lower metric values are better.
    """

    def __init__(
        self,
        index: int,
        num_rungs: int,
        max_trials: int,
        concurrency: int,
        divisor: float,
        max_length: int,
        stop_once: bool,
        smaller_is_better: bool = True,
    ) -> None:
        self.index = index
        self.num_rungs = num_rungs
        self.max_trials = max_trials
        self.concurrency = concurrency
        self.divisor = divisor
        self.stop_once = stop_once
        # Results are kept as "smaller is better": metric * sign.
        self._sign = 1.0 if smaller_is_better else -1.0
        self.lengths = rung_lengths(num_rungs, divisor, max_length)
        self.rungs: list[list[_Result]] = [[] for _ in range(num_rungs)]
        self.trials: dict[str, _Trial] = {}
        # Tallies kept up to date by _move (every change of a trial's state or rung goes through
        # it), so that what every event asks (how many train, is the bracket done, does any
        # trial train towards or wait at a rung) costs O(rungs), not a pass over every trial:
        # with thousands of trials those passes were most of the cost of an event.
        self._training_at = [0] * num_rungs
        self._waiting_at = [0] * num_rungs
        self._closed = 0
        self._invalid = 0

    # --- questions ----------------------------------------------------------------------
    @property
    def counted(self) -> int:
        """Trials created that count towards ``max_trials``."""
        return len(self.trials) - self._invalid

    @property
    def training(self) -> int:
        return sum(self._training_at)

    @property
    def done(self) -> bool:
        """Every trial it will create is created and closed."""
        return self.counted >= self.max_trials and self._closed == len(self.trials)

    def target_length(self, request_id: str) -> int | None:
        trial = self.trials.get(request_id)
        if trial is None:
            return None
        return self.lengths[-1] if self.stop_once else self.lengths[trial.rung]

    def is_waiting(self, request_id: str) -> bool:
        trial = self.trials.get(request_id)
        return trial is not None and trial.state == WAITING

    def planned_units(self) -> int:
        """Units the bracket is expected to train: every trial to the bottom rung, then as many
        to each next rung as the rule lets through (``int(n / divisor)`` promoted; at least one
        continuing with ``stop_once``)."""
        units, reaching, below = 0, self.max_trials, 0
        for i, length in enumerate(self.lengths):
            if i > 0:
                reaching = int(reaching / self.divisor)
                if self.stop_once:
                    reaching = max(reaching, 1)
            units += reaching * (length - below)
            below = length
        return units

    def units_done(self, lengths_done: Mapping[str, int]) -> int:
        """Units trained so far, each trial counted up to the rung it trains towards."""
        return sum(
            min(lengths_done.get(rid, 0), self.lengths[trial.rung])
            for rid, trial in self.trials.items()
        )

    def trials_ended(self, lengths_done: Mapping[str, int], closed: Set[str]) -> float:
        """How many of the bracket's trials have ended, each open one counted by the share of
        the longest length it has trained. A trial replaced for invalid hyperparameters keeps
        counting by what it trained (its replacement counts as a trial of its own), so the
        figure never goes back."""
        longest = self.lengths[-1]
        return sum(1.0 if rid in closed and not trial.invalid
                   else min(1.0, lengths_done.get(rid, 0) / longest)
                   for rid, trial in self.trials.items())

    # --- events -------------------------------------------------------------------------
    def fill(self, new_trial: _NewTrial) -> list[Action]:
        """Create trials while fewer than the concurrency are training and fewer than
        ``max_trials`` have been created."""
        actions: list[Action] = []
        while self.counted < self.max_trials and self.training < self.concurrency:
            request_id, hparams, created = new_trial(self.first_target())
            trial = _Trial(request_id, hparams)
            self.trials[request_id] = trial
            self._tally(trial, 1)
            actions.extend(created)
        return actions

    def first_target(self) -> int:
        return self.lengths[-1] if self.stop_once else self.lengths[0]

    def on_validation(
        self, request_id: str, metric: float, length: int, tell: _Tell
    ) -> list[Action]:
        trial = self.trials.get(request_id)
        if trial is None or trial.state != TRAINING:
            return []  # stale: the trial was already ranked for its target, or is ending
        trial.done = max(trial.done, length)
        value = _smaller_is_better(metric, self._sign)
        if self.stop_once:
            return self._rank_stop_once(trial, value, length, tell)
        if length < self.lengths[trial.rung]:
            return []  # a validation on the way, not the rung's result
        trial.metric = value
        return self._record(trial.rung, trial, value, tell)

    def on_trial_ended(self, request_id: str, reason: str | None, tell: _Tell) -> list[Action]:
        """The trial closed (``reason`` None) or exited early for ``reason``."""
        trial = self.trials.get(request_id)
        if trial is None or trial.state == CLOSED:
            return []
        before = trial.state
        self._move(trial, state=CLOSED)
        if reason == ERRORED:
            trial.errored = True
        if reason == INVALID_HP:
            trial.invalid = True
            self._invalid += 1
            for rung in self.rungs[: trial.rung + 1]:
                rung[:] = [r for r in rung if r.request_id != request_id]
            return []
        if before != TRAINING:
            return []
        # Ended before it reported at its rung: it takes the rung's worst result.
        if self.stop_once:
            self._insert(trial.rung, _Result(request_id, None), before_equal=True)
            return []
        return self._record(trial.rung, trial, None, tell)

    def close_out(self) -> list[Action]:
        """Stop waiting trials that can no longer be promoted (``stop_once: false``): once
        every trial has a bottom-rung result, in each rung from the bottom up that no trial is
        still training towards (Determined's ``closeOutRungs``)."""
        if self.stop_once or len(self.rungs[0]) < self.max_trials:
            return []
        actions: list[Action] = []
        for index, rung in enumerate(self.rungs):
            if self._training_at[index]:
                break
            if not self._waiting_at[index]:
                # Only waiting trials are stopped here, and a trial whose result in a rung is
                # not promoted is still at that rung: with none waiting at it, there is nothing
                # to stop, and its (possibly thousands of) results need not be looked at.
                continue
            for result in rung:
                trial = self.trials[result.request_id]
                if not result.promoted and trial.state == WAITING:
                    self._move(trial, state=STOPPING)
                    actions.append(Stop(trial.request_id))
        return actions

    # --- stop_once: rank at every rung passed -------------------------------------------
    def _rank_stop_once(
        self, trial: _Trial, value: float | None, length: int, tell: _Tell
    ) -> list[Action]:
        trial.metric = value
        for index in range(trial.rung, self.num_rungs):
            self._move(trial, rung=index)
            if length < self.lengths[index]:
                return []
            result = _Result(trial.request_id, value)
            position = self._insert(index, result, before_equal=True)
            if value is not None:
                tell(trial.hparams, self.lengths[index], value * self._sign)
            if index == self.num_rungs - 1:
                self._move(trial, state=FINISHING)
                return []
            keep = max(int(len(self.rungs[index]) / self.divisor), 1)
            if position >= keep:
                self._move(trial, state=STOPPING)
                return [Stop(trial.request_id)]
            result.promoted = True
        return []

    # --- stop_once: false, promotion ----------------------------------------------------
    def _record(self, index: int, trial: _Trial, value: float | None, tell: _Tell) -> list[Action]:
        """``trial`` has result ``value`` at rung ``index`` (None: the worst); promote whoever
        that lets through (Determined's ``promoteAsync``)."""
        if value is not None:
            tell(trial.hparams, self.lengths[index], value * self._sign)
        if index == self.num_rungs - 1:
            self._insert(index, _Result(trial.request_id, value), before_equal=False)
            if trial.state == TRAINING:
                self._move(trial, state=FINISHING)  # it reached max_length and ends by itself
            elif trial.state == WAITING:
                # Promoted to the top on an earlier report: done, but parked without a slot.
                self._move(trial, state=STOPPING)
                return [Stop(trial.request_id)]
            return []
        if not trial.ending:
            self._move(trial, state=WAITING)
        actions: list[Action] = []
        for promoted_id in self._promotions(index, trial.request_id, value):
            promoted = self.trials[promoted_id]
            self._move(promoted, rung=index + 1)
            next_length = self.lengths[index + 1]
            if promoted.ending:
                # As if it had trained on and got the worst result (Determined does the same
                # for trials that exited).
                actions.extend(self._record(index + 1, promoted, None, tell))
            elif promoted.done >= next_length:
                # Its last report was already as long as the next rung: it counts there too.
                actions.extend(self._record(index + 1, promoted, promoted.metric, tell))
            else:
                self._move(promoted, state=TRAINING)
                actions.append(ValidateAfter(promoted_id, next_length))
        return actions

    def _promotions(self, index: int, request_id: str, value: float | None) -> list[str]:
        rung = self.rungs[index]
        # The best int(n / divisor) of a rung's n results should be promoted; adding one result
        # raises that number by at most one.
        before = int(len(rung) / self.divisor)
        after = int((len(rung) + 1) / self.divisor)
        result = _Result(request_id, value)
        position = self._insert(index, result, before_equal=False)
        if position < after:
            result.promoted = True
            return [request_id]
        if after != before and not rung[before].promoted:
            rung[before].promoted = True
            return [rung[before].request_id]
        return []

    # --- helpers ------------------------------------------------------------------------
    def _insert(self, index: int, result: _Result, before_equal: bool) -> int:
        # Rungs are kept best first. Determined places a new result before equal ones when
        # stopping and after them when promoting; ties are rare but kept the same.
        insort = bisect.bisect_left if before_equal else bisect.bisect_right
        position = insort(self.rungs[index], result.key, key=_result_key)
        self.rungs[index].insert(position, result)
        return position

    def _move(self, trial: _Trial, state: str | None = None, rung: int | None = None) -> None:
        """Change a trial's state or rung, keeping the tallies in step."""
        self._tally(trial, -1)
        if state is not None:
            trial.state = state
        if rung is not None:
            trial.rung = rung
        self._tally(trial, 1)

    def _tally(self, trial: _Trial, sign: int) -> None:
        if trial.state == TRAINING:
            self._training_at[trial.rung] += sign
        elif trial.state == WAITING:
            self._waiting_at[trial.rung] += sign
        elif trial.state == CLOSED:
            self._closed += sign

    # --- persistence and display --------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "rungs": [[[r.request_id, r.metric, r.promoted] for r in rung] for rung in self.rungs],
            "trials": [t.to_json() for t in self.trials.values()],
        }

    def load_json(self, state: Mapping[str, Any]) -> None:
        self.rungs = [
            [_Result(rid, None if m is None else float(m), bool(p)) for rid, m, p in rung]
            for rung in state["rungs"]
        ]
        self.trials = {}
        for data in state["trials"]:
            trial = _Trial(
                request_id=data["request_id"],
                hparams=data["hparams"],
                rung=int(data["rung"]),
                state=data["state"],
                done=int(data["done"]),
                metric=None if data["metric"] is None else float(data["metric"]),
                errored=bool(data["errored"]),
                invalid=bool(data["invalid"]),
            )
            self.trials[trial.request_id] = trial
        self._training_at = [0] * self.num_rungs
        self._waiting_at = [0] * self.num_rungs
        self._closed = 0
        for trial in self.trials.values():
            self._tally(trial, 1)
        self._invalid = sum(1 for t in self.trials.values() if t.invalid)

    def table(self) -> dict[str, Any]:
        rungs = []
        for index, rung in enumerate(self.rungs):
            results = [
                {
                    "request_id": r.request_id,
                    "metric": None if r.metric is None else r.metric * self._sign,
                    "promoted": r.promoted,
                }
                for r in rung
            ]
            finite = [r.metric for r in rung if r.metric is not None]
            rungs.append(
                {
                    "index": index,
                    "length": self.lengths[index],
                    "reported": len(rung),
                    "best_metric": min(finite) * self._sign if finite else None,
                    "promoted": sum(1 for r in rung if r.promoted),
                    "request_ids": [r.request_id for r in rung],
                    "results": results,
                    "training": [
                        t.request_id
                        for t in self.trials.values()
                        if t.state == TRAINING and t.rung == index
                    ],
                }
            )
        return {
            "index": self.index,
            "num_rungs": self.num_rungs,
            "max_trials": self.max_trials,
            "max_concurrent_trials": self.concurrency,
            "trials_created": self.counted,
            "trials_invalid": sum(1 for t in self.trials.values() if t.invalid),
            "rungs": rungs,
        }


_result_key = operator.attrgetter("key")


def _smaller_is_better(metric: float, sign: float) -> float | None:
    # A NaN ranks as the worst result (as a trial that exited does); infinities compare as
    # the numbers they are.
    if math.isnan(metric):
        return None
    return float(metric) * sign


class AsyncHalvingSearch(SearchMethod):
    """``async_halving``: one ASHA bracket of ``num_rungs`` rungs and ``max_trials`` trials.

    ``max_concurrent_trials`` trials train at a time; 0 means ``divisor ** (num_rungs - 1)``
    (at most ``max_trials``), as in Determined. See the module docstring for the rules.
    Subclasses (``adaptive_asha``) run several brackets side by side; each trial belongs to the
    bracket that created it and its events go there.
    """

    name = "async_halving"

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(config, space, seed)
        if self.max_length is None:
            raise ValueError(
                f"searcher.max_length: required by the {self.name} searcher "
                "(or time_metric with max_time)"
            )
        if config.max_trials is None:
            raise ValueError(f"searcher.max_trials: required by the {self.name} searcher")
        self.max_trials = config.max_trials
        self.divisor = config.divisor
        self.stop_once = config.stop_once
        self.sampler: Sampler = build_sampler(config.sampler, space, config.smaller_is_better)
        self.brackets = self._make_brackets(config)
        self.bracket_of: dict[str, int] = {}

    def _make_brackets(self, config: SearcherConfig) -> list[AshaBracket]:
        if config.num_rungs is None:
            raise ValueError("searcher.num_rungs: required by the async_halving searcher")
        assert self.max_length is not None and config.max_trials is not None
        concurrency = initial_concurrency(
            config.max_concurrent_trials, config.divisor, config.num_rungs, config.max_trials
        )
        return [
            AshaBracket(
                0,
                config.num_rungs,
                config.max_trials,
                concurrency,
                config.divisor,
                self.max_length,
                config.stop_once,
                config.smaller_is_better,
            )
        ]

    # --- events -------------------------------------------------------------------------
    def initial_actions(self) -> list[Action]:
        actions: list[Action] = []
        for bracket in self.brackets:
            actions.extend(bracket.fill(self._new_trial_for(bracket)))
        return actions

    def on_validation(self, request_id: str, metric: float, length: int) -> list[Action]:
        bracket = self._bracket(request_id)
        if bracket is None:
            return []
        actions = bracket.on_validation(request_id, metric, length, self.sampler.tell)
        return self._after(bracket, actions)

    def on_trial_closed(self, request_id: str) -> list[Action]:
        return self._ended(request_id, None)

    def on_trial_exited_early(self, request_id: str, reason: str) -> list[Action]:
        return self._ended(request_id, reason)

    # --- questions ----------------------------------------------------------------------
    def target_length(self, request_id: str) -> int | None:
        bracket = self._bracket(request_id)
        return None if bracket is None else bracket.target_length(request_id)

    def validation_lengths(self, request_id: str) -> list[int]:
        bracket = self._bracket(request_id)
        target = self.target_length(request_id)
        if bracket is None or target is None:
            return []
        return [length for length in bracket.lengths if length < target]

    def is_waiting(self, request_id: str) -> bool:
        bracket = self._bracket(request_id)
        return bracket is not None and bracket.is_waiting(request_id)

    def progress(self, lengths_done: Mapping[str, int]) -> float:
        """Units trained over the units the brackets are expected to train, and never more
        than the share of the search's trials that have ended (a trial still open counting
        by how far it is along the longest length, one not yet created as none): a search
        with trials still to start never shows itself nearly done, since the plan is only an
        estimate that a ``stop_once`` search overruns. Capped at 0.99 until the search shuts
        down; a search stopped early keeps the figure it stopped at."""
        if self.shutdown:
            return 1.0
        planned = sum(b.planned_units() for b in self.brackets)
        if not planned:
            return 0.0
        done = sum(b.units_done(lengths_done) for b in self.brackets)
        ended = sum(b.trials_ended(lengths_done, self.trials_closed) for b in self.brackets)
        return min(0.99, done / planned, ended / sum(b.max_trials for b in self.brackets))

    def rung_table(self) -> dict[str, Any]:
        """The state of every bracket and rung, as JSON (for
        ``GET /api/v1/experiments/{id}/searcher``).

        Returns:
            ``{"name", "divisor", "stop_once", "smaller_is_better", "max_length",
            "brackets": [...]}``; each bracket has ``index``, ``num_rungs``, ``max_trials``,
            ``max_concurrent_trials``, ``trials_created`` (counting against ``max_trials``),
            ``trials_invalid`` and ``rungs``; each rung has ``index``, ``length`` (its target),
            ``reported`` (how many results), ``best_metric`` (in the metric's own sign, None
            before any finite result), ``promoted`` (results promoted, or with ``stop_once``
            continued, past the rung), ``request_ids`` (the trials with a result there, best
            first), ``results`` (``{"request_id", "metric", "promoted"}`` in the same order;
            ``metric`` None for a trial that exited without one) and ``training`` (trials
            training towards the rung now).
        """
        return {
            "name": self.name,
            "divisor": self.divisor,
            "stop_once": self.stop_once,
            "smaller_is_better": self.smaller_is_better,
            "max_length": self.max_length,
            "brackets": [bracket.table() for bracket in self.brackets],
        }

    # --- internals ----------------------------------------------------------------------
    def _bracket(self, request_id: str) -> AshaBracket | None:
        index = self.bracket_of.get(request_id)
        return None if index is None else self.brackets[index]

    def _new_trial_for(self, bracket: AshaBracket) -> _NewTrial:
        def new_trial(length: int) -> tuple[str, Mapping[str, Any], list[Action]]:
            hparams = self.sampler.sample(self.rng)
            request_id, actions = self._create(hparams, length)
            self.bracket_of[request_id] = bracket.index
            return request_id, hparams, actions

        return new_trial

    def _ended(self, request_id: str, reason: str | None) -> list[Action]:
        bracket = self._bracket(request_id)
        if bracket is None or request_id in self.trials_closed:
            return []
        self.trials_closed.add(request_id)
        actions = bracket.on_trial_ended(request_id, reason, self.sampler.tell)
        return self._after(bracket, actions)

    def _after(self, bracket: AshaBracket, actions: list[Action]) -> list[Action]:
        actions.extend(bracket.close_out())
        actions.extend(bracket.fill(self._new_trial_for(bracket)))
        if all(b.done for b in self.brackets):
            trials = [t for b in self.brackets for t in b.trials.values()]
            failure = bool(trials) and all(t.errored for t in trials)
            actions.extend(self._shutdown(failure=failure))
        return actions

    def _snapshot_extra(self) -> dict[str, Any]:
        return {
            "brackets": [bracket.to_json() for bracket in self.brackets],
            "sampler": self.sampler.snapshot(),
        }

    def _restore_extra(self, state: Mapping[str, Any]) -> None:
        if len(state["brackets"]) != len(self.brackets):
            raise ValueError("searcher state has a different number of brackets than the config")
        self.bracket_of = {}
        for bracket, data in zip(self.brackets, state["brackets"], strict=True):
            bracket.load_json(data)
            for request_id in bracket.trials:
                self.bracket_of[request_id] = bracket.index
        self.sampler.restore(state["sampler"])


__all__ = ["AshaBracket", "AsyncHalvingSearch", "initial_concurrency", "rung_lengths"]
