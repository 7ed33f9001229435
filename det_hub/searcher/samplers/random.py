"""``random``: every hyperparameter drawn independently and uniformly (log-uniformly for log)."""

from __future__ import annotations

import random
from typing import Any

from det_hub.config import sample_hparams
from det_hub.config.hyperparameters import parse_hyperparameters
from det_hub.searcher.samplers._base import Sampler


class RandomSampler(Sampler):
    """The default sampler: :func:`det_hub.config.sample_hparams`, learning nothing."""

    name = "random"

    _parsed: dict[str, Any] | None = None

    def sample(self, rng: random.Random) -> dict[str, Any]:
        # The space comes in config form; validating it anew for every trial (pydantic) was
        # most of the cost of an event that creates one. Parsed once, on the first draw, so a
        # bad space fails where it always did.
        if self._parsed is None:
            self._parsed = parse_hyperparameters(dict(self.space))
        return sample_hparams(self._parsed, rng)


__all__ = ["RandomSampler"]
