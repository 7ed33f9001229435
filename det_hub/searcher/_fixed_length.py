"""What ``random`` and ``grid`` share: a list of trials, each trained to ``max_length``, at most
``max_concurrent_trials`` at a time."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig
from det_hub.searcher._base import ERRORED, INVALID_HP, Action, SearchMethod
from det_hub.searcher.samplers import Sampler, build_sampler


class FixedLengthSearch(SearchMethod):
    """Trials that each train to ``max_length`` and are never stopped early.

    New trials are created while fewer than ``max_concurrent_trials`` are open (0: no limit, all
    at once, as in Determined) and the search has more to run. A trial ended with ERRORED or
    USER_REQUESTED_STOP counts as done; INVALID_HP is replaced by a new trial when
    :attr:`replace_invalid` is set. The search shuts down once every trial it will create is
    closed, as a failure when every trial errored.
    """

    #: Whether a trial that exits with INVALID_HP is replaced (it then does not count).
    replace_invalid: bool = True

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(config, space, seed)
        self.sampler: Sampler = build_sampler(config.sampler, space, config.smaller_is_better)
        self.limit = config.max_concurrent_trials
        #: Trials created that count towards :meth:`_total` (INVALID_HP replacements do not).
        self.counted = 0
        self.hparams: dict[str, Mapping[str, Any]] = {}
        self.open: list[str] = []
        self.errored: set[str] = set()
        self.invalid: set[str] = set()
        self.last_metric: dict[str, float] = {}
        self.told: set[str] = set()

    @abc.abstractmethod
    def _total(self) -> int:
        """How many trials the search runs in all."""

    def planned_trials(self) -> int | None:
        return self._total()

    @abc.abstractmethod
    def _next_hparams(self) -> Mapping[str, Any]:
        """The hyperparameters of the next trial."""

    # --- events -------------------------------------------------------------------------
    def initial_actions(self) -> list[Action]:
        return self._fill()

    def on_validation(self, request_id: str, metric: float, length: int) -> list[Action]:
        if request_id not in self.open:
            return []
        self.last_metric[request_id] = metric
        if self.max_length is not None and length >= self.max_length:
            self._tell(request_id, self.max_length, metric)
        return []

    def on_trial_closed(self, request_id: str) -> list[Action]:
        return self._end(request_id, None)

    def on_trial_exited_early(self, request_id: str, reason: str) -> list[Action]:
        return self._end(request_id, reason)

    def reopen(self, request_id: str) -> None:
        if request_id not in self.hparams:
            raise ValueError(f"trial {request_id} is not one of this search's trials")
        if self.replace_invalid and request_id in self.invalid:
            raise ValueError(f"trial {request_id} reported invalid hyperparameters and was "
                             "replaced by another trial")
        if request_id in self.open:
            return
        self.open.append(request_id)
        self.trials_closed.discard(request_id)
        self.errored.discard(request_id)
        self.shutdown = False

    # --- questions ----------------------------------------------------------------------
    def target_length(self, request_id: str) -> int | None:
        return self.max_length if request_id in self.hparams else None

    def progress(self, lengths_done: Mapping[str, int]) -> float:
        if self.shutdown:
            return 1.0
        total = self._total()
        if total <= 0:
            return 0.0
        if self.max_length is None:
            done = sum(1 for rid in self.trials_closed if rid not in self.invalid)
            return min(1.0, done / total)
        units = 0
        for rid in self.hparams:
            if rid in self.trials_closed and not (self.replace_invalid and rid in self.invalid):
                units += self.max_length
            else:
                units += min(lengths_done.get(rid, 0), self.max_length)
        return min(1.0, units / (total * self.max_length))

    # --- internals ----------------------------------------------------------------------
    def _fill(self) -> list[Action]:
        actions: list[Action] = []
        while self.counted < self._total() and (self.limit == 0 or len(self.open) < self.limit):
            hparams = self._next_hparams()
            request_id, created = self._create(hparams, self.max_length)
            self.counted += 1
            self.hparams[request_id] = hparams
            self.open.append(request_id)
            actions.extend(created)
        return actions

    def _end(self, request_id: str, reason: str | None) -> list[Action]:
        if request_id not in self.open:
            return []
        self.open.remove(request_id)
        self.trials_closed.add(request_id)
        if reason == ERRORED:
            self.errored.add(request_id)
        elif reason == INVALID_HP:
            self.invalid.add(request_id)
            if self.replace_invalid:
                self.counted -= 1
        elif self.max_length is None and request_id in self.last_metric:
            # No length to wait for: the last validation is the trial's result.
            self._tell(request_id, 0, self.last_metric[request_id])
        actions = self._fill()
        if not self.open and self.counted >= self._total():
            actions.extend(self._shutdown(failure=len(self.errored) == self.trials_created))
        return actions

    def _tell(self, request_id: str, length: int, metric: float) -> None:
        if request_id not in self.told:
            self.told.add(request_id)
            self.sampler.tell(self.hparams[request_id], length, metric)

    def _snapshot_extra(self) -> dict[str, Any]:
        return {
            "counted": self.counted,
            "trials": [[rid, dict(hp)] for rid, hp in self.hparams.items()],
            "open": list(self.open),
            "errored": sorted(self.errored),
            "invalid": sorted(self.invalid),
            "last_metric": [[rid, m] for rid, m in self.last_metric.items()],
            "told": sorted(self.told),
            "sampler": self.sampler.snapshot(),
        }

    def _restore_extra(self, state: Mapping[str, Any]) -> None:
        self.counted = int(state["counted"])
        self.hparams = {rid: hp for rid, hp in state["trials"]}
        self.open = list(state["open"])
        self.errored = set(state["errored"])
        self.invalid = set(state["invalid"])
        self.last_metric = {rid: float(m) for rid, m in state["last_metric"]}
        self.told = set(state["told"])
        self.sampler.restore(state["sampler"])
