"""Search methods: pure objects that turn trial events into actions.

``build_search_method`` picks the method named by ``searcher.name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig, validate_section
from det_hub.searcher._base import (
    ERRORED,
    EXIT_REASONS,
    INVALID_HP,
    USER_REQUESTED_STOP,
    Action,
    Create,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
)
from det_hub.searcher.adaptive_asha import AdaptiveAshaSearch
from det_hub.searcher.asha import AsyncHalvingSearch
from det_hub.searcher.grid import GridSearch
from det_hub.searcher.random import RandomSearch
from det_hub.searcher.samplers import SamplerUnavailable
from det_hub.searcher.single import SingleSearch

SEARCH_METHODS: dict[str, type[SearchMethod]] = {
    cls.name: cls
    for cls in (SingleSearch, RandomSearch, GridSearch, AsyncHalvingSearch, AdaptiveAshaSearch)
}


class UnsupportedSearcher(ValueError):
    """The config names a searcher this master does not run."""


def build_search_method(
    searcher: Mapping[str, Any] | SearcherConfig, space: Mapping[str, Any], seed: int
) -> SearchMethod:
    """Make the search method for an experiment.

    Args:
        searcher: the config's ``searcher`` section, as a :class:`SearcherConfig` or as the
            plain dict ``ExperimentConfig.to_dict()["searcher"]`` gives.
        space: the ``hyperparameters`` section.
        seed: the experiment seed.

    Raises:
        UnsupportedSearcher: For a searcher this master does not run (``custom``).
        det_hub.config.ConfigError: When ``searcher`` is not a valid searcher section.
        SamplerUnavailable: When ``sampler: tpe`` is asked for and optuna is not installed.
    """
    if isinstance(searcher, SearcherConfig):
        config = searcher
    else:
        config = validate_section(SearcherConfig, searcher)
    try:
        cls = SEARCH_METHODS[config.name]
    except KeyError:
        known = ", ".join(sorted(SEARCH_METHODS))
        raise UnsupportedSearcher(
            f"searcher.name: {config.name!r} is not available on this master (available: {known})"
        ) from None
    return cls(config, space, seed)


__all__ = [
    "ERRORED",
    "EXIT_REASONS",
    "INVALID_HP",
    "SEARCH_METHODS",
    "USER_REQUESTED_STOP",
    "Action",
    "AdaptiveAshaSearch",
    "AsyncHalvingSearch",
    "Create",
    "GridSearch",
    "RandomSearch",
    "SamplerUnavailable",
    "SearchMethod",
    "Shutdown",
    "SingleSearch",
    "Stop",
    "UnsupportedSearcher",
    "ValidateAfter",
    "build_search_method",
]
