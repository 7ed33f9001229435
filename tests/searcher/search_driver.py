"""A fake master for search-method tests: it carries out actions and feeds events back.

Trials train in simulated chunks: each step picks one trial with work left (chosen by the
driver's own seeded generator, so interleavings vary but repeat), trains it to its next
validation point (the next multiple of ``validate_every``, or its target), and reports the
metric ``score(hparams, length)``. A trial that reaches its target ends unless the method says
it waits (or raises its target); a stopped trial ends at its next step, a waiting one at once,
as the master does.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from det_hub.searcher import Create, SearchMethod, Shutdown, Stop, ValidateAfter

Score = Callable[[Mapping[str, Any], int], float]
#: (trial index, hparams, length about to be reported) -> an early-exit reason, or None.
Fault = Callable[[int, Mapping[str, Any], int], "str | None"]


def quadratic(hparams: Mapping[str, Any], length: int) -> float:
    """A loss that falls with training and is lowest near x = 0.3."""
    return (float(hparams["x"]) - 0.3) ** 2 + 1.0 / (1 + length)


@dataclasses.dataclass
class SimTrial:
    index: int
    request_id: str
    hparams: Mapping[str, Any]
    target: int | None = None
    done: int = 0
    stopping: bool = False
    closed: bool = False
    reports: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    exit_reason: str | None = None


class Driver:
    """Runs a search method to its end.

    Args:
        method: the search method under test.
        score: the metric a trial reports after ``length`` units.
        validate_every: a trial also reports at every multiple of this (None: only at targets).
        fault: decides which trials exit early, and why.
        seed: the driver's own seed (the interleaving of trials).
        rebuild: when given, after every event the method is snapshotted, sent through JSON
            with its keys reordered (as PostgreSQL's JSONB would) and restored into a fresh
            method from this factory, which then carries on.
    """

    def __init__(
        self,
        method: SearchMethod,
        score: Score = quadratic,
        validate_every: int | None = None,
        fault: Fault | None = None,
        seed: int = 0,
        rebuild: Callable[[], SearchMethod] | None = None,
    ) -> None:
        self.method = method
        self.score = score
        self.validate_every = validate_every
        self.fault = fault
        self.rng = random.Random(seed)
        self.rebuild = rebuild
        self.trials: dict[str, SimTrial] = {}
        self.actions: list[Any] = []
        self.shutdowns: list[Shutdown] = []
        self.stops: list[str] = []
        self.promotions: list[tuple[str, int]] = []
        self.max_training = 0
        self.progress: list[float] = []
        #: How many trials had been created at each figure of :attr:`progress`.
        self.created_then: list[int] = []

    # --- running ------------------------------------------------------------------------
    def run(self, max_steps: int = 100_000) -> Driver:
        self._apply(self.method.initial_actions())
        for _ in range(max_steps):
            if not self.step():
                break
        else:
            raise AssertionError("the search did not finish")
        return self

    def step(self) -> bool:
        """One event; False when nothing is left to do."""
        self._observe()
        candidates = [t for t in self.trials.values() if not t.closed and self._has_work(t)]
        if not candidates:
            return False
        trial = candidates[self.rng.randrange(len(candidates))]
        if trial.stopping or self._waiting(trial):
            self._close(trial, None)
            return True
        assert trial.target is not None
        length = trial.target
        if self.validate_every:
            length = min(length, (trial.done // self.validate_every + 1) * self.validate_every)
        if self.fault is not None:
            reason = self.fault(trial.index, trial.hparams, length)
            if reason is not None:
                trial.done = (trial.done + length) // 2
                self._close(trial, reason)
                return True
        trial.done = length
        metric = self.score(trial.hparams, length)
        trial.reports.append((length, metric))
        self._apply(self.method.on_validation(trial.request_id, metric, length))
        self._checkpoint()
        if (
            not trial.closed
            and not trial.stopping
            and trial.target is not None
            and trial.done >= trial.target
            and not self.method.is_waiting(trial.request_id)
        ):
            self._close(trial, None)
        return True

    # --- questions ----------------------------------------------------------------------
    @property
    def created(self) -> list[SimTrial]:
        return list(self.trials.values())

    def training(self) -> list[SimTrial]:
        """Trials that hold a slot: open, not told to stop, not waiting, with units to go."""
        return [
            t
            for t in self.trials.values()
            if not t.closed
            and not t.stopping
            and not self.method.is_waiting(t.request_id)
            and t.target is not None
            and t.done < t.target
        ]

    # --- internals ----------------------------------------------------------------------
    def _has_work(self, trial: SimTrial) -> bool:
        if trial.stopping or self._waiting(trial):
            # A waiting trial only ends when stopped; otherwise it idles until promoted.
            return trial.stopping
        return trial.target is not None and trial.done < trial.target

    def _waiting(self, trial: SimTrial) -> bool:
        return self.method.is_waiting(trial.request_id)

    def _close(self, trial: SimTrial, reason: str | None) -> None:
        trial.closed = True
        trial.exit_reason = reason
        if reason is None:
            self._apply(self.method.on_trial_closed(trial.request_id))
        else:
            self._apply(self.method.on_trial_exited_early(trial.request_id, reason))
        self._checkpoint()

    def _apply(self, actions: list[Any]) -> None:
        for action in actions:
            self.actions.append(action)
            if isinstance(action, Create):
                assert action.request_id not in self.trials
                self.trials[action.request_id] = SimTrial(
                    len(self.trials), action.request_id, dict(action.hparams)
                )
                self._apply(self.method.on_trial_created(action.request_id))
            elif isinstance(action, ValidateAfter):
                trial = self.trials[action.request_id]
                assert not trial.closed, "a target for a closed trial"
                assert not trial.stopping, "a target for a trial told to stop"
                if trial.target is not None:
                    assert action.length > trial.target, "a target that does not rise"
                    self.promotions.append((action.request_id, action.length))
                trial.target = action.length
                assert self.method.target_length(action.request_id) == action.length
            elif isinstance(action, Stop):
                trial = self.trials[action.request_id]
                assert not trial.closed, "a stop for a closed trial"
                trial.stopping = True
                self.stops.append(action.request_id)
            elif isinstance(action, Shutdown):
                self.shutdowns.append(action)
            else:
                raise AssertionError(f"unknown action {action!r}")
        self._observe()

    def _observe(self) -> None:
        self.max_training = max(self.max_training, len(self.training()))
        done = {t.request_id: t.done for t in self.trials.values()}
        self.progress.append(self.method.progress(done))
        self.created_then.append(len(self.trials))

    def _checkpoint(self) -> None:
        if self.rebuild is None:
            return
        state = json.loads(json.dumps(self.method.snapshot(), sort_keys=True, allow_nan=False))
        fresh = self.rebuild()
        fresh.restore(state)
        again = json.loads(json.dumps(fresh.snapshot(), sort_keys=True))
        assert again == state, "a restored method snapshots differently"
        self.method = fresh
