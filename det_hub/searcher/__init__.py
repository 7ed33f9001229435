"""Search methods: pure objects that turn trial events into actions.

``build_search_method`` picks the method named by ``searcher.name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_hub.searcher._base import Action, Create, SearchMethod, Shutdown, Stop
from det_hub.searcher.single import SingleSearch

SEARCH_METHODS: dict[str, type[SearchMethod]] = {
    SingleSearch.name: SingleSearch,
}


class UnsupportedSearcher(ValueError):
    """The config names a searcher this master does not run."""


def build_search_method(
    name: str, space: Mapping[str, Any], seed: int, max_length: int | None
) -> SearchMethod:
    """Make the search method ``name`` for an experiment."""
    try:
        cls = SEARCH_METHODS[name]
    except KeyError:
        known = ", ".join(sorted(SEARCH_METHODS))
        raise UnsupportedSearcher(
            f"searcher.name: {name!r} is not available on this master (available: {known})"
        ) from None
    return cls(space, seed, max_length)


__all__ = [
    "Action",
    "Create",
    "SEARCH_METHODS",
    "SearchMethod",
    "Shutdown",
    "SingleSearch",
    "Stop",
    "UnsupportedSearcher",
    "build_search_method",
]
