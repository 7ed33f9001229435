"""The ``searcher`` section: which search to run, on which metric, for how long."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from det_hub.config._errors import Problem
from det_hub.config._length import Length, LengthUnit
from det_hub.config._model import ConfigModel, choice

SEARCHER_NAMES = ("single", "random", "grid", "adaptive_asha", "async_halving", "custom")
ASHA_MODES = ("aggressive", "standard", "conservative")
SAMPLER_NAMES = ("random", "tpe")

SearcherName = Literal["single", "random", "grid", "adaptive_asha", "async_halving", "custom"]

_NEED_MAX_TRIALS = ("random", "adaptive_asha", "async_halving")
_NEED_LENGTH = ("adaptive_asha", "async_halving")


class SearcherConfig(ConfigModel):
    """How hyperparameters are searched.

    Lengths come either the older way, ``max_length: {batches: N}`` (or records, epochs), or the
    0.38 way, ``time_metric`` naming a reported metric that counts progress and ``max_time``
    its largest value. The adaptive searchers need one of the two.
    """

    name: Annotated[SearcherName, choice(*SEARCHER_NAMES)]
    metric: str
    smaller_is_better: bool = True
    max_length: Length | None = None
    time_metric: str | None = None
    max_time: int | None = Field(default=None, ge=1)
    max_trials: int | None = Field(default=None, ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None
    divisor: int = Field(default=4, gt=1)
    max_rungs: int = Field(default=5, ge=1)
    num_rungs: int | None = Field(default=None, ge=1)
    mode: Annotated[Literal["aggressive", "standard", "conservative"], choice(*ASHA_MODES)] = (
        "standard"
    )
    bracket_rungs: list[Annotated[int, Field(ge=1)]] | None = None
    stop_once: bool = True
    #: How new hyperparameters are drawn: ``random`` from the space, or ``tpe`` (optuna's
    #: TPESampler, fed the results of finished trials or rungs). A det_hub extension.
    sampler: Annotated[Literal["random", "tpe"], choice(*SAMPLER_NAMES)] = "random"

    @property
    def length_unit(self) -> LengthUnit | str | None:
        """The unit lengths are counted in: a :class:`LengthUnit`, the time metric, or None."""
        if self.max_length is not None:
            return self.max_length.unit
        return self.time_metric

    @property
    def max_units(self) -> int | None:
        """How many of :attr:`length_unit` a trial trains for at most, or None if unbounded."""
        if self.max_length is not None:
            return self.max_length.value
        return self.max_time

    def _semantic_problems(self) -> list[Problem]:
        problems = []
        if self.name in _NEED_MAX_TRIALS and self.max_trials is None:
            problems.append(Problem("max_trials", f"required by the {self.name} searcher"))
        if self.name == "grid" and self.sampler != "random":
            problems.append(
                Problem("sampler", "the grid searcher tries every grid point; it takes no sampler")
            )
        if self.name == "async_halving" and self.num_rungs is None:
            problems.append(Problem("num_rungs", "required by the async_halving searcher"))
        if self.time_metric is not None and self.max_time is None:
            problems.append(Problem("max_time", "required when time_metric is set"))
        if self.max_time is not None and self.time_metric is None:
            problems.append(Problem("time_metric", "required when max_time is set"))
        if self.max_length is not None and self.time_metric is not None:
            problems.append(
                Problem("time_metric", "give either max_length or time_metric, not both")
            )
        if (
            self.name in _NEED_LENGTH
            and self.max_length is None
            and self.time_metric is None
            and self.max_time is None
        ):
            problems.append(
                Problem(
                    "max_length",
                    f"required by the {self.name} searcher (or time_metric with max_time)",
                )
            )
        return problems
