"""The sampler interface: where a search method gets the hyperparameters of a new trial."""

from __future__ import annotations

import abc
import random
from collections.abc import Mapping
from typing import Any


class Sampler(abc.ABC):
    """Draws hyperparameters from a space, optionally learning from reported results.

    Like search methods, samplers are pure and deterministic: every random choice comes from the
    ``rng`` handed to :meth:`sample` (the search method's seeded generator), and all learned
    state is in :meth:`snapshot`.

    Args:
        space: the hyperparameter space (parsed or in config form).
        smaller_is_better: whether lower metric values are better.
    """

    #: The ``searcher.sampler`` name.
    name: str = ""

    def __init__(self, space: Mapping[str, Any], smaller_is_better: bool) -> None:
        self.space = space
        self.smaller_is_better = smaller_is_better

    @abc.abstractmethod
    def sample(self, rng: random.Random) -> dict[str, Any]:
        """The hyperparameters of a new trial (nested spaces give nested dicts)."""

    def tell(self, hparams: Mapping[str, Any], length: int, metric: float) -> None:  # noqa: B027
        """A trial with ``hparams`` reported ``metric`` after ``length`` units (a finished
        trial, or an ASHA rung result). Samplers that do not learn ignore it."""

    def snapshot(self) -> dict[str, Any]:
        """The sampler's state as JSON."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:  # noqa: B027
        """Load what :meth:`snapshot` wrote."""


__all__ = ["Sampler"]
