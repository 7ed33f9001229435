"""The cluster: agents, the queue of allocations waiting for slots, and the tasks running.

An *allocation* is one attempt to run a trial's process on some slots. The cluster keeps the
queue, asks the scheduling policy where waiting allocations go, starts them through the agent,
ships their logs into the store, notices when they end, and carries preemption signals to the
training code's long-poll.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from det_hub.agents.local import ExitStatus, LocalAgent, TaskHandle
from det_hub.scheduler import Agent, PriorityScheduler, Request, Scheduler, Slot
from det_hub.store import Store, hash_token, utcnow

log = logging.getLogger("det_hub.cluster")

QUEUED, STARTING, RUNNING, TERMINATED = "QUEUED", "STARTING", "RUNNING", "TERMINATED"
_RANK_PREFIX = re.compile(r"^\[rank=(\d+)\] ?(.*)$", re.DOTALL)


@dataclasses.dataclass
class LaunchSpec:
    """Everything needed to start a trial's process once slots are assigned."""

    trial_id: int
    experiment_id: int
    owner: str
    slots: int
    priority: int
    argv: list[str]
    env: dict[str, str]
    cluster_info: dict[str, Any]
    context: bytes | None


@dataclasses.dataclass
class Allocation:
    id: str
    spec: LaunchSpec
    token: str
    state: str = QUEUED
    queued_at: float = dataclasses.field(default_factory=time.monotonic)
    queued_wall: datetime = dataclasses.field(default_factory=utcnow)
    slot_ids: tuple[int, ...] = ()
    handle: TaskHandle | None = None
    preempt: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    #: Asked to checkpoint and stop (a pause, or a preemption); a clean exit then means
    #: "resume later", not "done".
    preempt_requested: bool = False
    killed: bool = False


ExitCallback = Callable[[Allocation, ExitStatus], Awaitable[None]]
StateCallback = Callable[[Allocation, str], Awaitable[None]]


class Cluster:
    """Queue, placement and monitoring of allocations on the master's agents."""

    def __init__(
        self,
        store: Store,
        agent: LocalAgent,
        on_exit: ExitCallback,
        on_state: StateCallback,
        *,
        scheduler: Scheduler | None = None,
        poll_interval: float = 0.2,
        kill_grace_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.agent = agent
        self.on_exit = on_exit
        self.on_state = on_state
        self.scheduler = scheduler or PriorityScheduler()
        self.poll_interval = poll_interval
        self.kill_grace_seconds = kill_grace_seconds
        self.allocations: dict[str, Allocation] = {}
        self._by_token: dict[str, Allocation] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="cluster")

    async def stop(self) -> None:
        """Stop watching. Running tasks are left running; a new master adopts them."""
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # --- requests from the experiments ---------------------------------------------------
    def max_slots(self) -> int:
        return len(self.agent.slots)

    async def request(self, spec: LaunchSpec) -> Allocation:
        """Queue an allocation for a trial."""
        alloc_id = f"{spec.trial_id}.{secrets.token_hex(4)}"
        token = secrets.token_urlsafe(32)
        await self.store.create_allocation(
            id=alloc_id, trial_id=spec.trial_id, token_hash=hash_token(token),
            slots=spec.slots, state=QUEUED,
        )
        alloc = Allocation(alloc_id, spec, token)
        self.allocations[alloc_id] = alloc
        self._by_token[hash_token(token)] = alloc
        self._wake.set()
        return alloc

    async def adopt(
        self, alloc_id: str, spec: LaunchSpec, token_hash: str, handle: TaskHandle,
        slot_ids: tuple[int, ...], preempt: bool,
    ) -> Allocation:
        """Take back a task that was running before the master restarted."""
        alloc = Allocation(alloc_id, spec, token="", state=RUNNING, slot_ids=slot_ids,
                           handle=handle)
        if preempt:
            alloc.preempt_requested = True
            alloc.preempt.set()
        self.allocations[alloc_id] = alloc
        self._by_token[token_hash] = alloc
        return alloc

    def for_token_hash(self, token_hash: str) -> Allocation | None:
        return self._by_token.get(token_hash)

    def for_trial(self, trial_id: int) -> Allocation | None:
        for alloc in self.allocations.values():
            if alloc.spec.trial_id == trial_id:
                return alloc
        return None

    async def dequeue(self, alloc: Allocation) -> bool:
        """Take an allocation that has not started off the queue.

        Returns False when it has started already; the caller then preempts or kills it.
        No exit is reported for a dequeued allocation: the caller settles its trial itself.
        """
        if alloc.state != QUEUED or self.allocations.pop(alloc.id, None) is None:
            return False
        self._forget_token(alloc)
        alloc.state = TERMINATED
        alloc.preempt.set()
        await self.store.update_allocation(alloc.id, state=TERMINATED, ended_at=utcnow(),
                                           exit_reason="taken off the queue before it started")
        return True

    async def preempt(self, alloc: Allocation) -> None:
        """Ask the allocation's training code to checkpoint and exit (see should_preempt)."""
        if not alloc.preempt_requested:
            alloc.preempt_requested = True
            alloc.preempt.set()
            await self.store.update_allocation(alloc.id, preempt=True)

    async def kill(self, alloc: Allocation) -> None:
        """Stop a started allocation: SIGTERM, then SIGKILL after the grace period.

        One still starting is signalled as soon as its process exists.
        """
        alloc.killed = True
        if alloc.handle is not None:
            self._terminate(alloc, alloc.handle)

    def _terminate(self, alloc: Allocation, handle: TaskHandle) -> None:
        self.agent.kill(handle)

        def force() -> None:
            if alloc.id in self.allocations:
                self.agent.kill(handle, force=True)

        asyncio.get_running_loop().call_later(self.kill_grace_seconds, force)

    # --- views for the API --------------------------------------------------------------
    def agents_view(self) -> list[dict[str, Any]]:
        used = {s: a.id for a in self.allocations.values() for s in a.slot_ids
                if a.state != QUEUED}
        return [{
            "id": self.agent.agent_id, "type": "local", "enabled": True,
            "slots": [{"id": s.id, "type": s.kind, "device": s.device,
                       "cpus": list(s.cpus), "description": s.description,
                       "allocation_id": used.get(s.id)} for s in self.agent.slots],
        }]

    def jobs_view(self) -> list[dict[str, Any]]:
        jobs = []
        for a in sorted(self.allocations.values(), key=lambda a: a.queued_at):
            jobs.append({
                "allocation_id": a.id, "trial_id": a.spec.trial_id,
                "experiment_id": a.spec.experiment_id, "owner": a.spec.owner,
                "state": QUEUED if a.state == QUEUED else RUNNING, "slots": a.spec.slots,
                "priority": a.spec.priority,
                "queued_at": a.queued_wall.isoformat().replace("+00:00", "Z"),
            })
        return jobs

    # --- the loop -----------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            try:
                await self._schedule()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not stop the cluster
                log.exception("cluster round failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _schedule(self) -> None:
        pending = [a for a in self.allocations.values() if a.state == QUEUED]
        if not pending:
            return
        busy = {s: a.id for a in self.allocations.values() if a.state != QUEUED
                for s in a.slot_ids}
        agent = Agent(self.agent.agent_id, tuple(Slot(s.id, s.kind, busy.get(s.id))
                                                 for s in self.agent.slots))
        requests = [Request(a.id, a.spec.slots, a.spec.priority, a.queued_at, a.spec.owner,
                            str(a.spec.experiment_id)) for a in pending]
        decision = self.scheduler.schedule([agent], requests)
        for assignment in decision.assignments:
            # A pause or kill may take an allocation off the queue while an earlier one starts.
            alloc = self.allocations.get(assignment.allocation_id)
            if alloc is not None and alloc.state == QUEUED:
                await self._launch(alloc, assignment.slot_ids)

    async def _launch(self, alloc: Allocation, slot_ids: tuple[int, ...]) -> None:
        alloc.state, alloc.slot_ids = STARTING, slot_ids
        await self.store.update_allocation(alloc.id, state=STARTING, slot_ids=list(slot_ids),
                                           agent_id=self.agent.agent_id)
        await self.on_state(alloc, STARTING)
        info = dict(alloc.spec.cluster_info, allocation_id=alloc.id, slot_ids=list(slot_ids),
                    agent_id=self.agent.agent_id)
        env = dict(alloc.spec.env)
        env.update({
            "DET_HUB_ALLOCATION_ID": alloc.id,
            "DET_HUB_ALLOCATION_TOKEN": alloc.token,
        })
        root = self.agent.task_root(alloc.id)
        env["DET_HUB_CLUSTER_INFO"] = str(root / "cluster_info.json")
        try:
            handle = await asyncio.to_thread(
                self.agent.launch, alloc.id, alloc.spec.argv, env, alloc.spec.context,
                slot_ids, {"cluster_info.json": json.dumps(info, indent=2)},
            )
        except Exception as e:  # a launch failure is the trial's failure, not the master's
            log.exception("could not start allocation %s", alloc.id)
            await self._finish(alloc, ExitStatus(None, reason=f"could not start the task: {e}"))
            return
        alloc.handle, alloc.state = handle, RUNNING
        if alloc.killed:
            self._terminate(alloc, handle)
        await self.store.update_allocation(
            alloc.id, state=RUNNING, pid=handle.pid, workdir=str(handle.root),
            started_at=utcnow())
        await self.on_state(alloc, RUNNING)

    async def _watch(self) -> None:
        for alloc in list(self.allocations.values()):
            if alloc.handle is None:
                continue
            await self._ship_logs(alloc)
            status = alloc.handle.exit_status()
            if status is None and not alloc.handle.alive():
                # The runner vanished without an exit status: killed outright, or SIGKILL.
                await asyncio.sleep(0)
                status = alloc.handle.exit_status() or ExitStatus(
                    None, signal.Signals.SIGKILL.name if alloc.killed else None,
                    reason="the task's process disappeared")
            if status is not None:
                await self._ship_logs(alloc)
                await self._finish(alloc, status)

    def _forget_token(self, alloc: Allocation) -> None:
        for token_hash, a in list(self._by_token.items()):
            if a is alloc:
                del self._by_token[token_hash]

    async def _ship_logs(self, alloc: Allocation) -> None:
        assert alloc.handle is not None
        lines = alloc.handle.read_logs()
        if not lines:
            return
        rows = []
        for line in lines:
            # Distributed launchers prefix each worker's lines with its rank.
            ranked = _RANK_PREFIX.match(line.message)
            rows.append({
                "trial_id": alloc.spec.trial_id, "allocation_id": alloc.id,
                "timestamp": datetime.fromtimestamp(line.timestamp or time.time(), timezone.utc),
                "rank": int(ranked.group(1)) if ranked else None, "stdtype": line.stdtype,
                "message": ranked.group(2) if ranked else line.message,
            })
        await self.store.add_logs(rows)
        await self.store.update_allocation(alloc.id, log_offset=alloc.handle.log_offset)

    async def _finish(self, alloc: Allocation, status: ExitStatus) -> None:
        if self.allocations.pop(alloc.id, None) is None:
            return
        self._forget_token(alloc)
        alloc.state = TERMINATED
        alloc.preempt.set()  # release any long-poll still waiting (answers true: stop)
        await self.store.update_allocation(
            alloc.id, state=TERMINATED, ended_at=utcnow(), exit_code=status.exit_code,
            exit_reason=status.reason or (f"signal {status.signal}" if status.signal else None))
        if alloc.handle is not None:
            self.agent.reap(alloc.handle)
        self._wake.set()
        await self.on_exit(alloc, status)
