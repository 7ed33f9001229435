"""Samplers: how a search method draws the hyperparameters of a new trial.

``build_sampler`` picks the one named by ``searcher.sampler``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.searcher.samplers._base import Sampler
from det_hub.searcher.samplers.random import RandomSampler
from det_hub.searcher.samplers.tpe import SamplerUnavailable, TPESampler

SAMPLERS: dict[str, type[Sampler]] = {
    RandomSampler.name: RandomSampler,
    TPESampler.name: TPESampler,
}


def build_sampler(name: str, space: Mapping[str, Any], smaller_is_better: bool) -> Sampler:
    """Make the sampler ``name`` for a space.

    Raises:
        ValueError: For a name that is not a sampler.
        SamplerUnavailable: When the sampler needs a package that is not installed.
    """
    try:
        cls = SAMPLERS[name]
    except KeyError:
        known = ", ".join(sorted(SAMPLERS))
        raise ValueError(f"searcher.sampler: {name!r} is not one of {known}") from None
    return cls(space, smaller_is_better)


__all__ = [
    "SAMPLERS",
    "RandomSampler",
    "Sampler",
    "SamplerUnavailable",
    "TPESampler",
    "build_sampler",
]
