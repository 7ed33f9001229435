"""``grid``: one trial per point of the hyperparameter grid, each trained to ``max_length``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig, grid_hparams
from det_hub.searcher._fixed_length import FixedLengthSearch


class GridSearch(FixedLengthSearch):
    """Determined's grid search.

    The trials are the cartesian product of every hyperparameter's grid points
    (:func:`det_hub.config.grid_hparams`), created in that order, ``max_concurrent_trials`` at a
    time (0: all at once). ``max_trials`` does not apply: Determined's grid config has no such
    field and runs the whole grid. A trial that exits with INVALID_HP is not replaced: its grid
    point has been tried.
    """

    name = "grid"
    replace_invalid = False

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        super().__init__(config, space, seed)
        self.points = grid_hparams(space)

    def _total(self) -> int:
        return len(self.points)

    def _next_hparams(self) -> Mapping[str, Any]:
        return self.points[self.counted]


__all__ = ["GridSearch"]
