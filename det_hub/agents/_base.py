"""What the cluster needs from an agent: a host that runs tasks on its slots.

An agent owns a fixed set of slots (:class:`~det_hub.agents.slots.SlotInfo`). The cluster asks
it to start a task on some of them (:meth:`Agent.launch`), then polls the returned
:class:`TaskHandle` for log lines and the exit status. Tasks outlive the master: after a
restart the cluster asks each agent to :meth:`~Agent.attach` to the tasks its store says were
running, and goes on reading their logs where it stopped.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from traitlets import Bool, MetaHasTraits, Unicode
from traitlets.config import LoggingConfigurable

from det_hub.agents.slots import SlotInfo
from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL

#: ``argv[0]`` values that mean "the Python the agent's tasks run with".
PYTHON_NAMES = ("python", "python3")


@dataclasses.dataclass(frozen=True)
class LogLine:
    timestamp: float
    stdtype: str
    message: str


@dataclasses.dataclass(frozen=True)
class ExitStatus:
    """How a task ended.

    Attributes:
        exit_code: Its exit code; None where it has none (killed, lost, never started).
        signal: The signal that killed it, by name.
        reason: Why it ended, for people, where more is known than the code says.
        resumable: Its agent's own scheduler took its resources back (Slurm requeued or
            preempted its job): not the task's fault, so a trial resumes from its latest
            checkpoint without counting a restart.
    """

    exit_code: int | None
    signal: str | None = None
    reason: str | None = None
    resumable: bool = False

    @property
    def success(self) -> bool:
        return self.exit_code == 0


@dataclasses.dataclass(frozen=True)
class ContainerSpec:
    """How an experiment asks for its container; agents without containers ignore it.

    Attributes:
        images: image per device type (``cpu``, ``cuda``, ``rocm``); missing types take the
            agent's default image.
        bind_mounts: Determined's ``bind_mounts`` entries (``host_path``, ``container_path``,
            ``read_only``, ``propagation``).
        shm_size: bytes of ``/dev/shm``; ``None`` for the agent's default.
        devices: ``resources.devices`` entries (``host_path``, ``container_path``, ``mode``).
        add_capabilities, drop_capabilities: Linux capabilities to add or drop.
    """

    images: Mapping[str, str] = dataclasses.field(default_factory=dict)
    bind_mounts: Sequence[Mapping[str, Any]] = ()
    shm_size: int | None = None
    devices: Sequence[Mapping[str, Any]] = ()
    add_capabilities: Sequence[str] = ()
    drop_capabilities: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task to start on some of an agent's slots.

    Attributes:
        allocation_id: the allocation the task belongs to; unique per agent.
        argv: the command. A first element of ``python`` or ``python3`` means the agent's own
            Python (see :data:`PYTHON_NAMES`).
        env: environment variables on top of the agent's.
        context: a tar archive (gzip or plain) unpacked into the task's working directory.
        slot_ids: the agent's slots the task gets, exclusively.
        files: extra files (name -> text) the task reads at :meth:`Agent.file_path`.
        container: the container the experiment asked for.
        run_as: the Unix ``(uid, gid)`` the task runs as where the agent can choose (a Docker
            container's user; a local task where the master runs as root): its owner's linked
            account, else the master's unprivileged task account.
        owner_is_admin: whether the task's owner is an admin (trusted with the master itself).
        slurm: the experiment's or task's ``slurm`` section (see
            :class:`~det_hub.config.slurm.SlurmConfig`) as a mapping; agents that do not submit
            to Slurm ignore it.
        priority: its job's priority in det_hub's queue (1 most important .. 99 least), for
            an agent whose own scheduler orders its tasks too (Slurm's ``--nice``).
    """

    allocation_id: str
    argv: Sequence[str]
    env: Mapping[str, str]
    context: bytes | None
    slot_ids: Sequence[int]
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    container: ContainerSpec = dataclasses.field(default_factory=ContainerSpec)
    run_as: tuple[int, int] | None = None
    owner_is_admin: bool = False
    slurm: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    priority: int = DEFAULT_PRIORITY


class TaskHandle(abc.ABC):
    """A task an agent started, or attached to again after a master restart."""

    allocation_id: str
    #: Where the task's log was read up to; an agent-specific position (a byte offset, a time)
    #: that the cluster stores and hands back to :meth:`Agent.attach`.
    log_offset: int
    #: The task's host process id where the agent knows one, for the record.
    pid: int | None
    #: Where the task lives, for people reading the record: a directory, a container id.
    where: str

    @property
    def waiting(self) -> str | None:
        """Why the task waits in a queue of its agent's own before it runs (a Slurm job
        still pending), as last seen by :meth:`exit_status` or :meth:`alive`; None once it
        runs, and for agents that start tasks at once. Reads no more than what they saw."""
        return None

    @property
    def stop_requested(self) -> str | None:
        """Why the agent's own scheduler asked the running task to stop soon (Slurm: a
        preemption, or its time limit near); the master then asks the task to checkpoint and
        stop, as for a preemption of its own. None otherwise, and for agents that do not
        say."""
        return None

    @abc.abstractmethod
    def read_logs(self) -> list[LogLine]:
        """New complete log lines since the last call; advances :attr:`log_offset`."""

    @abc.abstractmethod
    def exit_status(self) -> ExitStatus | None:
        """The exit status once the task has ended, else ``None``."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the task is still running."""


class AgentUnreachable(Exception):
    """The agent's host does not answer; its tasks' fate is unknown."""


class _AgentMeta(MetaHasTraits, abc.ABCMeta):
    """Traitlets' metaclass with abstract methods enforced."""


class Agent(LoggingConfigurable, metaclass=_AgentMeta):
    """A host with slots that runs tasks."""

    agent_id = Unicode("local", config=True, help="The agent's name in the API and the CLI.")
    resource_pool = Unicode(DEFAULT_RESOURCE_POOL, config=True,
                            help="The resource pool the agent serves.")
    enabled = Bool(True, config=True, help="""Whether new work is placed on this agent. A disabled
        agent keeps running what it has (drain); `det-hub agent enable|disable` flips it.""")
    address = Unicode("127.0.0.1", config=True, help="""The address tasks on other hosts reach
        this host's tasks at: where a multi-host trial's workers meet its chief.""")

    #: The agent's slots, found when it is created.
    slots: list[SlotInfo]
    #: ``"local"``, ``"docker"``: what the API shows as the agent's type.
    kind: str = ""
    #: Whether tasks run in containers, which see host paths only through bind mounts.
    uses_containers: bool = False
    #: Whether a launched task may wait in a queue of the agent's own before it runs (see
    #: :attr:`TaskHandle.waiting`): its allocation stays STARTING meanwhile, and a restarted
    #: master adopts it so.
    queues_tasks: bool = False

    def connection(self) -> dict[str, Any] | None:
        """How another program reaches this agent's container engine (a hub spawner that runs
        containers on slots it holds): None for an agent without one."""
        return None

    @abc.abstractmethod
    def launch(self, spec: TaskSpec) -> TaskHandle:
        """Start a task. Raises on failure to start; nothing is left running then."""

    @abc.abstractmethod
    def file_path(self, allocation_id: str, name: str) -> str:
        """The path at which the task reads ``spec.files[name]``."""

    @abc.abstractmethod
    def attach(self, allocation_id: str, log_offset: int, pid: int | None) -> TaskHandle | None:
        """Find a task started before a master restart; ``None`` when it is gone with no trace.

        A task that ended while the master was away is returned too: its handle reports the
        exit status.

        Raises:
            AgentUnreachable: the host does not answer, so whether the task lives is unknown.
        """

    def prepare(self, spec: TaskSpec) -> bool:
        """Get a queued task ready to start, on the slots it will probably get, so that
        :meth:`launch` of the same allocation only has to say go.

        Returns False where the agent does not prepare tasks (the default) or not this one.
        :meth:`launch` starts the task from scratch whenever what it is given differs from
        what was prepared in a way that matters; :meth:`discard_prepared` drops a preparation
        the task will not use.
        """
        return False

    def discard_prepared(self, allocation_id: str) -> None:
        """Drop what :meth:`prepare` made for an allocation that will not start here."""

    def discard_all_prepared(self) -> None:
        """Drop everything prepared ahead of a start (the master stops)."""

    def notify_exit(self, handle: TaskHandle, callback: Callable[[], None]) -> bool:
        """Call ``callback`` once the task has ended, from any thread, so that the cluster
        frees its slots at once instead of at its next round.

        Returns False where the agent cannot tell (the default): the cluster's rounds find the
        end then. The callback only says "look now"; the exit status is read as usual.
        """
        return False

    @abc.abstractmethod
    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        """Ask the task to stop (SIGTERM), or stop it now (``force``: SIGKILL)."""

    def task_address(self, handle: TaskHandle) -> str:
        """Where the master reaches what a running task serves (the host its proxy sends a
        notebook's users to): the agent's :attr:`address` by default, for an agent whose tasks
        run on its own host. An agent whose tasks run on hosts chosen elsewhere (Slurm's nodes)
        asks that scheduler: never the task, whose word could point the proxy anywhere.

        Raises:
            LookupError: the task does not run where it can be reached.
            AgentUnreachable: the agent's host does not answer.
        """
        return self.address

    def set_priority(self, handle: TaskHandle, priority: int) -> None:
        """The priority of a task's job changed while the task waits in the agent's own queue
        (:attr:`TaskHandle.waiting`): pass it on, without waiting for an answer. Nothing by
        default."""

    def isolation_warning(self) -> str | None:
        """What an admin should know about how this agent keeps tasks apart from the master
        and from each other; None when all is well (a container agent: the container is the
        boundary)."""
        return None

    def reap(self, handle: TaskHandle) -> None:
        """Release what the agent holds for a finished task (a zombie process, a container)."""

    def cleanup(self, allocation_id: str) -> None:
        """Remove what a finished task left on the host."""

    def check(self) -> None:
        """Return when the host answers.

        Raises:
            AgentUnreachable: it does not.
        """


__all__ = [
    "PYTHON_NAMES",
    "Agent",
    "AgentUnreachable",
    "ContainerSpec",
    "ExitStatus",
    "LogLine",
    "TaskHandle",
    "TaskSpec",
]
