"""The job queue and the agents, as users and admins change them.

A job is an experiment (``exp-<id>``) or a task (``cmd-<id>``, ``notebook-<id>``, ...) waiting
for or holding slots; :class:`JobQueue` shows the queue, reorders it, and enables and disables
agents. The queue itself is the :class:`~det_hub.service.cluster.Cluster`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from det_hub.defaults import DEFAULT_RESOURCE_POOL
from det_hub.scopes import CLUSTER_SCOPE
from det_hub.service import wire
from det_hub.service.cluster import Allocation, Cluster, Job
from det_hub.service.errors import BadRequest, Forbidden, NotFound
from det_hub.service.tasks import task_job_number
from det_hub.states import AllocationState
from det_hub.store import Store, utcnow

if TYPE_CHECKING:
    from det_hub.service.auth import Principal
    from det_hub.service.experiments import ExperimentManager
    from det_hub.service.tasks import TaskManager


class JobQueue:
    """The queue's jobs and the agents (see the module's docstring)."""

    def __init__(self, store: Store, cluster: Cluster, experiments: ExperimentManager,
                 tasks: TaskManager) -> None:
        self.store = store
        self.cluster = cluster
        self.experiments = experiments
        self.tasks = tasks

    def agents(self) -> list[dict[str, Any]]:
        """Every agent as the API shows it: its slots, pool, state and what runs on it."""
        used = self.cluster.busy_slots()
        return [{
            "id": agent.agent_id, "type": agent.kind, "resource_pool": agent.resource_pool,
            "enabled": agent.enabled, "address": agent.address,
            "connected": agent.agent_id not in self.cluster.unreachable,
            "isolation_warning": agent.isolation_warning(),
            "slots": [{"id": s.id, "type": s.kind, "device": s.device,
                       "cpus": list(s.cpus), "description": s.description,
                       "allocation_id": used.get((agent.agent_id, s.id))} for s in agent.slots],
        } for agent in self.cluster.agents.values()]

    def pools(self) -> list[dict[str, Any]]:
        """Every resource pool as the API shows it: its agents, slots and scheduling."""
        used = self.cluster.busy_slots()
        out = []
        for pool in self.cluster.pools.values():
            agents = self.cluster.pool_agents(pool.name)
            policy = self.cluster.schedulers[pool.name]
            out.append({
                "name": pool.name, "description": pool.description,
                "type": ",".join(sorted({a.kind for a in agents})) or None,
                "agents": len(agents),
                "slots_total": sum(len(a.slots) for a in agents),
                "slots_used": sum(1 for a in agents for s in a.slots
                                  if (a.agent_id, s.id) in used),
                "slot_type": ",".join(sorted(self.cluster.slot_kinds(pool.name))) or None,
                "scheduler": dict(pool.scheduler).get("type", "priority"),
                "preemption": bool(getattr(policy, "preemption", False)),
                "fitting_policy": getattr(policy, "fitting_policy", None),
                "preemption_timeout": pool.preemption_timeout,
                "default": pool.name == DEFAULT_RESOURCE_POOL,
            })
        return out

    def queue(self, pool: str | None = None) -> list[dict[str, Any]]:
        """The queue of one pool (of every pool by default) in the order the scheduler
        considers it: each job's priority, weight, position, state and the slots it holds.

        Raises:
            NotFound: No such pool.
        """
        if pool is not None and pool not in self.cluster.pools:
            raise NotFound(f"resource pool {pool!r} not found")
        by_job: dict[str, list[Allocation]] = {}
        for a in self.cluster.allocations:
            by_job.setdefault(a.spec.job_id, []).append(a)
        jobs = [j for j in self.cluster.jobs.values() if (pool is None or j.pool == pool)
                and j.id in by_job]
        jobs.sort(key=lambda j: (j.priority, j.position, j.id))
        out = []
        for place, job in enumerate(jobs, start=1):
            allocs = by_job[job.id]
            # Waiting in an agent's own queue (a Slurm job pending) is waiting still.
            running = [a for a in allocs
                       if a.state != AllocationState.QUEUED and a.waiting is None]
            first = min(allocs, key=lambda a: a.queued_at)
            out.append({
                "job_id": job.id, "type": job.kind, "name": job.name, "owner": job.owner,
                "resource_pool": job.pool, "queue_position": place,
                "priority": job.priority, "weight": job.weight,
                "state": "SCHEDULED" if running and len(running) == len(allocs) else (
                    "SCHEDULED_PARTIALLY" if running else "QUEUED"),
                "slots_requested": sum(a.spec.slots for a in allocs),
                "slots_allocated": sum(a.spec.slots for a in running),
                "allocations": len(allocs), "preemptible": job.preemptible,
                "submitted": job.submitted.isoformat().replace("+00:00", "Z"),
                "queued_at": first.queued_wall.isoformat().replace("+00:00", "Z"),
                "experiment_id": first.spec.experiment_id, "task_id": first.spec.task_id,
                "reason": next((a.waiting for a in allocs if a.waiting is not None), None),
            })
        return out

    def view(self, job_id: str) -> dict[str, Any]:
        """The job's row of the queue (:meth:`list_jobs`).

        Raises:
            NotFound: No such job in the queue.
        """
        job = self._queued(job_id)
        row = next((j for j in self.queue(job.pool) if j["job_id"] == job.id), None)
        if row is None:  # between trials: in the queue, holding and asking for nothing
            row = {"job_id": job.id, "type": job.kind, "name": job.name, "owner": job.owner,
                   "resource_pool": job.pool, "queue_position": None, "priority": job.priority,
                   "weight": job.weight, "state": "QUEUED", "slots_requested": 0,
                   "slots_allocated": 0, "allocations": 0, "preemptible": job.preemptible,
                   "submitted": job.submitted.isoformat().replace("+00:00", "Z"),
                   "queued_at": None, "experiment_id": job_number(job.id, "exp-"),
                   "task_id": task_job_number(job.id), "reason": None}
        return row

    async def update(self, who: Principal, job_id: str, changes: wire.JobChanges) -> Job:
        """Change a queued or running job's priority, weight or place in the queue (ranges
        as ``wire.JobChanges`` checks them).

        Raises:
            NotFound: No such job in the queue (it may have finished).
            Forbidden: The caller neither owns the job nor is an admin.
            BadRequest: ``ahead_of`` names this job, one not in the queue, or one in another
                pool.
        """
        priority, weight = changes.priority, changes.weight
        ahead_of = changes.ahead_of.strip() if changes.ahead_of is not None else None
        job = self._queued(job_id)
        experiment_id = job_number(job.id, "exp-")
        task_id = task_job_number(job.id)
        if who.may(CLUSTER_SCOPE):
            pass  # may reorder any job
        elif experiment_id is not None:
            await self.experiments.owned(who, experiment_id)
        elif task_id is not None:
            await self.tasks.owned(who, task_id)
        other = None
        if ahead_of is not None:
            try:
                other = self._queued(ahead_of)
            except NotFound as e:
                raise BadRequest(f"ahead_of: {e}") from None
            if other.id == job.id:
                raise BadRequest("ahead_of: a job cannot move ahead of itself")
            if other.pool != job.pool:
                raise BadRequest(f"ahead_of: job {other.id} is in resource pool {other.pool!r}, "
                                 f"not {job.pool!r}")
        if priority is not None:
            job.priority = priority
        if weight is not None:
            job.weight = weight
        if other is not None:
            self.cluster.move_ahead_of(job, other)
        if experiment_id is not None:
            await self.experiments.update(experiment_id, priority=job.priority,
                                          weight=job.weight, queue_position=job.position)
        elif task_id is not None:
            # A task's weight lives in its config only: it is not a column of its own.
            task = self.tasks.live[task_id]
            config = dict(task.config)
            config["resources"] = {**(config.get("resources") or {}), "weight": job.weight}
            updated = await self.store.update_task(
                task_id, priority=job.priority, queue_position=job.position, config=config)
            task.priority, task.queue_position = updated.priority, updated.queue_position
            task.config = updated.config
        self.cluster.set_job(job)
        return job

    def _queued(self, job_id: str) -> Job:
        """The queue's job ``exp-N``, ``cmd-N``, ``notebook-N``, ... or ``N`` (an
        experiment's id)."""
        key = f"exp-{job_id}" if job_id.isdigit() else job_id
        job = self.cluster.jobs.get(key)
        experiment_id, task_id = job_number(key, "exp-"), task_job_number(key)
        live = (experiment_id is not None and experiment_id in self.experiments.runs) or \
            (task_id is not None and task_id in self.tasks.live)
        if job is None or not live:
            raise NotFound(f"job {job_id} is not in the queue (only jobs of active or paused "
                           "experiments and of tasks that have not ended are)")
        return job

    def agent(self, agent_id: str) -> dict[str, Any]:
        """One agent as :meth:`agents` shows it.

        Raises:
            NotFound: No such agent.
        """
        agent = next((a for a in self.agents() if a["id"] == agent_id), None)
        if agent is None:
            raise NotFound(f"agent {agent_id!r} not found")
        return agent

    def allocation(self, allocation_id: str) -> Allocation | None:
        """The open allocation with this id, None when it has ended or never was."""
        return self.cluster.allocations.get(allocation_id)

    def holders(self) -> list[dict[str, Any]]:
        """The open allocations as the cluster stream shows them: whose job each is, for
        which trial or task, its state and the slots it asks for (a slot's
        ``allocation_id`` names one of them)."""
        return [{"id": a.id, "job_id": a.spec.job_id, "owner": a.spec.owner,
                 "experiment_id": a.spec.experiment_id, "trial_id": a.spec.trial_id,
                 "task_id": a.spec.task_id, "state": a.state.value, "slots": a.spec.slots}
                for a in self.cluster.allocations]

    def state(self) -> dict[str, Any]:
        """The whole cluster at once, as the cluster stream sends it: the agents, the resource
        pools and the queue as ``GET /agents``, ``/resource_pools`` and ``/jobs`` show them,
        and the open allocations (:meth:`holders`)."""
        return {"agents": self.agents(), "resource_pools": self.pools(), "jobs": self.queue(),
                "allocations": self.holders()}

    async def usage(self) -> dict[str, float]:
        """Slot-hours used so far, by user (allocations still open count up to now)."""
        return await self.store.slot_hours_by_user(utcnow())

    async def set_agent_enabled(self, who: Principal, agent_id: str, enabled: bool, *,
                                drain: bool = True) -> dict[str, Any]:
        """Enable or disable an agent (admins). A disabled agent takes no new work; with
        ``drain`` what runs there finishes, else it is asked to checkpoint and move.

        Raises:
            Forbidden: The caller may not manage the cluster.
            NotFound: No such agent."""
        if not who.may(CLUSTER_SCOPE):
            raise Forbidden("only an admin can enable or disable agents")
        if agent_id not in self.cluster.agents:
            raise NotFound(f"agent {agent_id!r} not found")
        await self.cluster.set_agent_enabled(agent_id, enabled, drain=drain)
        return self.agent(agent_id)


def experiment_job_id(experiment_id: int) -> str:
    return f"exp-{experiment_id}"


def job_number(job_id: str, prefix: str) -> int | None:
    """The id in a job id of this kind (``exp-12`` -> 12), None for a job of another kind."""
    rest = job_id.removeprefix(prefix)
    return int(rest) if rest != job_id and rest.isdigit() else None
