"""The searcher interface: trial events in, actions out.

A search method is a plain object. The master feeds it what happened to its trials and carries
out the actions it returns; the method itself never touches a trial, a database or a clock, so
the same sequence of events always yields the same actions (given the seed).
"""

from __future__ import annotations

import abc
import dataclasses
import random
import uuid
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Create:
    """Start a new trial with these hyperparameters."""

    request_id: str
    hparams: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Stop:
    """Ask a running trial to stop early (it checkpoints and exits as completed)."""

    request_id: str


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """The search is over: no more trials will be created.

    ``failure`` marks a search that cannot go on (for example every trial failed).
    """

    failure: bool = False


Action = Create | Stop | Shutdown


class SearchMethod(abc.ABC):
    """Base class of every search method.

    Subclasses keep their whole state in attributes that :meth:`snapshot` turns into JSON, so the
    master can store it after every event and :meth:`restore` it after a restart.

    Args:
        space: the experiment's hyperparameter space (the validated ``hyperparameters`` section).
        seed: the experiment seed; every random choice derives from it.
        max_length: how long each trial trains, in the config's length unit, or ``None`` when the
            training code decides (0.38-style configs without ``max_length``).
    """

    #: The ``searcher.name`` this method implements.
    name: str = ""

    def __init__(self, space: Mapping[str, Any], seed: int, max_length: int | None) -> None:
        self.space = space
        self.seed = seed
        self.max_length = max_length
        self.rng = random.Random(seed)
        self.trials_created = 0
        self.trials_closed: set[str] = set()
        self.shutdown = False

    # --- events -------------------------------------------------------------------------
    @abc.abstractmethod
    def initial_actions(self) -> list[Action]:
        """Actions to take when the experiment first starts."""

    def on_trial_created(self, request_id: str) -> list[Action]:
        """A trial asked for by :class:`Create` now exists."""
        return []

    def on_validation(self, request_id: str, metric: float, length: int) -> list[Action]:
        """A trial reported its searcher metric after training ``length`` units."""
        return []

    @abc.abstractmethod
    def on_trial_closed(self, request_id: str) -> list[Action]:
        """A trial finished normally (completed, or stopped as the searcher asked)."""

    def on_trial_exited_early(self, request_id: str, reason: str) -> list[Action]:
        """A trial ended without finishing: ``reason`` is ERRORED, INVALID_HP or
        USER_REQUESTED_STOP. By default it counts as closed."""
        return self.on_trial_closed(request_id)

    # --- questions ----------------------------------------------------------------------
    def target_length(self, request_id: str) -> int | None:
        """How far this trial should train, in the config's length unit."""
        return self.max_length

    @abc.abstractmethod
    def progress(self, lengths_done: Mapping[str, int]) -> float:
        """Fraction of the search done, given how far each trial has trained."""

    # --- persistence --------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The method's state as JSON."""
        return {
            "name": self.name,
            "rng": _rng_to_json(self.rng),
            "trials_created": self.trials_created,
            "trials_closed": sorted(self.trials_closed),
            "shutdown": self.shutdown,
            **self._snapshot_extra(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Load what :meth:`snapshot` wrote."""
        if state.get("name") != self.name:
            raise ValueError(f"searcher state is for {state.get('name')!r}, not {self.name!r}")
        self.rng.setstate(_rng_from_json(state["rng"]))
        self.trials_created = int(state["trials_created"])
        self.trials_closed = set(state["trials_closed"])
        self.shutdown = bool(state["shutdown"])
        self._restore_extra(state)

    def _snapshot_extra(self) -> dict[str, Any]:
        return {}

    def _restore_extra(self, state: Mapping[str, Any]) -> None:
        return None

    # --- helpers for subclasses ---------------------------------------------------------
    def _new_request_id(self) -> str:
        # Derived from the seeded rng so replays of the same search give the same ids.
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _shutdown(self, failure: bool = False) -> list[Action]:
        if self.shutdown:
            return []
        self.shutdown = True
        return [Shutdown(failure=failure)]


def _rng_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_json(data: list[Any]) -> tuple[Any, ...]:
    version, internal, gauss = data
    return (version, tuple(internal), gauss)


__all__ = ["Action", "Create", "SearchMethod", "Shutdown", "Stop"]
