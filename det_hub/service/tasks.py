"""Tasks that are not an experiment's trials, at run time: commands, notebooks, shells and
TensorBoards.

A task is a job of the queue by itself (``cmd-<id>``, ``notebook-<id>``, ...; never preempted),
asks the cluster for one allocation, and ends when that allocation's process exits or is killed;
it never runs again. Every change of a task's state goes through :meth:`TaskManager._set_state`,
which checks it against :data:`det_hub.states.TASK_TRANSITIONS` and stores it.

A proxied task (a notebook, shell or TensorBoard) serves something on a port of the host it
runs on (its agent's address; on a Slurm pool, its job's node); once it answers there it says
which port (:meth:`TaskManager.ready`), and the master's proxy sends its users' traffic to that
port of the host its agent names (:meth:`det_hub.agents.Agent.task_address`), never to a host
the task names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from det_hub.agents import AgentUnreachable
from det_hub.agents.slots import slot_resources
from det_hub.archive import ContextLimits
from det_hub.config import (
    CommandConfig,
    ConfigLimits,
    TaskConfig,
    parse_command_config,
    parse_task_config,
)
from det_hub.config.limited_yaml import DEFAULT_LIMITS
from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL
from det_hub.service.bus import AllocationExited, AllocationStateChanged, EventBus
from det_hub.service.cluster import Allocation, Cluster, Job
from det_hub.service.context import read_config, read_context
from det_hub.service.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    NotReady,
    Unavailable,
)
from det_hub.service.serialize import task_json
from det_hub.states import AllocationState, TaskState, TaskType, check_task_transition
from det_hub.storage import remote_tensorboard, tensorboard_dir
from det_hub.store import Store, utcnow

if TYPE_CHECKING:
    from det_hub.service.auth import Principal, UserManager
    from det_hub.service.launch import Launcher
    from det_hub.store import LogRow, Task

log = logging.getLogger("det_hub.tasks")

S = TaskState

#: Cluster allocation states and the task states they mean.
_RUN_STATES = {AllocationState.QUEUED: S.QUEUED, AllocationState.STARTING: S.STARTING,
               AllocationState.RUNNING: S.RUNNING}


def task_job_id(task: Task) -> str:
    """The task's job in the queue: ``cmd-<id>`` for a command, ``notebook-<id>``,
    ``shell-<id>``, ``tensorboard-<id>``."""
    return f"{TaskType(task.type).job_prefix}{task.id}"


def task_job_number(job_id: str) -> int | None:
    """The task id in a task's job id, None for a job that is not a task's."""
    for kind in TaskType:
        rest = job_id.removeprefix(kind.job_prefix)
        if rest != job_id and rest.isdigit():
            return int(rest)
    return None


async def kernels_busy(task: Task, base_url: str) -> bool:
    """Whether any kernel of a notebook's Jupyter server is running code (False when the
    server does not answer). ``base_url`` is the master's, under which the notebook serves."""
    request = HTTPRequest(
        f"http://{task.proxy_address}{base_url}proxy/{task.id}/api/kernels",
        headers={"Authorization": f"token {task.secret}"}, connect_timeout=5, request_timeout=5)
    try:
        response = await AsyncHTTPClient().fetch(request)
        kernels = json.loads(response.body)
    except (OSError, HTTPClientError, ValueError):
        return False
    return any(isinstance(k, dict) and k.get("execution_state") == "busy" for k in kernels)


class TaskManager:
    """The live (not yet TERMINATED) tasks and what happens to them. Made by the master."""

    def __init__(self, store: Store, cluster: Cluster, users: UserManager, launcher: Launcher,
                 bus: EventBus, *, base_url: str = "/",
                 context_limits: ContextLimits | None = None,
                 config_limits: ConfigLimits = DEFAULT_LIMITS) -> None:
        self.store = store
        self.base_url = base_url
        self.cluster = cluster
        self.users = users
        self.launcher = launcher
        self.context_limits = context_limits or ContextLimits()
        self.config_limits = config_limits
        self.live: dict[int, Task] = {}
        #: Tasks their owner (or an admin) killed, so that their end says so.
        self._killed: set[int] = set()
        self.lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        bus.subscribe(AllocationStateChanged, self._on_allocation_state)
        bus.subscribe(AllocationExited, self._on_allocation_exit)

    async def job(self, task: Task) -> Job:
        """The task's job in the queue."""
        position = task.queue_position
        return Job(
            id=task_job_id(task), pool=task.resource_pool,
            owner=await self.users.username(task.owner_id),
            name=task.description, priority=task.priority,
            weight=float((task.config.get("resources") or {}).get("weight", 1.0)),
            position=position if position is not None else task.created_at.timestamp(),
            preemptible=False, kind=task.type, submitted=task.created_at)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Begin watching proxied tasks' activity (for idle timeouts)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch_activity())

    async def stop(self) -> None:
        """Stop watching tasks' activity."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None

    async def _watch_activity(self) -> None:
        """What counts as use besides output and proxy traffic, for idle timeouts: a proxied
        task that is still starting its server is not idle, and a notebook whose kernel runs a
        cell is in use, though nobody watches it. Each notebook with an ``idle_timeout`` is
        asked four times within that timeout (at most every 10 s, at least every 0.5 s)."""
        next_check: dict[int, float] = {}
        while True:
            now = time.monotonic()
            for task in list(self.live.values()):
                alloc = self.cluster.allocations.of_task(task.id)
                if alloc is None or alloc.spec.idle_timeout is None \
                        or alloc.state != AllocationState.RUNNING \
                        or not TaskType(task.type).proxied:
                    continue
                if not task.proxy_address:
                    alloc.last_activity = now
                    continue
                if task.type != TaskType.NOTEBOOK.value or next_check.get(task.id, 0.0) > now:
                    continue
                next_check[task.id] = now + min(10.0, max(alloc.spec.idle_timeout / 4, 0.5))
                try:
                    if await kernels_busy(task, self.base_url):
                        alloc.last_activity = time.monotonic()
                except Exception:  # one notebook's odd answer must not end the watch
                    log.exception("could not ask notebook %d about its kernels", task.id)
            for task_id in set(next_check) - set(self.live):
                del next_check[task_id]
            await asyncio.sleep(0.5)

    async def _queue(self, *, type: TaskType, owner_id: int, config: dict[str, Any],
                     context: bytes | None, description: str, resource_pool: str, priority: int,
                     details: dict[str, Any] | None = None, secret: str | None = None) -> Task:
        """Store a task and queue it."""
        task = await self.store.create_task(
            type=type, owner_id=owner_id, state=S.QUEUED, config=config, context=context,
            description=description, resource_pool=resource_pool, priority=priority,
            details=details, secret=secret)
        async with self.lock:
            self.live[task.id] = task
            self.cluster.set_job(await self.job(task))
            await self.cluster.request(await self.launcher.task_spec(task))
        return task

    async def recover(self, open_allocations: dict[int, Any]) -> None:
        """Take back the tasks a previous master left: running ones are adopted where their
        process still runs, queued ones are queued again, and the rest end, saying why.

        Args:
            open_allocations: each task's allocation row that had not ended, by task id.
        """
        live = [s.value for s in TaskState if not s.terminal]
        for task in await self.store.list_tasks(states=live):
            self.cluster.set_job(await self.job(task))
            self.live[task.id] = task
            row = open_allocations.pop(task.id, None)
            adopted = None
            if row is not None:
                adopted = await self.cluster.adopt(row, await self.launcher.task_spec(task))
                if adopted is None:
                    await self.store.update_allocation(
                        row.id, state=AllocationState.TERMINATED, ended_at=utcnow(),
                        exit_reason="lost when the master restarted")
            if adopted is not None:
                log.info("adopted allocation %s of task %d", adopted.id, task.id)
                if task.state == S.TERMINATING.value:
                    # Killed just before the master stopped: finish the job.
                    self._killed.add(task.id)
                    await self.cluster.kill(adopted)
                continue
            if task.state == S.QUEUED.value:
                await self.cluster.request(await self.launcher.task_spec(task))
                continue
            await self._end(task, None, f"lost when the master restarted while it was "
                                        f"{task.state}; its process was not found again")
        for row in open_allocations.values():  # of tasks that had ended already
            await self.store.update_allocation(row.id, state=AllocationState.TERMINATED,
                                               ended_at=utcnow(), exit_reason="its task had ended")

    async def _kill(self, task_id: int) -> Task:
        """Stop a task: one still queued ends at once; a started one is signalled (SIGTERM,
        then SIGKILL after the grace period) and ends when its process exits."""
        async with self.lock:
            task = self.live.get(task_id)
            if task is None or task.state == S.TERMINATING.value:
                return task or await self._stored(task_id)
            self._killed.add(task_id)
            alloc = self.cluster.allocations.of_task(task_id)
            if alloc is None or await self.cluster.dequeue(alloc):
                await self._end(task, None, "killed before it started")
            else:
                await self._set_state(task, S.TERMINATING)
                await self.cluster.kill(alloc)
            return task

    async def _mark_ready(self, alloc: Allocation, port: int) -> Task:
        """A proxied task's server answers on ``port`` of the host its agent says the task
        runs on (:meth:`~det_hub.agents.Agent.task_address`; the task names only the port):
        the proxy may send traffic there from now on.

        Raises:
            KeyError: The allocation's task has ended.
            Conflict: The agent cannot say where the task runs.
            Unavailable: The agent does not answer now.
        """
        if not alloc.nodes or alloc.spec.task_id not in self.live:
            raise KeyError(alloc.spec.task_id)
        node = alloc.nodes[0]
        agent = self.cluster.agents[node.agent_id]
        try:
            host = agent.address if node.handle is None else \
                await asyncio.to_thread(agent.task_address, node.handle)
        except AgentUnreachable as e:
            raise Unavailable(f"agent {agent.agent_id} does not answer, so where allocation "
                              f"{alloc.id} runs is unknown: {e}", retry_after=2) from None
        except LookupError as e:
            raise Conflict(f"agent {agent.agent_id} cannot say where allocation {alloc.id} "
                           f"runs: {e}") from None
        async with self.lock:
            task = self.live.get(alloc.spec.task_id or -1)
            if task is None:
                raise KeyError(alloc.spec.task_id)
            address = f"{host}:{port}"
            row = await self.store.update_task(task.id, proxy_address=address)
            task.proxy_address = row.proxy_address
            alloc.last_activity = time.monotonic()  # idle from now, not from its start
            log.info("%s %d serves at %s", TaskType(task.type).word, task.id, address)
            return task

    def touch(self, task_id: int) -> None:
        """The task was used (through the proxy): its idle time starts again."""
        alloc = self.cluster.allocations.of_task(task_id)
        if alloc is not None:
            alloc.last_activity = time.monotonic()

    async def find(self, task_id: int) -> Task | None:
        """The task with this id: the live one while it runs, else the stored one."""
        return self.live.get(task_id) or await self.store.get_task(task_id)

    async def _stored(self, task_id: int) -> Task:
        task = await self.store.get_task(task_id)
        if task is None:
            raise KeyError(task_id)
        return task

    # --- what users ask ----------------------------------------------------------------

    async def create(self, who: Principal, kind: TaskType, config_text: str,
                          context_b64: str | None = None,
                          experiment_ids: Sequence[int] = (), *,
                          command: Sequence[str] | None = None,
                          environment: Mapping[str, str] | None = None) -> Task:
        """Queue a task: its config (see :mod:`det_hub.config.command`), an optional context
        archive, and for a TensorBoard the experiments whose metrics it shows. A hub server
        given a ``command`` is run by the master (see :mod:`det_hub.exec.hub_server`), with
        the hub's ``environment`` for it, kept as the task's secret: never shown by the API.

        Raises:
            BadRequest: The config is invalid, asks for what this cluster cannot give, or a
                TensorBoard names no experiment or one without TensorBoard files; each detail
                names its config path.
        """
        if who.user is None:
            raise Forbidden(f"training code cannot start a {kind.word}")
        if kind.proxied and not config_text.strip():
            config_text = "{}"  # every setting has a default
        # Parsed and checked off the event loop, under the configured limits.
        parse: Any = parse_command_config if kind is TaskType.COMMAND else parse_task_config
        config: CommandConfig | TaskConfig = await read_config(
            parse, config_text, self.config_limits, f"the {kind.word} config")
        problems = self.launcher.placement_problems(config.resources.resource_pool,
                                            config.resources.slots, "resources.slots")
        problems += self.launcher.path_problems(config.to_dict(), who.user.username)
        context = await read_context(context_b64, self.context_limits)
        if problems:
            raise BadRequest(f"the {kind.word} config cannot run on this master", problems)
        details: dict[str, Any] | None = None
        secret: str | None = None
        if kind is TaskType.TENSORBOARD:
            details = {"experiment_ids": await self._tensorboard_experiments(experiment_ids)}
        if kind is TaskType.SHELL:
            from det_hub.exec.shell import generate_keypair

            secret, public_key = generate_keypair()
            details = {"public_key": public_key}
        elif kind.proxied:
            secret = secrets.token_urlsafe(32)
        elif kind is TaskType.HUB_SERVER and command:
            details = {"command": list(command)}
            secret = json.dumps(dict(environment or {}))
        return await self._queue(
            type=kind, owner_id=who.user.id, config=config.to_dict(), context=context,
            description=config.description or _task_description(kind, config, details),
            resource_pool=config.resources.resource_pool or DEFAULT_RESOURCE_POOL,
            priority=config.resources.priority or DEFAULT_PRIORITY, details=details, secret=secret)

    async def _tensorboard_experiments(self, experiment_ids: Sequence[int]) -> list[int]:
        """The experiments a TensorBoard shows, checked: they exist and keep their
        TensorBoard files where the TensorBoard can read them."""
        if not experiment_ids:
            raise BadRequest("experiment_ids: give at least one experiment")
        ids = list(dict.fromkeys(int(i) for i in experiment_ids))
        problems = []
        for exp_id in ids:
            row = await self.store.get_experiment(exp_id)
            if row is None:
                problems.append({"path": "experiment_ids",
                                 "message": f"experiment {exp_id} not found"})
            elif (tensorboard_dir(row.id, row.config.get("checkpoint_storage")) is None
                  and not remote_tensorboard(row.config.get("checkpoint_storage"))):
                problems.append({"path": "experiment_ids", "message": (
                    f"experiment {exp_id} keeps its checkpoints where no TensorBoard files "
                    "are written (only shared_fs, directory and s3 storage have them)")})
        if problems:
            raise BadRequest("the TensorBoard cannot show these experiments", problems)
        return ids

    async def of_type(self, who: Principal, kind: TaskType) -> list[Task]:
        """Every task of this type, oldest first (the 1000 newest)."""
        return await self.store.list_tasks(type=kind.value, limit=1000)

    async def get(self, who: Principal, kind: TaskType, task_id: int) -> Task:
        """One task of this type.

        Raises:
            NotFound: No task of this type has this id.
        """
        task = await self.find(task_id)
        if task is None or task.type != kind.value:
            raise NotFound(f"{kind.word} {task_id} not found")
        return task

    async def kill(self, who: Principal, kind: TaskType, task_id: int) -> Task:
        """Kill a task (its owner or an admin); one that has ended is left as it is."""
        await self.owned(who, task_id, kind)
        if task_id not in self.live:
            return await self.get(who, kind, task_id)
        return await self._kill(task_id)

    async def owned(self, who: Principal, task_id: int,
                          kind: TaskType | None = None) -> Task:
        """A task the caller may change (see :meth:`may_change`).

        Raises:
            NotFound: No task (of this type) has this id.
            Forbidden: Neither its owner nor an admin."""
        task = await self.find(task_id)
        if task is None or (kind is not None and task.type != kind.value):
            raise NotFound(f"{(kind or TaskType.COMMAND).word} {task_id} not found")
        if not self.may_change(who, task):
            raise Forbidden(f"only the owner of {TaskType(task.type).word} {task_id} or an "
                            "admin can change it")
        return task

    @staticmethod
    def may_change(who: Principal, task: Task) -> bool:
        """Whether the caller owns the task or is an admin: who may kill it, use what it
        serves, and see its secret."""
        return who.may_change(task.owner_id)

    async def to_json(self, who: Principal, rows: Iterable[Task]) -> list[dict[str, Any]]:
        """Tasks as the API shows them; what lets one use a proxied task (its URL with access
        token, a shell's private key) only to its owner and admins."""
        rows = list(rows)
        shown = [task_json(t, await self.users.username(t.owner_id),
                           with_secret=self.may_change(who, t)) for t in rows]
        for task, body in zip(rows, shown, strict=True):
            if TaskType(task.type).reserves_only and self.may_change(who, task):
                body["placement"] = self.placement(task.id)
                if task.proxy_address and task.state == S.RUNNING.value:
                    body["server_address"] = task.proxy_address
        return shown

    def placement(self, task_id: int) -> dict[str, Any] | None:
        """Where a running task's slots are, and what a container on them gets (for a hub
        server's spawner): the agent, its Docker host, the slots' GPUs or CPU cores and the
        environment that goes with them. None while it waits for slots, or after it ended."""
        alloc = self.cluster.allocations.of_task(task_id)
        if alloc is None or alloc.state != AllocationState.RUNNING or not alloc.nodes:
            return None
        node = alloc.nodes[0]
        agent = self.cluster.agents[node.agent_id]
        slots = [s for s in agent.slots if s.id in node.slot_ids]
        return {"agent_id": agent.agent_id, "agent_type": agent.kind,
                "address": agent.address, "slot_ids": list(node.slot_ids),
                "docker": agent.connection() if agent.uses_containers else None,
                **slot_resources(slots)}

    def ended(self, task_id: int) -> bool:
        """Whether a task has ended and its last log line is stored."""
        return task_id not in self.live and self.cluster.allocations.of_task(task_id) is None

    async def ready(self, who: Principal, task_id: int, port: int) -> Task:
        """A proxied task's server says it answers on ``port`` (its allocation's token only).

        Raises:
            Forbidden: Not this task's allocation.
            Conflict: The task has ended.
        """
        if who.allocation is None or who.allocation.spec.task_id != task_id:
            raise Forbidden(f"only task {task_id}'s own allocation can say it is ready")
        try:
            return await self._mark_ready(who.allocation, port)
        except KeyError:
            raise Conflict(f"task {task_id} has ended") from None

    async def proxy_target(self, task_id: int) -> tuple[Task, str]:
        """A running proxied task and the ``host:port`` its server answers on.

        Raises:
            NotFound: No proxied task has this id.
            NotReady: The task is not serving yet, or has ended.
        """
        task = await self.find(task_id)
        if task is None or not TaskType(task.type).proxied:
            raise NotFound(f"no notebook, shell or TensorBoard has id {task_id}")
        alloc = self.cluster.allocations.of_task(task_id)
        if task_id not in self.live or alloc is None or alloc.state != AllocationState.RUNNING \
                or alloc.killed or not task.proxy_address:
            raise NotReady(task)
        return task, task.proxy_address

    async def logs(self, task_id: int, *, after_id: int = 0, limit: int) -> list[LogRow]:
        """A task's log lines after line ``after_id``, oldest first, at most ``limit``."""
        return await self.store.get_task_logs(task_id, after_id=after_id, limit=limit)

    # --- cluster events -----------------------------------------------------------------
    async def _on_allocation_state(self, event: AllocationStateChanged) -> None:
        alloc, state = event.alloc, event.state
        async with self.lock:
            task = self.live.get(alloc.spec.task_id or -1)
            target = _RUN_STATES.get(state)
            if task is None or target is None or task.state == S.TERMINATING.value:
                return
            await self._set_state(task, target)

    async def _on_allocation_exit(self, event: AllocationExited) -> None:
        alloc, status = event.alloc, event.status
        async with self.lock:
            task = self.live.get(alloc.spec.task_id or -1)
            if task is None:
                return
            if alloc.idle_timed_out:
                reason = (f"killed after {alloc.spec.idle_timeout:g} s idle "
                          f"({alloc.spec.idle_means}; its idle_timeout)")
            elif task.id in self._killed:
                reason = "killed by its owner or an admin"
            elif status.reason:
                reason = status.reason
            elif status.exit_code is not None:
                reason = f"exited with code {status.exit_code}"
            else:
                reason = f"ended by signal {status.signal}" if status.signal else "ended"
            await self._end(task, status.exit_code, reason)

    # --- state --------------------------------------------------------------------------
    async def _end(self, task: Task, exit_code: int | None, reason: str) -> None:
        # The last line is stored before the state: a log follower stops at TERMINATED.
        await self.store.add_logs([{
            "task_id": task.id, "allocation_id": None, "timestamp": datetime.now(timezone.utc),
            "rank": None, "stdtype": "system",
            "message": f"the {TaskType(task.type).word} ended: {reason}"}])
        await self._set_state(task, S.TERMINATED, ended_at=utcnow(), exit_code=exit_code,
                              exit_reason=reason)
        self.live.pop(task.id, None)
        self._killed.discard(task.id)
        self.cluster.forget_job(task_job_id(task))

    async def _set_state(self, task: Task, target: TaskState, **fields: Any) -> None:
        check_task_transition(TaskState(task.state), target)
        row = await self.store.update_task(task.id, state=target, **fields)
        for name in ("state", *fields):
            setattr(task, name, getattr(row, name))



def _task_description(kind: TaskType, config: TaskConfig,
                      details: dict[str, Any] | None) -> str:
    """A task's default description: ``Command (its command line)``, shortened;
    ``TensorBoard (experiments 3, 4)``; ``Notebook``, ``Shell``."""
    if isinstance(config, CommandConfig):
        line = " ".join(config.argv())
        return f"Command ({line if len(line) <= 60 else line[:57] + '...'})"
    if kind is TaskType.TENSORBOARD and details:
        ids = details["experiment_ids"]
        return f"TensorBoard (experiment{'s' if len(ids) > 1 else ''} " \
               f"{', '.join(str(i) for i in ids)})"
    return kind.word.capitalize()

__all__ = ["TaskManager", "task_job_id", "task_job_number"]
