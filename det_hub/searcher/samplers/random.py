"""``random``: every hyperparameter drawn independently and uniformly (log-uniformly for log)."""

from __future__ import annotations

import random
from typing import Any

from det_hub.config import sample_hparams
from det_hub.searcher.samplers._base import Sampler


class RandomSampler(Sampler):
    """The default sampler: :func:`det_hub.config.sample_hparams`, learning nothing."""

    name = "random"

    def sample(self, rng: random.Random) -> dict[str, Any]:
        return sample_hparams(dict(self.space), rng)


__all__ = ["RandomSampler"]
