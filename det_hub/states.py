"""The states users see, and the transitions allowed between them, written down in one place.

Names follow Determined's, so scripts and dashboards written for it read ours unchanged. The
service's state machines consult :data:`EXPERIMENT_TRANSITIONS`, :data:`TRIAL_TRANSITIONS`,
:data:`TASK_TRANSITIONS` and :data:`ALLOCATION_TRANSITIONS` before every change; nothing else
decides whether a move is legal.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class _LifecycleState(str, enum.Enum):
    """What experiment and trial states have in common: how they end."""

    @property
    def terminal(self) -> bool:
        return self.value in ("COMPLETED", "CANCELED", "ERROR")

    @property
    def stopping(self) -> bool:
        return self.value.startswith("STOPPING_")

    @property
    def active(self) -> bool:
        """ACTIVE, or one of the states the REST API shows in its place."""
        return self.value == "ACTIVE" or self.value in ACTIVE_SUBSTATES


#: What an ACTIVE experiment or trial is doing. The store keeps ``ACTIVE``; the REST API shows
#: one of these in its place, as Determined's does: ``RUNNING`` while a process of it runs,
#: else ``STARTING`` (or ``PULLING``, an image being pulled) while one starts, else ``QUEUED``.
#: det_hub's agents report an image pull as part of ``STARTING``.
ACTIVE_SUBSTATES = ("QUEUED", "PULLING", "STARTING", "RUNNING")


class ExperimentState(_LifecycleState):
    ACTIVE = "ACTIVE"
    QUEUED = "QUEUED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


class TrialState(_LifecycleState):
    ACTIVE = "ACTIVE"
    QUEUED = "QUEUED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
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


class TaskType(str, enum.Enum):
    """What a non-experiment task is. Notebooks, shells and TensorBoards serve something
    (a Jupyter server, an SSH server, a TensorBoard) that users reach through the master's
    proxy; a command only runs. A hub server is a user's JupyterHub notebook server that
    DetSpawner starts: the task holds its slots and the spawner runs the container on them, or
    (given a command, as on a Slurm pool) the task runs the server itself."""

    COMMAND = "COMMAND"
    NOTEBOOK = "NOTEBOOK"
    SHELL = "SHELL"
    TENSORBOARD = "TENSORBOARD"
    HUB_SERVER = "HUB_SERVER"

    @property
    def proxied(self) -> bool:
        """Whether the task serves something reached through the master's proxy."""
        return self in (TaskType.NOTEBOOK, TaskType.SHELL, TaskType.TENSORBOARD)

    @property
    def reserves_only(self) -> bool:
        """Whether the task only holds slots, for something else to run on them."""
        return self is TaskType.HUB_SERVER

    @property
    def key(self) -> str:
        """The type in the REST API: its objects' key and, with an ``s``, its collection
        (``notebook``, ``/notebooks``; ``hub_server``, ``/hub_servers``)."""
        return self.value.lower()

    @property
    def word(self) -> str:
        """The type in messages: ``notebook``, ``notebook server``."""
        return "notebook server" if self is TaskType.HUB_SERVER else self.key

    @property
    def job_prefix(self) -> str:
        """The task's job ids begin with this: ``cmd-12``, ``notebook-13``,
        ``hub-server-14``."""
        return "cmd-" if self is TaskType.COMMAND else f"{self.key.replace('_', '-')}-"


class TaskState(str, enum.Enum):
    """Where a command (or another non-experiment task) is, as Determined's command states.

    ``PULLING`` is Determined's state for an image being pulled before the container starts;
    it is part of the table so that clients written for Determined read every state, though
    det_hub's agents report an image pull as part of ``STARTING``.
    """

    QUEUED = "QUEUED"
    PULLING = "PULLING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    #: Asked to stop (killed, or idle past its timeout); its process has not exited yet.
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"

    @property
    def terminal(self) -> bool:
        return self is TaskState.TERMINATED


class AllocationState(str, enum.Enum):
    """Where an allocation is: one attempt at running a trial's or a task's processes on
    slots. The cluster moves it on; the store's ``allocations.state`` keeps it, and a trial's
    ``run_state`` and a task's state follow it while it is open."""

    #: Waiting in the job queue for slots.
    QUEUED = "QUEUED"
    #: Placed on slots, which it holds from now on; its processes are being started. Handed
    #: to an agent that queues tasks of its own (Slurm), it may wait in that queue first; its
    #: trial or task shows ``QUEUED`` until that agent runs it.
    STARTING = "STARTING"
    #: Its processes run (one that only holds slots, a hub notebook server's, holds them).
    RUNNING = "RUNNING"
    #: Ended: its processes exited or were killed, its agent was lost, it could not start, or
    #: it was taken off the queue before it started. Its slots are free again.
    TERMINATED = "TERMINATED"


def shown_trial_state(state: str, run_state: str | None) -> str:
    """A trial's state as the REST API shows it: an ACTIVE trial's ``run_state`` when its
    process is starting or running, else ``QUEUED`` (waiting for slots, or for the searcher
    to promote it); any other state as stored."""
    if state != "ACTIVE":
        return state
    return run_state if run_state in ("STARTING", "RUNNING") else "QUEUED"


def shown_experiment_state(state: str, trials: Iterable[tuple[str, str | None]]) -> str:
    """An experiment's state as the REST API shows it, given its trials' ``(state,
    run_state)``: an ACTIVE experiment is ``RUNNING`` while any trial runs, else ``STARTING``
    while any starts, else ``QUEUED``; any other state as stored."""
    if state != "ACTIVE":
        return state
    shown = {shown_trial_state(s, r) for s, r in trials}
    return next((s for s in ("RUNNING", "STARTING") if s in shown), "QUEUED")


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


_K = TaskState
TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    # A queued task that is killed never started: it ends at once, with nothing to stop. One
    # whose slots were just assigned is starting, though its start is not stored yet: killing
    # it stops what starts.
    _K.QUEUED: frozenset({_K.PULLING, _K.STARTING, _K.TERMINATING, _K.TERMINATED}),
    _K.PULLING: frozenset({_K.STARTING, _K.TERMINATING, _K.TERMINATED}),
    # A launch that fails ends the task straight from STARTING.
    _K.STARTING: frozenset({_K.RUNNING, _K.TERMINATING, _K.TERMINATED}),
    _K.RUNNING: frozenset({_K.TERMINATING, _K.TERMINATED}),
    _K.TERMINATING: frozenset({_K.TERMINATED}),
    # A task never runs again; a new one is made instead.
    _K.TERMINATED: frozenset(),
}


_A = AllocationState
ALLOCATION_TRANSITIONS: dict[AllocationState, frozenset[AllocationState]] = {
    # Taken off the queue before it started: it ends without having held slots.
    _A.QUEUED: frozenset({_A.STARTING, _A.TERMINATED}),
    # A launch that fails ends the allocation straight from STARTING.
    _A.STARTING: frozenset({_A.RUNNING, _A.TERMINATED}),
    _A.RUNNING: frozenset({_A.TERMINATED}),
    # An allocation never runs again; a new one is made instead.
    _A.TERMINATED: frozenset(),
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


def check_task_transition(current: TaskState, target: TaskState) -> None:
    if target != current and target not in TASK_TRANSITIONS[current]:
        raise IllegalTransition("task", current.value, target.value)


def check_allocation_transition(current: AllocationState, target: AllocationState) -> None:
    if target != current and target not in ALLOCATION_TRANSITIONS[current]:
        raise IllegalTransition("allocation", current.value, target.value)


__all__ = [
    "ACTIVE_SUBSTATES",
    "ALLOCATION_TRANSITIONS",
    "AllocationState",
    "CheckpointState",
    "EXPERIMENT_TRANSITIONS",
    "ExperimentState",
    "IllegalTransition",
    "RunState",
    "TERMINAL_EXPERIMENT_STATES",
    "TERMINAL_TRIAL_STATES",
    "TASK_TRANSITIONS",
    "TRIAL_TRANSITIONS",
    "TaskState",
    "TaskType",
    "TrialState",
    "check_allocation_transition",
    "check_experiment_transition",
    "check_task_transition",
    "check_trial_transition",
    "shown_experiment_state",
    "shown_trial_state",
]
