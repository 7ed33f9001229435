"""Tasks that are not an experiment's trials, at run time: commands, notebooks, shells and
TensorBoards.

A task is a job of the queue by itself (``cmd-<id>``, ``notebook-<id>``, ...; never preempted),
asks the cluster for one allocation, and ends when that allocation's process exits or is killed;
it never runs again. Every change of a task's state goes through :meth:`TaskManager._set_state`,
which checks it against :data:`det_hub.states.TASK_TRANSITIONS` and stores it.

A proxied task (a notebook, shell or TensorBoard) serves something on a port of its agent's
address; once it answers there it says so (:meth:`TaskManager.ready`), and the master's proxy
sends its users' traffic to that address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from det_hub.agents import ExitStatus
from det_hub.service.cluster import QUEUED, RUNNING, STARTING, Allocation, Cluster, Job, LaunchSpec
from det_hub.states import TaskState, TaskType, check_task_transition
from det_hub.store import Store, utcnow

if TYPE_CHECKING:
    from det_hub.store.models import Task

log = logging.getLogger("det_hub.tasks")

S = TaskState

#: Cluster allocation states and the task states they mean.
_RUN_STATES = {QUEUED: S.QUEUED, STARTING: S.STARTING, RUNNING: S.RUNNING}


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

    def __init__(
        self,
        store: Store,
        cluster: Cluster,
        launch_spec: Callable[[Task], Awaitable[LaunchSpec]],
        username: Callable[[int], Awaitable[str]],
        base_url: str = "/",
    ) -> None:
        self.store = store
        self.base_url = base_url
        self.cluster = cluster
        self._launch_spec = launch_spec
        self._username = username
        self.live: dict[int, Task] = {}
        #: Tasks their owner (or an admin) killed, so that their end says so.
        self._killed: set[int] = set()
        self.lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None

    async def job(self, task: Task) -> Job:
        position = task.queue_position
        return Job(
            id=task_job_id(task), pool=task.resource_pool, owner=await self._username(
                task.owner_id),
            name=task.description, priority=task.priority,
            weight=float((task.config.get("resources") or {}).get("weight", 1.0)),
            position=position if position is not None else task.created_at.timestamp(),
            preemptible=False, kind=task.type, submitted=task.created_at)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Begin watching proxied tasks' activity (for idle timeouts)."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch_activity())

    async def stop(self) -> None:
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
                alloc = self.cluster.for_task(task.id)
                if alloc is None or alloc.spec.idle_timeout is None or alloc.state != RUNNING \
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

    async def create(self, *, type: TaskType, owner_id: int, config: dict[str, Any],
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
            await self.cluster.request(await self._launch_spec(task))
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
                adopted = await self.cluster.adopt(row, await self._launch_spec(task))
                if adopted is None:
                    await self.store.update_allocation(
                        row.id, state="TERMINATED", ended_at=utcnow(),
                        exit_reason="lost when the master restarted")
            if adopted is not None:
                log.info("adopted allocation %s of task %d", adopted.id, task.id)
                if task.state == S.TERMINATING.value:
                    # Killed just before the master stopped: finish the job.
                    self._killed.add(task.id)
                    await self.cluster.kill(adopted)
                continue
            if task.state == S.QUEUED.value:
                await self.cluster.request(await self._launch_spec(task))
                continue
            await self._end(task, None, f"lost when the master restarted while it was "
                                        f"{task.state}; its process was not found again")
        for row in open_allocations.values():  # of tasks that had ended already
            await self.store.update_allocation(row.id, state="TERMINATED", ended_at=utcnow(),
                                               exit_reason="its task had ended")

    async def kill(self, task_id: int) -> Task:
        """Stop a task: one still queued ends at once; a started one is signalled (SIGTERM,
        then SIGKILL after the grace period) and ends when its process exits."""
        async with self.lock:
            task = self.live.get(task_id)
            if task is None or task.state == S.TERMINATING.value:
                return task or await self._stored(task_id)
            self._killed.add(task_id)
            alloc = self.cluster.for_task(task_id)
            if alloc is None or await self.cluster.dequeue(alloc):
                await self._end(task, None, "killed before it started")
            else:
                await self._set_state(task, S.TERMINATING)
                await self.cluster.kill(alloc)
            return task

    async def ready(self, alloc: Allocation, port: int) -> Task:
        """A proxied task's server answers on ``port`` of its agent's address: the proxy may
        send traffic there from now on.

        Raises:
            KeyError: The allocation's task has ended.
        """
        async with self.lock:
            task = self.live.get(alloc.spec.task_id or -1)
            if task is None or not alloc.nodes:
                raise KeyError(alloc.spec.task_id)
            address = f"{self.cluster.agents[alloc.nodes[0].agent_id].address}:{port}"
            row = await self.store.update_task(task.id, proxy_address=address)
            task.proxy_address = row.proxy_address
            alloc.last_activity = time.monotonic()  # idle from now, not from its start
            log.info("%s %d serves at %s", TaskType(task.type).word, task.id, address)
            return task

    def touch(self, task_id: int) -> None:
        """The task was used (through the proxy): its idle time starts again."""
        alloc = self.cluster.for_task(task_id)
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

    # --- cluster events -----------------------------------------------------------------
    async def on_run_state(self, alloc: Allocation, state: str) -> None:
        async with self.lock:
            task = self.live.get(alloc.spec.task_id or -1)
            target = _RUN_STATES.get(state)
            if task is None or target is None or task.state == S.TERMINATING.value:
                return
            await self._set_state(task, target)

    async def on_allocation_exit(self, alloc: Allocation, status: ExitStatus) -> None:
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


__all__ = ["TaskManager", "task_job_id", "task_job_number"]
