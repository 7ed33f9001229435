"""The states users see, and the transitions allowed between them, written down in one place.

Names follow Determined's, so scripts and dashboards written for it read ours unchanged. The
service's state machines consult :data:`EXPERIMENT_TRANSITIONS` and :data:`TRIAL_TRANSITIONS`
before every change; nothing else decides whether a move is legal.
"""

from __future__ import annotations

import enum


class _LifecycleState(str, enum.Enum):
    """What experiment and trial states have in common: how they end."""

    @property
    def terminal(self) -> bool:
        return self.value in ("COMPLETED", "CANCELED", "ERROR")

    @property
    def stopping(self) -> bool:
        return self.value.startswith("STOPPING_")


class ExperimentState(_LifecycleState):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


class TrialState(_LifecycleState):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


class RunState(str, enum.Enum):
    """Where an active trial's process is; ``None`` on a trial means it has no allocation."""

    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"


class CheckpointState(str, enum.Enum):
    ACTIVE = "ACTIVE"  # being written
    COMPLETED = "COMPLETED"
    DELETED = "DELETED"


TERMINAL_EXPERIMENT_STATES = frozenset(
    {ExperimentState.COMPLETED, ExperimentState.CANCELED, ExperimentState.ERROR}
)
TERMINAL_TRIAL_STATES = frozenset({TrialState.COMPLETED, TrialState.CANCELED, TrialState.ERROR})

_E = ExperimentState
EXPERIMENT_TRANSITIONS: dict[ExperimentState, frozenset[ExperimentState]] = {
    _E.ACTIVE: frozenset(
        {_E.PAUSED, _E.STOPPING_COMPLETED, _E.STOPPING_CANCELED, _E.STOPPING_ERROR}
    ),
    _E.PAUSED: frozenset({_E.ACTIVE, _E.STOPPING_CANCELED, _E.STOPPING_ERROR}),
    # A stop may be escalated (complete -> cancel on kill, anything -> error on failure).
    _E.STOPPING_COMPLETED: frozenset({_E.COMPLETED, _E.STOPPING_CANCELED, _E.STOPPING_ERROR}),
    _E.STOPPING_CANCELED: frozenset({_E.CANCELED, _E.STOPPING_ERROR}),
    _E.STOPPING_ERROR: frozenset({_E.ERROR}),
    # A finished experiment becomes active again only through `det-hub experiment continue`.
    _E.COMPLETED: frozenset({_E.ACTIVE}),
    _E.CANCELED: frozenset({_E.ACTIVE}),
    _E.ERROR: frozenset({_E.ACTIVE}),
}

_T = TrialState
TRIAL_TRANSITIONS: dict[TrialState, frozenset[TrialState]] = {
    _T.ACTIVE: frozenset(
        {_T.PAUSED, _T.STOPPING_COMPLETED, _T.STOPPING_CANCELED, _T.STOPPING_ERROR,
         _T.COMPLETED, _T.CANCELED, _T.ERROR}
    ),
    _T.PAUSED: frozenset({_T.ACTIVE, _T.STOPPING_CANCELED, _T.STOPPING_COMPLETED, _T.CANCELED,
                          _T.COMPLETED, _T.ERROR}),
    _T.STOPPING_COMPLETED: frozenset({_T.COMPLETED, _T.STOPPING_CANCELED, _T.STOPPING_ERROR,
                                      _T.ERROR, _T.CANCELED}),
    _T.STOPPING_CANCELED: frozenset({_T.CANCELED, _T.STOPPING_ERROR, _T.ERROR}),
    _T.STOPPING_ERROR: frozenset({_T.ERROR}),
    # Reopened by `det-hub experiment continue`, to train on from the latest checkpoint.
    _T.COMPLETED: frozenset({_T.ACTIVE}),
    _T.CANCELED: frozenset({_T.ACTIVE}),
    _T.ERROR: frozenset({_T.ACTIVE}),
}


class IllegalTransition(ValueError):
    """A state change that the transition table does not allow."""

    def __init__(self, kind: str, current: str, target: str) -> None:
        super().__init__(f"{kind} cannot go from {current} to {target}")
        self.kind = kind
        self.current = current
        self.target = target


def check_experiment_transition(current: ExperimentState, target: ExperimentState) -> None:
    if target != current and target not in EXPERIMENT_TRANSITIONS[current]:
        raise IllegalTransition("experiment", current.value, target.value)


def check_trial_transition(current: TrialState, target: TrialState) -> None:
    if target != current and target not in TRIAL_TRANSITIONS[current]:
        raise IllegalTransition("trial", current.value, target.value)


__all__ = [
    "CheckpointState",
    "EXPERIMENT_TRANSITIONS",
    "ExperimentState",
    "IllegalTransition",
    "RunState",
    "TERMINAL_EXPERIMENT_STATES",
    "TERMINAL_TRIAL_STATES",
    "TRIAL_TRANSITIONS",
    "TrialState",
    "check_experiment_transition",
    "check_trial_transition",
]
