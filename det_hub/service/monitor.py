"""Watching what runs: agents' heartbeats, allocations' exits and logs, and their deadlines.

:class:`AllocationMonitor` is the :class:`~det_hub.service.cluster.Cluster`'s other half. Each
round of the cluster's loop it asks the agents whether they are there (giving up on one that
stays silent past ``agent_timeout``), ships each running task's new log lines into the store,
notices exits (a multi-node allocation ends once every node has, and a failed node stops the
others), and kills what outstays its preemption deadline or its idle timeout. An allocation
that has ended is handed back to the cluster (:meth:`Cluster.finish`).

This polling is also what reconciles the master's view with what runs: every round, each
allocation the master holds as running has its process or container asked whether it is
still there, so one that is gone (exited, killed, its container removed) ends within a round;
at start, :meth:`Cluster.adopt` does the same for what the previous master left. While the
database cannot be used, log lines wait in memory with their allocation (:func:`keep_logs`)
and the watch goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from det_hub.agents import AgentUnreachable, ExitStatus, LogLine, TaskHandle
from det_hub.states import AllocationState
from det_hub.store import StoreUnavailable

if TYPE_CHECKING:
    from det_hub.service.cluster import Allocation, Cluster, Node
    from det_hub.store import Store

log = logging.getLogger("det_hub.cluster")

#: A distributed launcher's prefix on each worker's log lines.
_RANK_PREFIX = re.compile(r"^\[rank=(\d+)\] ?(.*)$", re.DOTALL)


class AllocationMonitor:
    """Heartbeats, exits, logs and deadlines of a cluster's allocations.

    Args:
        cluster: The allocations and agents watched.
        wake: Set to make the cluster's loop run a round at once (an agent came back).
        agent_timeout: How long an agent may not answer before its tasks are given up.
        heartbeat_interval: How often agents are asked whether they are there.
    """

    def __init__(self, cluster: Cluster, wake: asyncio.Event, *, agent_timeout: float,
                 heartbeat_interval: float) -> None:
        self.cluster = cluster
        self._wake = wake
        self.agent_timeout = agent_timeout
        self.heartbeat_interval = heartbeat_interval
        self._last_heartbeat = 0.0

    async def heartbeat(self) -> None:
        """Ask idle and unanswering agents whether they are there, every heartbeat interval."""
        now = time.monotonic()
        unreachable = self.cluster.unreachable
        since = now - self._last_heartbeat
        if since < self.heartbeat_interval and not unreachable:
            return
        if unreachable and since < min(1.0, self.heartbeat_interval):
            return
        self._last_heartbeat = now
        for agent_id, agent in self.cluster.agents.items():
            try:
                await asyncio.to_thread(agent.check)
            except AgentUnreachable as e:
                if agent_id not in self.cluster.unreachable:
                    log.warning("agent %s does not answer: %s", agent_id, e)
                    self.cluster.unreachable[agent_id] = now
                    self.cluster.changes.publish()
                continue
            if self.cluster.unreachable.pop(agent_id, None) is not None:
                log.info("agent %s answers again", agent_id)
                self._wake.set()
                self.cluster.changes.publish()
            for handle in self.cluster.orphans.pop(agent_id, []):
                # Its allocation was given up for lost and has run again elsewhere.
                try:
                    agent.kill(handle, force=True)
                    await asyncio.to_thread(agent.reap, handle)
                except AgentUnreachable:
                    self.cluster.orphans.setdefault(agent_id, []).append(handle)

    def _lost(self, agent_id: str) -> bool:
        since = self.cluster.unreachable.get(agent_id)
        return since is not None and time.monotonic() - since >= self.agent_timeout

    async def watch(self) -> None:
        # One whose tasks wait in their agents' own queue (Slurm's) is watched as well: it
        # may end there (cancelled) or start running.
        watched = [alloc for alloc in list(self.cluster.allocations)
                   if alloc.state == AllocationState.RUNNING or (
                       alloc.state == AllocationState.STARTING and alloc.waiting is not None)]
        # Every task is looked at side by side, a hop to a thread each; then the allocations
        # whose tasks have all ended go first, so that their slots go to the next allocation
        # before the log lines of those still running are stored.
        await asyncio.gather(*(self._watch_node(alloc, node) for alloc in watched
                               for node in alloc.nodes if node.status is None))
        watched.sort(key=lambda alloc: any(n.status is None for n in alloc.nodes))
        for alloc in watched:
            await self._ship_logs(alloc)
            if alloc.id not in self.cluster.allocations:
                continue
            lost = [n.agent_id for n in alloc.nodes if n.status is None
                    and self._lost(n.agent_id)]
            if lost and alloc.lost_reason is None:
                alloc.lost_reason = (f"agent {', '.join(lost)} stopped answering for "
                                     f"{self.agent_timeout:g} s; the {alloc.spec.what}'s task "
                                     "there is given up for lost")
                await allocation_system_log(self.cluster.store, alloc, alloc.lost_reason)
                for node in alloc.nodes:
                    if node.agent_id in lost:
                        if node.handle is not None:
                            # Stopped and removed once its agent answers again (_heartbeat).
                            self.cluster.orphans.setdefault(node.agent_id, []).append(node.handle)
                            node.handle = None
                        node.status = ExitStatus(None, reason=alloc.lost_reason)
            statuses = [n.status for n in alloc.nodes]
            failed = [s for s in statuses if s is not None and not s.success]
            if failed and None in statuses and not alloc.killed:
                # One node failed: the others cannot go on without it.
                alloc.killed = True
                self.cluster.terminate(alloc)
            if None not in statuses:
                if alloc.waiting is not None and any(
                        s is not None and s.exit_code is not None for s in statuses):
                    # Its task ran and ended between two looks at it: it started all the same.
                    await self._still_waiting(alloc)
                await self.cluster.finish(
                    alloc, failed[0] if failed else statuses[0] or ExitStatus(0),
                    tasks_ended=True)
            elif alloc.waiting is not None:
                await self._still_waiting(alloc)

    async def _still_waiting(self, alloc: Allocation) -> None:
        """Say that an allocation whose tasks waited in their agents' queue runs once none
        waits any more; else keep why it waits up to date (the job queue shows it)."""
        waiting = next((n.handle.waiting for n in alloc.nodes
                        if n.handle is not None and n.status is None and n.handle.waiting), None)
        if waiting is None:
            where = ", ".join(n.handle.where for n in alloc.nodes if n.handle is not None)
            await allocation_system_log(self.cluster.store, alloc, f"started: {where}")
            await self.cluster.started(alloc)
        elif waiting != alloc.waiting:
            alloc.waiting = waiting
            self.cluster.changes.publish()
        if waiting is not None and alloc.preempt_pending is not None \
                and alloc.waits_in_agents_queue:
            # Asked to stop before it was seen waiting (adopted before its agent answered).
            await self.cluster.preempt(alloc)

    async def _watch_node(self, alloc: Allocation, node: Node) -> None:
        agent = self.cluster.agents[node.agent_id]
        try:
            if node.attach_pending:
                node.handle = await asyncio.to_thread(
                    agent.attach, alloc.id, node.log_offset, node.pid)
                node.attach_pending = False
                if node.handle is None:
                    node.status = ExitStatus(None, reason=f"the task on agent {node.agent_id} "
                                                          "was gone when the agent answered again")
                    return
            handle = node.handle
            if handle is None:
                return
            lines, status, gone = await asyncio.to_thread(_look, handle)
            if gone:
                # Gone without an exit status: killed outright, or SIGKILL.
                status = status or ExitStatus(
                    None, signal.Signals.SIGKILL.name if alloc.killed else None,
                    reason="the task's process disappeared")
            self._take_logs(alloc, lines)
            if status is not None:
                node.status = status
            elif handle.stop_requested and not alloc.killed:
                # Its agent's scheduler wants the slots back soon: checkpoint and stop, as
                # for a preemption of the master's own (once; preempt() ignores a repeat).
                await self.cluster.preempt(alloc, handle.stop_requested)
        except AgentUnreachable:
            if node.agent_id not in self.cluster.unreachable:
                self.cluster.unreachable[node.agent_id] = time.monotonic()
                self.cluster.changes.publish()

    async def enforce_timeouts(self) -> None:
        """Kill running allocations past their preemption deadline or their idle timeout."""
        now = time.monotonic()
        for alloc in list(self.cluster.allocations):
            if alloc.state != AllocationState.RUNNING or alloc.killed:
                continue
            if alloc.preempt_deadline is not None and alloc.preempt_deadline <= now:
                alloc.timed_out = True
                await allocation_system_log(
                    self.cluster.store, alloc, "the trial did not stop within the preemption "
                    "timeout; it is killed and resumes from its latest checkpoint")
            elif alloc.spec.idle_timeout is not None \
                    and now - alloc.last_activity >= alloc.spec.idle_timeout:
                alloc.idle_timed_out = True
                await allocation_system_log(
                    self.cluster.store, alloc, f"{alloc.spec.idle_means} for "
                    f"{alloc.spec.idle_timeout:g} s (its idle_timeout); the task is killed to "
                    "free its slots")
            else:
                continue
            await self.cluster.kill(alloc)

    def _take_logs(self, alloc: Allocation, lines: list[LogLine]) -> None:
        """Queue a task's new log lines with its allocation (:func:`keep_logs`)."""
        if not lines:
            return
        alloc.last_activity = time.monotonic()
        rows = []
        for line in lines:
            # Distributed launchers prefix each worker's lines with its rank.
            ranked = _RANK_PREFIX.match(line.message)
            rows.append({
                **alloc.spec.log_key, "allocation_id": alloc.id,
                "timestamp": datetime.fromtimestamp(line.timestamp or time.time(), timezone.utc),
                "rank": int(ranked.group(1)) if ranked else None, "stdtype": line.stdtype,
                "message": ranked.group(2) if ranked else line.message,
            })
        keep_logs(alloc, rows)

    async def _ship_logs(self, alloc: Allocation) -> None:
        """Store the log lines an allocation still running holds, and how far its chief's log
        has been read. An ended one's are stored with its end (:meth:`Endings.settle`), in
        the same round."""
        if not alloc.unstored_logs or all(n.status is not None for n in alloc.nodes):
            return
        try:
            await store_logs(self.cluster.store, alloc)
            chief = alloc.nodes[0].handle
            await self.cluster.store.update_allocation(
                alloc.id, log_offset=chief.log_offset if chief else 0,
                placements=[n.record() for n in alloc.nodes])
        except StoreUnavailable:
            pass  # the lines wait with the allocation; the store has logged the outage


def _look(handle: TaskHandle) -> tuple[list[LogLine], ExitStatus | None, bool]:
    """A task's new log lines and its exit status, read in one go (a hop to a thread each
    round, not one per question): the status first, so that the lines read after it hold
    every line the task wrote where it has ended; and whether its process is gone without
    one (its status, if it came meanwhile, is then the one given)."""
    status = handle.exit_status()
    lines = handle.read_logs()
    gone = False
    if status is None and not handle.alive():
        status, gone = handle.exit_status(), True
        lines += handle.read_logs()
    elif status is not None:
        lines += handle.read_logs()  # what a single read left, past its size limit
    return lines, status, gone and status is None


#: The most log lines an allocation keeps in memory while the database cannot take them; past
#: it the oldest go, and a line saying how many is stored once the database is back.
MAX_UNSTORED_LOG_LINES = 100_000


def keep_logs(alloc: Allocation, rows: list[dict[str, Any]]) -> None:
    """Queue log rows of an allocation's, to be stored by :func:`store_logs` in order."""
    alloc.unstored_logs.extend(rows)
    excess = len(alloc.unstored_logs) - MAX_UNSTORED_LOG_LINES
    if excess > 0:
        del alloc.unstored_logs[:excess]
        alloc.lost_log_lines += excess


async def store_logs(store: Store, alloc: Allocation) -> None:
    """Store the log rows queued for an allocation (:func:`keep_logs`).

    Raises:
        StoreUnavailable: The database cannot take them now; they stay queued.
    """
    # Taken off the queue before the write, so that a second writer (a system line) cannot
    # store them too; put back in front if the database refuses them.
    rows, alloc.unstored_logs = alloc.unstored_logs, []
    lost, alloc.lost_log_lines = alloc.lost_log_lines, 0
    if not rows and not lost:
        return
    notice = [{**alloc.spec.log_key, "allocation_id": alloc.id,
               "timestamp": datetime.now(timezone.utc), "rank": None, "stdtype": "system",
               "message": f"{lost} log lines were lost while the database could not be used"}]
    try:
        await store.add_logs(rows + notice if lost else rows)
    except StoreUnavailable:
        later, alloc.unstored_logs = alloc.unstored_logs, []
        alloc.lost_log_lines += lost
        keep_logs(alloc, rows + later)
        raise


async def allocation_system_log(store: Store, alloc: Allocation, message: str) -> None:
    """Store a line of the master's own in an allocation's trial or task log, after the lines
    still waiting for the database; while it cannot be used, the line waits with them."""
    keep_logs(alloc, [{
        **alloc.spec.log_key, "allocation_id": alloc.id,
        "timestamp": datetime.now(timezone.utc), "rank": None, "stdtype": "system",
        "message": message}])
    with contextlib.suppress(StoreUnavailable):
        await store_logs(store, alloc)
