"""What a search will do before anything runs (``det-hub preview-search``).

The config's own search method runs against a simulated cluster: trials train at one speed,
as many at once as the method lets, and report a random metric wherever they validate. How many
trials are created, the rung lengths and the length of a full trial are exact; how far each
trial of an ASHA search gets depends on the real metrics, so those counts are one typical
outcome of the search (the same for the same seed).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from det_hub.config import ExperimentConfig
from det_hub.searcher import build_search_method
from det_hub.searcher._base import Action, Create, SearchMethod, Shutdown, Stop, ValidateAfter

#: The most simulated events before a preview gives up (no real search comes near it).
_MAX_EVENTS = 1_000_000


@dataclasses.dataclass(frozen=True)
class SearchPreview:
    """The outcome of a simulated search.

    Attributes:
        searcher: ``searcher.name``.
        unit: What lengths count (``batches``, ``records``, ``epochs`` or the time metric), or
            None when the training code decides how long to train.
        max_length: The length of a trial that trains to the end, or None.
        trials: How many trials the search creates.
        lengths: For each length a trial ended at, how many did (lengths ascending).
        total: Units trained by all trials together.
        rungs: The ASHA rung table after the simulation, None for other searchers.
    """

    searcher: str
    unit: str | None
    max_length: int | None
    trials: int
    lengths: dict[int, int]
    total: int
    rungs: dict[str, Any] | None

    @property
    def full_total(self) -> int | None:
        """Units if every trial trained to ``max_length``: what early stopping saves from."""
        return None if self.max_length is None else self.trials * self.max_length


@dataclasses.dataclass
class _Trial:
    request_id: str
    #: The simulated time at which the trial had trained ``done`` units.
    clock: float
    target: int | None = None
    done: int = 0
    closed: bool = False


def preview_search(config: ExperimentConfig, seed: int = 0) -> SearchPreview:
    """Simulate the search a config describes.

    Raises:
        det_hub.searcher.UnsupportedSearcher: The master does not run this searcher.
        det_hub.searcher.SamplerUnavailable: ``sampler: tpe`` without optuna installed.
        RuntimeError: The search did not end (a bug in a search method).
    """
    searcher = config.searcher
    method = build_search_method(searcher, config.to_dict().get("hyperparameters") or {}, seed)
    run = _Simulation(method, random.Random(seed))
    run.run()
    lengths = Counter(t.done for t in run.trials.values())
    unit = searcher.length_unit
    table = getattr(method, "rung_table", None)
    return SearchPreview(
        searcher=searcher.name, unit=getattr(unit, "value", unit),
        max_length=searcher.max_units, trials=len(run.trials),
        lengths=dict(sorted(lengths.items())), total=sum(t.done for t in run.trials.values()),
        rungs=table() if callable(table) else None)


class _Simulation:
    """Carries out a method's actions as the master would, one event at a time."""

    def __init__(self, method: SearchMethod, rng: random.Random) -> None:
        self.method = method
        self.rng = rng
        self.trials: dict[str, _Trial] = {}
        self.to_close: list[str] = []
        #: Simulated time: a trial trains one unit per unit of time from when it starts.
        self.now = 0.0

    def run(self) -> None:
        self._apply(self.method.initial_actions())
        for _ in range(_MAX_EVENTS):
            if self.to_close:
                self._close(self.to_close.pop(0))
                continue
            training = [t for t in self.trials.values() if self._training(t)]
            if not training:
                return
            # Every trial trains at the same speed: the next validation in time comes first.
            trial = min(training, key=lambda t: t.clock + self._next_point(t) - t.done)
            point = self._next_point(trial)
            self.now = trial.clock = trial.clock + point - trial.done
            trial.done = point
            self._apply(self.method.on_validation(trial.request_id, self.rng.random(),
                                                  trial.done))
            if self._training(trial) or trial.closed or trial.request_id in self.to_close:
                continue
            if not self.method.is_waiting(trial.request_id):
                self.to_close.append(trial.request_id)
        raise RuntimeError("the simulated search did not end")

    def _training(self, trial: _Trial) -> bool:
        return (not trial.closed and trial.request_id not in self.to_close
                and trial.target is not None and trial.done < trial.target)

    def _next_point(self, trial: _Trial) -> int:
        assert trial.target is not None
        later = [n for n in self.method.validation_lengths(trial.request_id) if n > trial.done]
        return min([*later, trial.target])

    def _close(self, request_id: str) -> None:
        trial = self.trials[request_id]
        if not trial.closed:
            trial.closed = True
            self._apply(self.method.on_trial_closed(request_id))

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Create):
                self.trials[action.request_id] = _Trial(action.request_id, self.now)
                self._apply(self.method.on_trial_created(action.request_id))
                if self.method.target_length(action.request_id) is None:
                    # The training code decides its length: it validates once and ends.
                    self.to_close.append(action.request_id)
            elif isinstance(action, ValidateAfter):
                trial = self.trials[action.request_id]
                if trial.target is not None and trial.done >= trial.target:
                    trial.clock = self.now  # promoted from waiting at its rung: starts again
                trial.target = action.length
            elif isinstance(action, Stop):
                if action.request_id not in self.to_close:
                    self.to_close.append(action.request_id)
            elif isinstance(action, Shutdown):
                pass


def preview_json(preview: SearchPreview) -> Mapping[str, Any]:
    """The preview as JSON (``det-hub preview-search --json``)."""
    return {**dataclasses.asdict(preview), "full_total": preview.full_total,
            "lengths": [{"length": length, "trials": count}
                        for length, count in preview.lengths.items()]}
