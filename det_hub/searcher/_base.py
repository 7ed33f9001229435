"""The searcher interface: trial events in, actions out.

A search method is a plain object. The master feeds it what happened to its trials and carries
out the actions it returns; the method itself never touches a trial, a database or a clock, so
the same sequence of events always yields the same actions (given the seed).

Lengths are abstract integer units: the searcher's ``max_length`` value when the config has one
(batches, records or epochs; the master converts), else ``max_time`` of the 0.38-style
``time_metric``.
"""

from __future__ import annotations

import abc
import dataclasses
import random
import uuid
from collections.abc import Mapping
from typing import Any

from det_hub.config import SearcherConfig

#: Reasons a trial may end early (Core API ``report_early_exit``, or a failure).
ERRORED = "ERRORED"
INVALID_HP = "INVALID_HP"
USER_REQUESTED_STOP = "USER_REQUESTED_STOP"
EXIT_REASONS = (ERRORED, INVALID_HP, USER_REQUESTED_STOP)


@dataclasses.dataclass(frozen=True)
class Create:
    """Start a new trial with these hyperparameters.

    A :class:`ValidateAfter` for the same ``request_id`` follows it whenever the method knows
    how long the trial should train.
    """

    request_id: str
    hparams: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ValidateAfter:
    """Train this trial to ``length`` units in total and report a validation there.

    Emitted right after each :class:`Create` and again whenever the trial's target is raised
    (an ASHA promotion). A trial that is waiting (:meth:`SearchMethod.is_waiting`) resumes from
    its checkpoint when this raises its target.
    """

    request_id: str
    length: int


@dataclasses.dataclass(frozen=True)
class Stop:
    """End a trial early: a running trial checkpoints and exits as completed; a waiting trial
    is closed where it is."""

    request_id: str


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """The search is over: no more trials will be created.

    ``failure`` marks a search that cannot go on (for example every trial failed).
    """

    failure: bool = False


Action = Create | ValidateAfter | Stop | Shutdown


class SearchMethod(abc.ABC):
    """Base class of every search method.

    Subclasses keep their whole state in attributes that :meth:`snapshot` turns into JSON, so the
    master can store it after every event and :meth:`restore` it after a restart; a restored
    method continues exactly as the original would have.

    Args:
        config: the experiment's validated ``searcher`` section.
        space: the experiment's hyperparameter space (the ``hyperparameters`` section, parsed
            or in config form).
        seed: the experiment seed; every random choice derives from it.
    """

    #: The ``searcher.name`` this method implements.
    name: str = ""

    def __init__(self, config: SearcherConfig, space: Mapping[str, Any], seed: int) -> None:
        self.config = config
        self.space = space
        self.seed = seed
        #: How many units a trial trains at most, or None when the training code decides.
        self.max_length: int | None = config.max_units
        self.smaller_is_better = config.smaller_is_better
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
        """A trial reported the searcher metric after training ``length`` units in total."""
        return []

    @abc.abstractmethod
    def on_trial_closed(self, request_id: str) -> list[Action]:
        """A trial finished normally (completed, or stopped as the searcher asked)."""

    def on_trial_exited_early(self, request_id: str, reason: str) -> list[Action]:
        """A trial ended without finishing: ``reason`` is ERRORED, INVALID_HP or
        USER_REQUESTED_STOP. It is not closed again afterwards. By default it counts as
        closed."""
        return self.on_trial_closed(request_id)

    def reopen(self, request_id: str) -> None:
        """Count a closed trial as open again: ``det-hub experiment continue`` trains it on from
        its latest checkpoint to :meth:`target_length`, and the search is not over until it
        closes again.

        Raises:
            ValueError: The method cannot take a trial back, because its later decisions
                depended on that trial's end (ASHA's rungs), or it does not know the trial.
        """
        raise ValueError(f"a {self.name} search cannot be continued: its later decisions "
                         "depended on how its trials ended; fork the experiment instead")

    # --- questions ----------------------------------------------------------------------
    def target_length(self, request_id: str) -> int | None:
        """How far this trial should train now, in units (the last :class:`ValidateAfter`)."""
        return self.max_length

    def validation_lengths(self, request_id: str) -> list[int]:
        """Lengths short of the target where a validation would let the method decide (ASHA's
        rungs when trials are told the full length at once); the harness validates there too.
        """
        return []

    def is_waiting(self, request_id: str) -> bool:
        """Whether the trial reached its target and waits for the searcher, which may later
        raise its target (ASHA with ``stop_once: false``) or stop it. The master checkpoints
        a waiting trial and frees its slot."""
        return False

    @abc.abstractmethod
    def progress(self, lengths_done: Mapping[str, int]) -> float:
        """Fraction of the search done (0 to 1), given how many units each trial trained."""

    def planned_trials(self) -> int | None:
        """How many trials the search runs in all, where that is fixed from the start (None
        for searches that decide as they go)."""
        return None

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

    def _create(self, hparams: Mapping[str, Any], length: int | None) -> tuple[str, list[Action]]:
        """A new trial: its request id, and :class:`Create` followed by its first target
        (when there is one)."""
        request_id = self._new_request_id()
        self.trials_created += 1
        actions: list[Action] = [Create(request_id, hparams)]
        if length is not None:
            actions.append(ValidateAfter(request_id, length))
        return request_id, actions

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


__all__ = [
    "EXIT_REASONS",
    "ERRORED",
    "INVALID_HP",
    "USER_REQUESTED_STOP",
    "Action",
    "Create",
    "SearchMethod",
    "Shutdown",
    "Stop",
    "ValidateAfter",
]
