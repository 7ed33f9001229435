"""A preemption that comes while an allocation's task is being handed to an agent with a
queue of its own (Slurm: sbatch runs), before anyone can tell whether it will wait there.
tests/e2e/test_slurm.py has the real agent; this one stands in for it, so that the launch can
be held at the moment that matters."""

from __future__ import annotations

import threading

from conftest import a_trial, exits_on, until

from det_hub.agents import Agent, ExitStatus, LogLine, SlotInfo, TaskHandle, TaskSpec
from det_hub.service.bus import EventBus
from det_hub.service.cluster import Cluster, LaunchSpec
from det_hub.states import AllocationState
from det_hub.store import Store


class _PendingJob(TaskHandle):
    """A task its agent's scheduler holds back, until it is cancelled."""

    def __init__(self, allocation_id: str) -> None:
        self.allocation_id = allocation_id
        self.log_offset = 0
        self.pid = None
        self.where = f"job of {allocation_id}"
        self.kills: list[bool] = []

    @property
    def waiting(self) -> str | None:
        return None if self.kills else "its job is PENDING (Priority)"

    def read_logs(self) -> list[LogLine]:
        return []

    def exit_status(self) -> ExitStatus | None:
        return ExitStatus(None, "SIGKILL") if self.kills else None

    def alive(self) -> bool:
        return not self.kills


class _QueueingAgent(Agent):
    """An agent whose tasks wait in a queue of its own; :meth:`launch` holds until
    ``release`` is set, as a slow sbatch does."""

    kind = "queueing"
    queues_tasks = True

    def __init__(self) -> None:
        super().__init__(agent_id="queueing")
        self.slots = [SlotInfo(0, "cpu", description="a slot of the agent's own queue")]
        self.launching = threading.Event()
        self.release = threading.Event()
        self.handles: list[_PendingJob] = []

    def launch(self, spec: TaskSpec) -> TaskHandle:
        self.launching.set()
        assert self.release.wait(30), "the launch was never released"
        handle = _PendingJob(spec.allocation_id)
        self.handles.append(handle)
        return handle

    def file_path(self, allocation_id: str, name: str) -> str:
        return f"/nowhere/{allocation_id}/{name}"

    def attach(self, allocation_id: str, log_offset: int, pid: int | None) -> TaskHandle | None:
        return None

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        assert isinstance(handle, _PendingJob)
        handle.kills.append(force)


async def test_a_job_preempted_while_it_is_submitted_is_cancelled_once_seen_waiting(
        sqlite_url: str) -> None:
    store = await Store.open(sqlite_url)
    experiment_id, trial_id = await a_trial(store)
    bus = EventBus()
    exits = exits_on(bus)
    agent = _QueueingAgent()
    cluster = Cluster(store, agent, bus, poll_interval=0.05)
    cluster.start()
    try:
        alloc = await cluster.request(LaunchSpec(
            owner="alice", slots=1, cluster_info={}, context=None, env={},
            argv=["python3", "train.py"], trial_id=trial_id, experiment_id=experiment_id))
        await until(agent.launching.is_set)
        assert alloc.state == AllocationState.STARTING and alloc.waiting is None

        await cluster.preempt(alloc, "preempted to make room for a more important job",
                              then="the trial checkpoints and resumes later")
        # Whether the job will wait in the agent's queue is not known yet: nothing is asked
        # of the training code, which has not run.
        assert not alloc.preempt.is_set() and alloc.preempt_deadline is None

        agent.release.set()
        await until(lambda: exits)
        [handle] = agent.handles
        # Cancelled there as soon as it was seen waiting, not told to stop once it runs.
        assert handle.kills == [True]
        [event] = exits
        assert event.alloc.id == alloc.id and event.status.resumable
        assert event.status.reason == (
            "preempted to make room for a more important job while it waited in its agent's "
            "queue (its job is PENDING (Priority)); it was cancelled there before it ran, with "
            "nothing to checkpoint")
        assert alloc.preempt_deadline is None and alloc.state == AllocationState.TERMINATED
    finally:
        agent.release.set()
        await cluster.stop()
        await store.close()
