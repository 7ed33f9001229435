"""``single``: one trial with one set of hyperparameters, trained to ``max_length``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig
from det_hub.searcher._base import ERRORED, Action, SearchMethod
from det_hub.searcher.samplers import build_sampler


class SingleSearch(SearchMethod):
    """Trains exactly one trial. Non-constant hyperparameters are sampled once, as Determined
    does, so a ``single`` search over a space is a reproducible random pick."""

    name = "single"

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(config, space, seed)
        self.sampler = build_sampler(config.sampler, space, config.smaller_is_better)
        self.request_id: str | None = None

    def initial_actions(self) -> list[Action]:
        hparams = self.sampler.sample(self.rng)
        self.request_id, actions = self._create(hparams, self.max_length)
        return actions

    def on_trial_closed(self, request_id: str) -> list[Action]:
        self.trials_closed.add(request_id)
        return self._shutdown()

    def on_trial_exited_early(self, request_id: str, reason: str) -> list[Action]:
        self.trials_closed.add(request_id)
        return self._shutdown(failure=reason == ERRORED)

    def reopen(self, request_id: str) -> None:
        if request_id != self.request_id:
            raise ValueError(f"trial {request_id} is not this search's trial")
        self.trials_closed.discard(request_id)
        self.shutdown = False

    def planned_trials(self) -> int | None:
        return 1

    def progress(self, lengths_done: Mapping[str, int]) -> float:
        if self.shutdown:
            return 1.0
        if not self.max_length or self.request_id is None:
            return 0.0
        return min(1.0, lengths_done.get(self.request_id, 0) / self.max_length)

    def _snapshot_extra(self) -> dict[str, Any]:
        return {"request_id": self.request_id}

    def _restore_extra(self, state: Mapping[str, Any]) -> None:
        self.request_id = state.get("request_id")
