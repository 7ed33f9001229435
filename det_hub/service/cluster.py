"""The cluster: agents in resource pools, the job queue, and the tasks running on them.

An *allocation* is one attempt to run a trial's process, or a command's, on some slots: one
task on one agent, or, for a trial larger than any one host, one task on each of several
agents. A *job* is what the queue orders and users reprioritise: an experiment, whose trials'
allocations share its priority, weight and place in the queue, or a command, a job of its own
that is never preempted.

The cluster keeps the queue, asks each pool's scheduling policy where waiting allocations go
and which running ones must make room, starts tasks through the agents, ships their logs into
the store, notices when they end or their host stops answering, and carries preemption
signals to the training code's long-poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from det_hub.agents import (
    Agent,
    AgentUnreachable,
    ContainerSpec,
    ExitStatus,
    TaskHandle,
    TaskSpec,
)
from det_hub.contract import CLUSTER_INFO_FILE, ClusterInfoDocument
from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL
from det_hub.env_names import (
    AGENT_ADDRESS_ENV,
    ALLOCATION_ID_ENV,
    ALLOCATION_TOKEN_ENV,
    CHIEF_ADDR_ENV,
    CHIEF_PORT_ENV,
    CLUSTER_INFO_ENV,
    DATA_CACHE_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
)
from det_hub.scheduler import (
    Agent as SchedAgent,
)
from det_hub.scheduler import (
    Request,
    Running,
    Scheduler,
    Slot,
    build_scheduler,
)
from det_hub.service.bus import AllocationExited, AllocationStateChanged, EventBus
from det_hub.service.monitor import AllocationMonitor, allocation_system_log, store_logs
from det_hub.service.pubsub import ClusterChanges
from det_hub.states import AllocationState, check_allocation_transition
from det_hub.storage import storage_in_container, storage_mounts
from det_hub.store import Store, StoreUnavailable, hash_token, utcnow

log = logging.getLogger("det_hub.cluster")



@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """A resource pool: its scheduling policy and how long a preempted task may take to stop.

    Attributes:
        scheduler: the policy's settings, as :func:`det_hub.scheduler.build_scheduler` takes
            them (``type``, ``preemption``, ``fitting_policy``).
        preemption_timeout: seconds a task asked to stop (a preemption, a pause) has to
            checkpoint and exit before it is killed.
    """

    name: str
    description: str = ""
    scheduler: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    preemption_timeout: float = 3600.0


@dataclasses.dataclass
class Job:
    """An entry of the job queue."""

    id: str
    pool: str
    owner: str
    name: str
    priority: int = DEFAULT_PRIORITY
    weight: float = 1.0
    #: Order among jobs of equal priority, smaller first.
    position: float = 0.0
    preemptible: bool = True
    kind: str = "EXPERIMENT"
    submitted: datetime = dataclasses.field(default_factory=utcnow)


@dataclasses.dataclass
class LaunchSpec:
    """Everything needed to start a trial's or a task's process once slots are assigned.

    Exactly one of ``trial_id`` (with its ``experiment_id``) and ``task_id`` is set.
    """

    owner: str
    slots: int
    argv: list[str]
    env: dict[str, str]
    cluster_info: ClusterInfoDocument
    context: bytes | None
    trial_id: int | None = None
    experiment_id: int | None = None
    task_id: int | None = None
    job_id: str = ""
    container: ContainerSpec = dataclasses.field(default_factory=ContainerSpec)
    #: The config's ``slurm`` section, for an agent that submits to Slurm (see ``TaskSpec``).
    slurm: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Kill the task once it has been idle this many seconds: written no log line and, for a
    #: proxied task, not been used through the proxy.
    idle_timeout: float | None = None
    #: What idle means for this task, for the message that says why it was killed.
    idle_means: str = "no output"
    #: Hold the slots only: nothing is started on the agents (a hub notebook server, which its
    #: spawner runs on them). The allocation runs until it is killed or its agent is lost.
    reserve_only: bool = False
    #: The Unix ``(uid, gid)`` the task runs as where an agent can choose (see ``TaskSpec``).
    run_as: tuple[int, int] | None = None
    #: Whether the owner is an admin: an agent that cannot sandbox runs only admins' tasks.
    owner_is_admin: bool = False
    #: The owner's data cache on the master's host (DET_HUB_DATA_CACHE, see det_hub.data):
    #: kept between their local tasks, seen by no one else's.
    data_cache: str | None = None

    def __post_init__(self) -> None:
        if (self.trial_id is None) == (self.task_id is None):
            raise ValueError("a launch is for a trial or a task: give exactly one id")

    @property
    def log_key(self) -> dict[str, int | None]:
        """Whose log the task's lines go to, as ``task_logs`` columns."""
        return {"trial_id": self.trial_id, "task_id": self.task_id}

    @property
    def what(self) -> str:
        """``"trial"`` or ``"task"``, for messages."""
        return "trial" if self.trial_id is not None else "task"


@dataclasses.dataclass
class Node:
    """An allocation's task on one agent."""

    agent_id: str
    slot_ids: tuple[int, ...]
    handle: TaskHandle | None = None
    status: ExitStatus | None = None
    #: After a master restart whose agent did not answer: attach once it does.
    log_offset: int = 0
    pid: int | None = None
    attach_pending: bool = False

    def record(self) -> dict[str, Any]:
        h = self.handle
        return {"agent_id": self.agent_id, "slot_ids": list(self.slot_ids),
                "log_offset": h.log_offset if h else self.log_offset,
                "pid": h.pid if h else self.pid, "where": h.where if h else None}


@dataclasses.dataclass
class Allocation:
    id: str
    spec: LaunchSpec
    token: str
    state: AllocationState = AllocationState.QUEUED
    #: The hash of its token, by which the cluster finds it (set when it is tracked).
    token_hash: str = ""
    queued_at: float = dataclasses.field(default_factory=time.monotonic)
    queued_wall: datetime = dataclasses.field(default_factory=utcnow)
    nodes: list[Node] = dataclasses.field(default_factory=list)
    preempt: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    #: Asked to checkpoint and stop (a pause, or a preemption); a clean exit then means
    #: "resume later", not "done".
    preempt_requested: bool = False
    #: A stop asked for while its tasks were being handed to agents that queue them (Slurm),
    #: before it could be told whether they wait there: why, and what follows, for its log.
    #: Settled once they are seen waiting (cancelled there) or running (asked to checkpoint).
    preempt_pending: tuple[str | None, str | None] | None = None
    #: When a task asked to stop is killed if it has not exited (monotonic seconds).
    preempt_deadline: float | None = None
    killed: bool = False
    #: Killed because it did not stop within the preemption timeout: it resumes later from
    #: its latest checkpoint rather than counting as a failure.
    timed_out: bool = False
    #: Why the allocation ended when no process said so (its host stopped answering).
    lost_reason: str | None = None
    #: When the task last wrote a log line, was used through the proxy, or started running
    #: (monotonic seconds).
    last_activity: float = dataclasses.field(default_factory=time.monotonic)
    #: Killed because it was idle for its ``idle_timeout``.
    idle_timed_out: bool = False
    #: Log rows read from its tasks that the database has not taken yet (it could not be used),
    #: oldest first; and how many were dropped past the limit (see ``monitor.keep_logs``).
    unstored_logs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    lost_log_lines: int = 0
    #: Why its tasks, handed to their agents, wait in a queue of the agents' own (a Slurm
    #: job pending, with Slurm's reason); it stays STARTING until they run. None otherwise.
    waiting: str | None = None
    #: The last state announced on the bus (:class:`AllocationStateChanged`), which its trial's
    #: run state or its task's state follows: announcements only ever move forward (see
    #: :func:`announce`), and one whose tasks wait in their agents' own queue is announced
    #: STARTING only once they run, so that until then it shows as queued.
    announced: AllocationState = AllocationState.QUEUED

    @property
    def agent_ids(self) -> list[str]:
        return [n.agent_id for n in self.nodes]

    @property
    def waits_in_agents_queue(self) -> bool:
        """Whether its tasks, placed, all wait in their agents' own queue (a Slurm job
        pending), each seen there: nothing of it has run yet."""
        return self.state == AllocationState.STARTING and self.waiting is not None \
            and all(n.handle is not None for n in self.nodes)

    def move_to(self, state: AllocationState) -> None:
        """Move on to ``state``, as :data:`det_hub.states.ALLOCATION_TRANSITIONS` allows.

        Raises:
            IllegalTransition: The table does not allow the move.
        """
        check_allocation_transition(self.state, state)
        self.state = state


@dataclasses.dataclass
class Ending:
    """An allocation that has ended, on its way to being stored as ended and announced
    (:class:`AllocationExited`); it waits in :class:`Endings` while the database
    cannot be used."""

    alloc: Allocation
    status: ExitStatus
    ended_at: datetime = dataclasses.field(default_factory=utcnow)
    #: The end is stored and the tasks' remains reaped; only the announcement is left.
    stored: bool = False
    tries: int = 0
    #: When to try again (monotonic seconds).
    next_try: float = 0.0
    since: float = dataclasses.field(default_factory=time.monotonic)


class Endings:
    """Allocations that have ended, on their way to being stored as ended, reaped, and
    announced (:class:`AllocationExited`): one try at once, and while the database cannot be
    used, again each round of the cluster's loop, with a growing pause."""

    def __init__(self, store: Store, bus: EventBus,
                 reap: Callable[[Allocation], Awaitable[None]]) -> None:
        self.store, self.bus, self._reap = store, bus, reap
        #: By allocation id, the ends the database has not taken yet.
        self.waiting: dict[str, Ending] = {}

    async def settle(self, ending: Ending) -> None:
        """Store an allocation's end, reap it and announce it; one try now, the rest left
        to :meth:`retry`."""
        alloc, status = ending.alloc, ending.status
        try:
            if not ending.stored:
                await store_logs(self.store, alloc)
                await self.store.update_allocation(
                    alloc.id, state=AllocationState.TERMINATED, ended_at=ending.ended_at,
                    exit_code=status.exit_code, exit_reason=status.reason or (
                        f"signal {status.signal}" if status.signal else None))
                ending.stored = True
                await self._reap(alloc)
            await self.bus.publish(AllocationExited(alloc, status))
        except StoreUnavailable as e:
            ending.tries += 1
            ending.next_try = time.monotonic() + min(
                STORE_RETRY_FIRST_S * 2 ** (ending.tries - 1), STORE_RETRY_MAX_S)
            if alloc.id not in self.waiting:
                how = status.reason or (f"signal {status.signal}" if status.signal
                                        else f"exit code {status.exit_code}")
                log.warning("allocation %s has ended (%s), but %s: its end is stored, and its "
                            "%s settled, once it is back", alloc.id, how, e.what,
                            alloc.spec.what)
                self.waiting[alloc.id] = ending
            return
        if self.waiting.pop(alloc.id, None) is not None:
            log.warning("allocation %s's end is stored after %d tries over %.1f s", alloc.id,
                        ending.tries + 1, time.monotonic() - ending.since)

    async def retry(self) -> None:
        """Try again to settle the ends whose pause is over (each round of the loop)."""
        now = time.monotonic()
        for ending in list(self.waiting.values()):
            if ending.next_try > now:
                continue
            try:
                await self.settle(ending)
            except Exception:  # not the database: trying again would fail the same way
                self.waiting.pop(ending.alloc.id, None)
                log.exception("allocation %s: its end could not be settled", ending.alloc.id)


#: Seconds between tries to store an allocation's state while the database cannot be used:
#: doubling from the first to the last.
STORE_RETRY_FIRST_S = 0.5
STORE_RETRY_MAX_S = 2.0


def rendezvous_port(allocation_id: str) -> int:
    """The port a multi-host allocation's workers meet on at its chief's host.

    Chosen from the allocation id, away from the ephemeral range, so every node computes the
    same one and two allocations rarely share it.
    """
    return 20000 + zlib.crc32(allocation_id.encode()) % 10000


def position_before(positions: Iterable[float], target: float) -> float:
    """A queue position right before ``target`` and after every other position below it."""
    below = [p for p in positions if p < target]
    return (max(below) + target) / 2 if below else target - 1.0


def can_ever_fit(sizes: Sequence[int], slots: int) -> bool:
    """Whether agents of these slot counts, all free, could take a request of ``slots``:
    one agent, or ``k`` agents with ``slots / k`` each."""
    for k in range(1, len(sizes) + 1):
        if slots % k == 0 and sum(1 for s in sizes if s >= slots // k) >= k:
            return True
    return False


class OpenAllocations:
    """The allocations that have not ended, found by id, by token, or by trial or task."""

    def __init__(self) -> None:
        self._by_id: dict[str, Allocation] = {}
        self._by_token: dict[str, Allocation] = {}
        self._by_task: dict[int, Allocation] = {}

    def add(self, alloc: Allocation, token_hash: str) -> None:
        """An allocation opens: find it by id, token and task from now on."""
        alloc.token_hash = token_hash
        self._by_id[alloc.id] = alloc
        self._by_token[token_hash] = alloc
        if alloc.spec.task_id is not None:
            self._by_task[alloc.spec.task_id] = alloc

    def remove(self, alloc: Allocation) -> bool:
        """An allocation closes; False when it had closed already."""
        if self._by_id.pop(alloc.id, None) is None:
            return False
        self._by_token.pop(alloc.token_hash, None)
        if alloc.spec.task_id is not None:
            self._by_task.pop(alloc.spec.task_id, None)
        return True

    def get(self, allocation_id: str) -> Allocation | None:
        """The open allocation with this id."""
        return self._by_id.get(allocation_id)

    def by_token(self, token_hash: str) -> Allocation | None:
        """The open allocation whose training code holds the token with this hash."""
        return self._by_token.get(token_hash)

    def of_trial(self, trial_id: int) -> Allocation | None:
        """The trial's open allocation (a trial has at most one), None between its runs."""
        return next((a for a in self._by_id.values() if a.spec.trial_id == trial_id), None)

    def of_task(self, task_id: int) -> Allocation | None:
        """The task's open allocation (a task has at most one), None once it has ended."""
        return self._by_task.get(task_id)

    def __iter__(self) -> Iterator[Allocation]:
        return iter(list(self._by_id.values()))

    def __contains__(self, allocation_id: object) -> bool:
        return allocation_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)


async def until_stored(allocations: OpenAllocations, alloc: Allocation, what: str,
                       write: Callable[[], Awaitable[None]]) -> bool:
    """Run ``write`` (a state of ``alloc``'s, stored and announced) until the database takes
    it, waiting between tries while it cannot be used. False when the allocation ended in the
    meantime (it left ``allocations``), and its end, stored by :meth:`Cluster.finish`, makes
    the write moot."""
    delay = STORE_RETRY_FIRST_S
    while alloc.id in allocations:
        try:
            await write()
            return True
        except StoreUnavailable as e:
            if delay == STORE_RETRY_FIRST_S:
                log.warning("allocation %s: %s is not stored yet, as %s; trying again "
                            "until it is", alloc.id, what, e.what)
        await asyncio.sleep(delay)
        delay = min(delay * 2, STORE_RETRY_MAX_S)
    return False


async def announce(bus: EventBus, alloc: Allocation, state: AllocationState) -> None:
    """Publish :class:`AllocationStateChanged` for ``state`` (STARTING or RUNNING), after each
    state before it that was not announced yet: the allocation's trial or task sees QUEUED,
    STARTING and RUNNING in that order, each once, and never a step back, however the
    announcements were held back (its tasks waited in their agents' queue) or repeated (a
    write the database refused, tried again)."""
    order = (AllocationState.QUEUED, AllocationState.STARTING, AllocationState.RUNNING)
    for step in order[order.index(alloc.announced) + 1:order.index(state) + 1]:
        await bus.publish(AllocationStateChanged(alloc, step))
        alloc.announced = step


def queued_by_agents(agents: Mapping[str, Agent], alloc: Allocation) -> bool:
    """Whether every task of a placed allocation goes to one of ``agents`` that queues tasks
    of its own (Slurm): handed over, they wait there until that agent's scheduler runs them."""
    return bool(alloc.nodes) and all(
        n.agent_id in agents and agents[n.agent_id].queues_tasks for n in alloc.nodes)


def wake_on_exit(agent: Agent, handle: TaskHandle, wake: asyncio.Event) -> None:
    """Have the cluster's loop run a round (``wake``) as soon as the task ends, where its
    agent can tell: its slots go to the next allocation at once rather than at the next
    poll."""
    loop = asyncio.get_running_loop()

    def ended() -> None:
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the master has stopped; the next one adopts the end
            pass

    agent.notify_exit(handle, ended)


class Preparations:
    """Queued allocations that agents get ready ahead of their start (see
    :meth:`Agent.prepare`), by allocation id: the agent asked. A placement elsewhere, an end
    or a dequeue drops one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.agents: dict[str, str] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def next(self) -> None:
        """Have agents get the allocations next in their pools' queues ready to start: as
        many per agent as it has slots, on the slots such an allocation takes when it has the
        agent to itself. The preparations run beside the cluster's loop."""
        cluster = self.cluster
        held = {a.id for a in cluster.allocations}
        for alloc_id in [a for a in self.agents if a not in held]:
            self.drop(alloc_id)
        queued = sorted(
            (a for a in cluster.allocations if a.state == AllocationState.QUEUED
             and a.spec.trial_id is not None and not a.spec.reserve_only
             and a.id not in self.agents),
            key=lambda a: (cluster.job_fields(a).get("priority", DEFAULT_PRIORITY),
                           cluster.job_fields(a).get("position", 0.0), a.queued_at))
        for alloc in queued:
            agent = next((ag for ag in cluster.pool_agents(cluster.pool_of(alloc))
                          if ag.enabled and ag.agent_id not in cluster.unreachable
                          and len(ag.slots) >= alloc.spec.slots
                          and sum(1 for p in self.agents.values() if p == ag.agent_id)
                          < len(ag.slots)), None)
            if agent is None:
                continue
            self.agents[alloc.id] = agent.agent_id
            node = Node(agent.agent_id, tuple(s.id for s in agent.slots[:alloc.spec.slots]))
            spec = cluster.task_spec(alloc, 0, agent, [agent.address], nodes=[node])
            self._beside(self._prepare(agent, spec))

    async def _prepare(self, agent: Agent, spec: TaskSpec) -> None:
        try:
            await asyncio.to_thread(agent.prepare, spec)
        except Exception as e:  # the allocation starts from scratch when placed
            log.warning("could not prepare allocation %s on agent %s: %s",
                        spec.allocation_id, agent.agent_id, e)

    def drop(self, alloc_id: str, *, keep_on: str | None = None) -> None:
        """Forget an allocation's preparation; drop it on its agent unless that is
        ``keep_on`` (where it is about to be launched, which uses it)."""
        agent_id = self.agents.pop(alloc_id, None)
        agents = self.cluster.agents
        if agent_id is None or agent_id == keep_on or agent_id not in agents:
            return
        self._beside(asyncio.to_thread(agents[agent_id].discard_prepared, alloc_id))

    async def close(self) -> None:
        """Drop every preparation, the agents' own too (tasks prepared to follow a trial): a
        prepared task waits on a pipe of this process's, and would only end with it."""
        self.agents = {}
        for agent in self.cluster.agents.values():
            await asyncio.to_thread(agent.discard_all_prepared)

    def _beside(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class Cluster:
    """Queue, placement and monitoring of allocations on the master's agents."""

    def __init__(
        self,
        store: Store,
        agents: Agent | Sequence[Agent],
        bus: EventBus,
        *,
        pools: Iterable[PoolSettings] = (),
        poll_interval: float = 0.2,
        kill_grace_seconds: float = 30.0,
        agent_timeout: float = 30.0,
        heartbeat_interval: float = 5.0,
    ) -> None:
        self.store = store
        self.agents: dict[str, Agent] = {}
        for agent in [agents] if isinstance(agents, Agent) else agents:
            if agent.agent_id in self.agents:
                raise ValueError(f"two agents are named {agent.agent_id!r}")
            self.agents[agent.agent_id] = agent
        self.pools: dict[str, PoolSettings] = {p.name: p for p in pools}
        for agent in self.agents.values():
            self.pools.setdefault(agent.resource_pool, PoolSettings(agent.resource_pool))
        self.pools.setdefault(DEFAULT_RESOURCE_POOL, PoolSettings(DEFAULT_RESOURCE_POOL))
        self.schedulers: dict[str, Scheduler] = {}
        for pool in self.pools.values():
            try:
                self.schedulers[pool.name] = build_scheduler(pool.scheduler)
            except ValueError as e:
                raise ValueError(f"resource pool {pool.name!r}: {e}") from None
        self.bus = bus
        self.poll_interval = poll_interval
        self.kill_grace_seconds = kill_grace_seconds
        self.allocations = OpenAllocations()
        self.jobs: dict[str, Job] = {}
        #: Agents that stopped answering, and since when (monotonic seconds).
        self.unreachable: dict[str, float] = {}
        #: Tasks on agents that were given up for lost, to stop once the agent answers again.
        self.orphans: dict[str, list[TaskHandle]] = {}
        self._launching: set[asyncio.Task[None]] = set()
        #: Queued allocations agents get ready ahead of their start.
        self.prepared = Preparations(self)
        #: Allocations that have ended, on their way to being stored and announced (see
        #: :meth:`finish`).
        self.endings = Endings(store, bus, self._reap)
        self._wake = asyncio.Event()
        self.monitor = AllocationMonitor(self, self._wake, agent_timeout=agent_timeout,
                                         heartbeat_interval=heartbeat_interval)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: Told of every change of what the cluster shows (agents enabled or reachable, jobs,
        #: allocations queued, placed, started or ended): the live cluster streams follow it.
        self.changes = ClusterChanges()

    # --- lifecycle ----------------------------------------------------------------------
    async def load_settings(self) -> None:
        """Apply what admins set on agents before the master last stopped."""
        for agent_id, enabled in (await self.store.agent_settings()).items():
            if agent_id in self.agents:
                self.agents[agent_id].enabled = enabled

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="cluster")

    async def stop(self) -> None:
        """Stop watching. Running tasks are left running; a new master adopts them."""
        if self._task:
            # The flag ends the loop at its next round should the cancel be lost: Python
            # 3.11's wait_for returns normally, dropping a cancel, when what it waits for
            # (a wake-up) completes in the same turn of the event loop.
            self._stopping = True
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.prepared.close()
        if self.endings.waiting:
            # Still open in the database: the next master finds them ended when it adopts them.
            log.warning("the ends of allocations %s are not stored (the database could not be "
                        "used); the next start settles them",
                        ", ".join(sorted(self.endings.waiting)))

    # --- pools and jobs -----------------------------------------------------------------
    def pool_agents(self, pool: str) -> list[Agent]:
        return [a for a in self.agents.values() if a.resource_pool == pool]

    def slot_kinds(self, pool: str) -> set[str]:
        return {s.kind for a in self.pool_agents(pool) for s in a.slots}

    def check_request(self, pool: str, slots: int) -> str | None:
        """Why a job asking for ``slots`` per allocation in ``pool`` can never run, or None."""
        if pool not in self.pools:
            return (f"there is no resource pool {pool!r}; the pools are "
                    + ", ".join(sorted(self.pools)))
        sizes = [len(a.slots) for a in self.pool_agents(pool)]
        if not can_ever_fit(sizes, slots):
            return (f"asks for {slots} slots, which resource pool {pool!r} cannot give at once "
                    f"(its agents have {', '.join(map(str, sorted(sizes))) or 'no'} slots; a "
                    "trial larger than one agent needs agents with equal shares of it)")
        return None

    def set_job(self, job: Job) -> None:
        """Add a job to the queue, or change its settings; its tasks that wait in their
        agents' own queue (Slurm's) get its priority there too."""
        self.jobs[job.id] = job
        for alloc in self.allocations:
            if alloc.spec.job_id != job.id or alloc.waiting is None:
                continue
            for node in alloc.nodes:
                if node.handle is not None:
                    try:
                        self.agents[node.agent_id].set_priority(node.handle, job.priority)
                    except AgentUnreachable:
                        log.warning("cannot change the priority of allocation %s on agent %s: "
                                    "it does not answer", alloc.id, node.agent_id)
        self._wake.set()
        self.changes.publish()

    def forget_job(self, job_id: str) -> None:
        if self.jobs.pop(job_id, None) is not None:
            self.changes.publish()

    def move_ahead_of(self, job: Job, other: Job) -> None:
        """Put ``job`` right before ``other`` in the queue, taking ``other``'s priority."""
        job.priority = other.priority
        job.position = position_before(
            [j.position for j in self.jobs.values() if j.id != job.id], other.position)
        self._wake.set()
        self.changes.publish()

    # --- requests from the experiments ---------------------------------------------------
    async def request(self, spec: LaunchSpec) -> Allocation:
        """Queue an allocation for a trial or a task."""
        prefix = str(spec.trial_id) if spec.trial_id is not None else f"task-{spec.task_id}"
        alloc_id = f"{prefix}.{secrets.token_hex(4)}"
        token = secrets.token_urlsafe(32)
        await self.store.create_allocation(
            id=alloc_id, trial_id=spec.trial_id, task_id=spec.task_id,
            token_hash=hash_token(token), slots=spec.slots, state=AllocationState.QUEUED,
        )
        alloc = Allocation(alloc_id, spec, token)
        self.allocations.add(alloc, hash_token(token))
        self._wake.set()
        self.changes.publish()
        return alloc

    async def adopt(self, row: Any, spec: LaunchSpec) -> Allocation | None:
        """Take back an allocation that was running before the master restarted.

        Returns None when it cannot be: it had not started, its agent is gone from the
        config, or its task vanished without a trace. What remains of it is stopped then.
        A task whose agent does not answer yet is attached once it does.
        """
        placements = row.placements or (
            [{"agent_id": row.agent_id, "slot_ids": row.slot_ids or [], "pid": row.pid,
              "log_offset": row.log_offset}] if row.agent_id else [])
        nodes = [Node(p["agent_id"], tuple(p.get("slot_ids") or ()),
                      log_offset=int(p.get("log_offset") or 0), pid=p.get("pid"))
                 for p in placements]
        alloc = Allocation(row.id, spec, token="", state=AllocationState.RUNNING, nodes=nodes,
                           announced=AllocationState.RUNNING)
        # Submitted to agents that queue tasks of their own (Slurm), it may still wait there.
        queued_there = row.state == AllocationState.STARTING \
            and queued_by_agents(self.agents, alloc)
        if (row.state != AllocationState.RUNNING and not queued_there) or not nodes \
                or any(n.agent_id not in self.agents for n in nodes):
            await self._discard(alloc)
            return None
        for node in [] if spec.reserve_only else nodes:
            try:
                node.handle = await asyncio.to_thread(
                    self.agents[node.agent_id].attach, row.id, node.log_offset, node.pid)
            except AgentUnreachable:
                node.attach_pending = True
                self.unreachable.setdefault(node.agent_id, time.monotonic())
                self.changes.publish()
                continue
            if node.handle is None:
                await self._discard(alloc)
                return None
            wake_on_exit(self.agents[node.agent_id], node.handle, self._wake)
        if row.preempt:
            alloc.preempt_requested = True
            if queued_there:
                # It may still wait in its agents' queue: cancelled there if it does, told
                # to checkpoint once it runs otherwise.
                alloc.preempt_pending = ("asked to stop before the master restarted", None)
            else:
                alloc.preempt.set()
        if queued_there:
            # Shown as queued until it runs (a master before this one may have shown it
            # STARTING: announcing that again is harmless).
            alloc.state, alloc.announced = AllocationState.STARTING, AllocationState.QUEUED
            alloc.waiting = next((n.handle.waiting for n in nodes
                                  if n.handle is not None and n.handle.waiting), None)
            if alloc.waiting is None and any(n.attach_pending for n in nodes):
                alloc.waiting = "its agent does not answer yet"
        self.allocations.add(alloc, row.token_hash)
        self.changes.publish()
        if queued_there and alloc.waiting is None:
            await self.started(alloc)  # it began to run while the master was away
        elif alloc.preempt_pending is not None and alloc.waits_in_agents_queue:
            await self.preempt(alloc)
        return alloc

    async def _discard(self, alloc: Allocation) -> None:
        """Stop and remove whatever is left of an allocation that cannot be adopted."""
        for node in alloc.nodes:
            agent = self.agents.get(node.agent_id)
            if agent is None:
                continue
            try:
                if node.handle is not None:
                    agent.kill(node.handle, force=True)
                await asyncio.to_thread(agent.cleanup, alloc.id)
            except AgentUnreachable:
                pass

    async def dequeue(self, alloc: Allocation) -> bool:
        """Take an allocation that has not started off the queue.

        Returns False when it has started already; the caller then preempts or kills it.
        No exit is reported for a dequeued allocation: the caller settles its trial itself.
        """
        # One whose tasks wait in their agents' own queue (Slurm's) has not started either:
        # they are cancelled there.
        waiting = alloc.waits_in_agents_queue
        if (alloc.state != AllocationState.QUEUED and not waiting) \
                or not self.allocations.remove(alloc):
            return False
        self.prepared.drop(alloc.id)
        alloc.move_to(AllocationState.TERMINATED)
        alloc.preempt.set()
        self.changes.publish()
        for node in alloc.nodes if waiting else []:
            if node.handle is not None:
                self._signal(node.agent_id, node.handle, force=True)
        await self.store.update_allocation(
            alloc.id, state=AllocationState.TERMINATED, ended_at=utcnow(),
            exit_reason="taken off the queue before it started"
            + (f" ({alloc.waiting})" if waiting else ""))
        if waiting:
            await self._reap(alloc)
        return True

    async def preempt(self, alloc: Allocation, reason: str | None = None, *,
                      then: str | None = None) -> None:
        """Ask the allocation's training code to checkpoint and exit (see should_preempt);
        ``reason`` says why, and ``then`` what follows, for its log.

        If it has not exited after its pool's ``preemption_timeout``, it is killed. One whose
        tasks still wait in their agents' own queue (a Slurm job pending) has run nothing and
        has nothing to checkpoint: they are cancelled there at once, and the next round of the
        loop ends it resumable (:attr:`ExitStatus.resumable`), so that its trial goes back to
        the queue without counting a restart. One still being handed to such agents keeps
        the stop pending (:attr:`Allocation.preempt_pending`) until it is seen waiting there
        or running: called again then, this cancels it there or asks it to checkpoint.
        """
        if alloc.preempt_pending is not None:
            reason, then = alloc.preempt_pending  # settled now, as first asked
        elif alloc.preempt_requested:
            return
        alloc.preempt_requested = True
        alloc.preempt_pending = None
        if alloc.waits_in_agents_queue:
            status = ExitStatus(None, reason=(
                f"{reason or 'asked to stop'} while it waited in its agent's queue "
                f"({alloc.waiting}); it was cancelled there before it ran, with nothing to "
                "checkpoint"), resumable=True)
            for node in alloc.nodes:
                if node.handle is not None and node.status is None:
                    self._signal(node.agent_id, node.handle, force=True)
                    node.status = status
            self._wake.set()
            return
        if alloc.state == AllocationState.STARTING and queued_by_agents(self.agents, alloc):
            # Still being handed to them (sbatch runs), or adopted before its agent answered:
            # whether it waits there is not known yet. Stored, so that a restarted master
            # settles it too.
            alloc.preempt_pending = (reason, then)
            await self.store.update_allocation(alloc.id, preempt=True)
            return
        pool = self.pools.get(self.pool_of(alloc))
        timeout = pool.preemption_timeout if pool else PoolSettings("").preemption_timeout
        alloc.preempt_deadline = time.monotonic() + timeout
        alloc.preempt.set()
        await self.store.update_allocation(alloc.id, preempt=True)
        if reason:
            await allocation_system_log(self.store, alloc,
                                        f"{reason}; {then}" if then else reason)

    async def kill(self, alloc: Allocation) -> None:
        """Stop a started allocation: SIGTERM, then SIGKILL after the grace period.

        One still starting is signalled as soon as its processes exist; one that only holds
        slots gives them back at once.
        """
        alloc.killed = True
        if alloc.spec.reserve_only and alloc.state == AllocationState.RUNNING:
            # Nothing to signal: the next watch round ends it, as it ends any exited task.
            for node in alloc.nodes:
                node.status = node.status or ExitStatus(0, reason="its slots were given back")
            self._wake.set()
            return
        self.terminate(alloc)

    def terminate(self, alloc: Allocation) -> None:
        handles = [(n.agent_id, n.handle) for n in alloc.nodes
                   if n.handle is not None and n.status is None]
        for agent_id, handle in handles:
            self._signal(agent_id, handle, force=False)

        def force() -> None:
            if alloc.id in self.allocations:
                for agent_id, handle in handles:
                    self._signal(agent_id, handle, force=True)

        asyncio.get_running_loop().call_later(self.kill_grace_seconds, force)

    def _signal(self, agent_id: str, handle: TaskHandle, *, force: bool) -> None:
        try:
            self.agents[agent_id].kill(handle, force=force)
        except AgentUnreachable:
            log.warning("cannot signal allocation %s on agent %s: it does not answer",
                        handle.allocation_id, agent_id)

    # --- agents -------------------------------------------------------------------------
    async def set_agent_enabled(self, agent_id: str, enabled: bool, *, drain: bool = True) -> None:
        """Let an agent take new work, or stop it from doing so.

        Disabling with ``drain`` lets what runs there finish; without, its preemptible
        allocations are asked to checkpoint and move elsewhere.
        """
        agent = self.agents[agent_id]
        agent.enabled = enabled
        await self.store.set_agent_enabled(agent_id, enabled)
        self.changes.publish()
        if not enabled and not drain:
            for alloc in list(self.allocations):
                job = self.jobs.get(alloc.spec.job_id)
                if agent_id in alloc.agent_ids and alloc.state != AllocationState.QUEUED \
                        and (job is None or job.preemptible):
                    await self.preempt(alloc, f"agent {agent_id} was disabled",
                                       then="the trial checkpoints and moves to another agent")
        self._wake.set()

    def busy_slots(self) -> dict[tuple[str, int], str]:
        """The slots placed allocations hold: ``(agent id, slot id)`` -> allocation id."""
        return {(n.agent_id, s): a.id for a in self.allocations
                if a.state != AllocationState.QUEUED for n in a.nodes for s in n.slot_ids}

    # --- the loop -----------------------------------------------------------------------
    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.endings.retry()
                await self.monitor.heartbeat()
                await self._schedule()
                self.prepared.next()
                await self.monitor.watch()
                await self.monitor.enforce_timeouts()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                pass  # the store logs the outage once; the next round tries again
            except Exception:  # one bad round must not stop the cluster
                log.exception("cluster round failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    def pool_of(self, alloc: Allocation) -> str:
        job = self.jobs.get(alloc.spec.job_id)
        return job.pool if job else DEFAULT_RESOURCE_POOL

    def job_fields(self, alloc: Allocation) -> dict[str, Any]:
        job = self.jobs.get(alloc.spec.job_id)
        if job is None:
            return {"group": alloc.spec.job_id, "owner": alloc.spec.owner}
        return {"priority": job.priority, "position": job.position, "group": job.id,
                "owner": job.owner, "weight": job.weight, "preemptible": job.preemptible}

    async def _schedule(self) -> None:
        pending = [a for a in self.allocations if a.state == AllocationState.QUEUED]
        if not pending:
            return
        busy = self.busy_slots()
        for pool in self.pools:
            requests = [Request(a.id, a.spec.slots, queued_at=a.queued_at,
                                **self.job_fields(a))
                        for a in pending if self.pool_of(a) == pool]
            if not requests:
                continue
            agents = [SchedAgent(
                agent.agent_id,
                tuple(Slot(s.id, s.kind, busy.get((agent.agent_id, s.id))) for s in agent.slots),
                enabled=agent.enabled and agent.agent_id not in self.unreachable,
            ) for agent in self.pool_agents(pool)]
            running = [Running(a.id, a.spec.slots, queued_at=a.queued_at,
                               preempting=a.preempt_requested, **self.job_fields(a))
                       for a in self.allocations
                       if a.state != AllocationState.QUEUED and self.pool_of(a) == pool]
            decision = self.schedulers[pool].schedule(agents, requests, running)
            for victim_id in decision.preemptions:
                victim = self.allocations.get(victim_id)
                if victim is not None and victim.state != AllocationState.QUEUED:
                    await self.preempt(
                        victim, "preempted to make room for a more important job",
                        then="the trial checkpoints and resumes later")
            for assignment in decision.assignments:
                alloc = self.allocations.get(assignment.allocation_id)
                if alloc is not None and alloc.state == AllocationState.QUEUED:
                    # Its slots are taken from here on; the containers or processes start in
                    # the background, all of this round's side by side, while the loop goes on.
                    alloc.move_to(AllocationState.STARTING)
                    alloc.nodes = [Node(p.agent_id, tuple(p.slot_ids))
                                   for p in assignment.placements]
                    self.changes.publish()
                    task = asyncio.get_running_loop().create_task(self._launch(alloc))
                    self._launching.add(task)
                    task.add_done_callback(self._launching.discard)

    async def _launch(self, alloc: Allocation) -> None:
        """Start an allocation's task on each of its agents."""
        chief = alloc.nodes[0]

        async def starting() -> None:
            await self.store.update_allocation(
                alloc.id, state=AllocationState.STARTING, slot_ids=list(chief.slot_ids),
                agent_id=chief.agent_id, placements=[n.record() for n in alloc.nodes])

        self.prepared.drop(alloc.id, keep_on=chief.agent_id if len(alloc.nodes) == 1
                            and not alloc.spec.reserve_only else None)
        announcing: asyncio.Future[None] | None = None
        try:
            if not await until_stored(self.allocations, alloc, "its start", starting):
                return
            if not queued_by_agents(self.agents, alloc):
                # Said while the tasks start (its trial's state is a write of its own), and
                # heard in full before anything else is said of the allocation. Handed to
                # agents that queue tasks (Slurm), it waits there first: its trial or task
                # shows as queued until they run it (started() announces both).
                announcing = asyncio.ensure_future(
                    announce(self.bus, alloc, AllocationState.STARTING))
            addrs = [self.agents[n.agent_id].address for n in alloc.nodes]
            results = [] if alloc.spec.reserve_only else await asyncio.gather(
                *(self._launch_node(alloc, rank, addrs) for rank in range(len(alloc.nodes))),
                return_exceptions=True)
            if announcing is not None:
                with contextlib.suppress(StoreUnavailable):
                    # Refused by the database: started() says it again, before RUNNING.
                    await announcing
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
        except Exception as e:  # a launch failure is the trial's failure, not the master's
            log.error("could not start allocation %s: %s", alloc.id, e)
            for node in alloc.nodes:
                if node.handle is not None:
                    self._signal(node.agent_id, node.handle, force=True)
                node.status = ExitStatus(None, reason=f"could not start the task: {e}")
            await self.finish(alloc, ExitStatus(None, reason=f"could not start the task: {e}"))
            return
        if alloc.id not in self.allocations:
            return  # settled while it started
        alloc.waiting = next((n.handle.waiting for n in alloc.nodes
                              if n.handle is not None and n.handle.waiting), None)
        if alloc.waiting is not None:
            # In its agents' own queue (Slurm's): the monitor says it runs once it does.
            self.changes.publish()
            if alloc.killed:
                self.terminate(alloc)
            elif alloc.preempt_pending is not None:
                # Asked to stop while sbatch ran: cancelled there before it runs.
                await self.preempt(alloc)
            await allocation_system_log(self.store, alloc, f"waiting: {alloc.waiting}")
            return
        await self.started(alloc)

    async def started(self, alloc: Allocation) -> None:
        """An allocation's tasks run: it is RUNNING, stored and announced as such."""
        chief = alloc.nodes[0]
        alloc.waiting = None
        alloc.move_to(AllocationState.RUNNING)
        alloc.last_activity = time.monotonic()
        self.changes.publish()
        if alloc.killed:
            self.terminate(alloc)
        chief_handle = chief.handle
        started_at = utcnow()

        async def running() -> None:
            await self.store.update_allocation(
                alloc.id, state=AllocationState.RUNNING,
                pid=chief_handle.pid if chief_handle else None,
                workdir=chief_handle.where if chief_handle else None, started_at=started_at,
                placements=[n.record() for n in alloc.nodes])
            await announce(self.bus, alloc, AllocationState.RUNNING)

        await until_stored(self.allocations, alloc, "that it runs", running)
        if alloc.preempt_pending is not None and alloc.id in self.allocations:
            # Asked to stop before it was known whether it would wait in its agents' queue.
            await self.preempt(alloc)

    async def _launch_node(self, alloc: Allocation, rank: int, addrs: list[str]) -> None:
        node = alloc.nodes[rank]
        agent = self.agents[node.agent_id]
        node.handle = await asyncio.to_thread(
            agent.launch, self.task_spec(alloc, rank, agent, addrs))
        wake_on_exit(agent, node.handle, self._wake)

    def task_spec(self, alloc: Allocation, rank: int, agent: Agent,
                   addrs: list[str], nodes: list[Node] | None = None) -> TaskSpec:
        """The task of ``alloc`` at ``rank`` of its ``nodes`` (its placement, unless given)."""
        nodes = alloc.nodes if nodes is None else nodes
        node = nodes[rank]
        spec = alloc.spec
        info: ClusterInfoDocument = {
            **spec.cluster_info, "allocation_id": alloc.id, "slot_ids": list(node.slot_ids),
            "agent_id": node.agent_id, "container_addrs": addrs, "container_rank": rank,
            "container_slot_counts": [len(n.slot_ids) for n in nodes]}
        container = spec.container
        if agent.uses_containers:
            storage, mounts = storage_in_container(info.get("checkpoint_storage"))
            info["checkpoint_storage"] = storage
        else:
            # A sandboxed local task sees its storage, and its owner's data cache, at the same
            # paths as the host.
            mounts = storage_mounts(info.get("checkpoint_storage"))
        env = dict(spec.env)
        if spec.data_cache and not agent.uses_containers:
            mounts.append({"host_path": spec.data_cache, "container_path": spec.data_cache,
                           "read_only": False, "propagation": "rprivate"})
            env.setdefault(DATA_CACHE_ENV, spec.data_cache)
        container = dataclasses.replace(container, bind_mounts=[*container.bind_mounts, *mounts])
        env.update({
            ALLOCATION_ID_ENV: alloc.id,
            ALLOCATION_TOKEN_ENV: alloc.token,
            CLUSTER_INFO_ENV: agent.file_path(alloc.id, CLUSTER_INFO_FILE),
            # Where the master reaches the task: what a proxied task's server listens on.
            AGENT_ADDRESS_ENV: addrs[rank],
        })
        if len(nodes) > 1:
            env.update({
                NNODES_ENV: str(len(nodes)), NODE_RANK_ENV: str(rank),
                CHIEF_ADDR_ENV: addrs[0],
                CHIEF_PORT_ENV: str(rendezvous_port(alloc.id)),
            })
        job = self.jobs.get(spec.job_id)
        return TaskSpec(alloc.id, spec.argv, env, spec.context, node.slot_ids,
                        {CLUSTER_INFO_FILE: json.dumps(info, indent=2)}, container,
                        run_as=spec.run_as, owner_is_admin=spec.owner_is_admin,
                        slurm=spec.slurm,
                        priority=job.priority if job is not None else DEFAULT_PRIORITY)

    async def finish(self, alloc: Allocation, status: ExitStatus, *,
                     tasks_ended: bool = False) -> None:
        """An allocation has ended: it is closed, its end and last log lines are stored, its
        tasks' remains reaped, and :class:`AllocationExited` is published. Where its agents
        saw each of its tasks end (``tasks_ended``), its slots are free at once: the next
        queued allocation is placed on them first, and starts while this end is stored.

        While the database cannot be used the end is not lost: the allocation waits in
        :attr:`endings` and each round of the loop tries again (with a growing pause), so
        its trial or task ends up in its true state once the database is back.
        """
        if not self.allocations.remove(alloc):
            return
        self.prepared.drop(alloc.id)
        alloc.move_to(AllocationState.TERMINATED)
        alloc.preempt.set()  # release any long-poll still waiting (answers true: stop)
        self.changes.publish()
        if tasks_ended:
            await self._schedule()
            # The launches just placed go first: their start is written before this end's
            # bookkeeping takes the store.
            await asyncio.sleep(0)
        await self.endings.settle(Ending(alloc, status))

    async def _reap(self, alloc: Allocation) -> None:
        """Remove what is left of an ended allocation's tasks on their agents, and let the
        loop schedule its slots."""
        for node in alloc.nodes:
            if node.handle is not None:
                try:
                    await asyncio.to_thread(self.agents[node.agent_id].reap, node.handle)
                except AgentUnreachable:
                    self.orphans.setdefault(node.agent_id, []).append(node.handle)
        self._wake.set()
