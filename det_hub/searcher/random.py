"""``random``: ``max_trials`` trials with independently drawn hyperparameters, each trained to
``max_length``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig
from det_hub.searcher._fixed_length import FixedLengthSearch


class RandomSearch(FixedLengthSearch):
    """Determined's random search.

    ``max_concurrent_trials`` trials run at a time (0: all ``max_trials`` at once); each one
    closed makes room for the next. Hyperparameters come from the configured sampler (``random``
    or ``tpe``; TPE learns from each trial's result at ``max_length``). A trial that exits with
    INVALID_HP is replaced by a new one that does not count against ``max_trials``.
    """

    name = "random"
    replace_invalid = True

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(config, space, seed)
        if config.max_trials is None:
            raise ValueError("searcher.max_trials: required by the random searcher")
        self.max_trials = config.max_trials

    def _total(self) -> int:
        return self.max_trials

    def _next_hparams(self) -> Mapping[str, Any]:
        return self.sampler.sample(self.rng)


__all__ = ["RandomSearch"]
