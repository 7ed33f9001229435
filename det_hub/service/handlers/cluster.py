"""Agents, resource pools and the job queue."""

from __future__ import annotations

import math
from typing import Any

from det_hub.service.errors import BadRequest, NotFound
from det_hub.service.handlers.base import APIHandler

AGENT = r"(?P<agent_id>[^/]+)"
JOB = r"(?P<job_id>[^/]+)"

#: What ``PATCH /jobs/{job_id}`` may change.
JOB_FIELDS = ("priority", "weight", "ahead_of")


class AgentsHandler(APIHandler):
    answers = {"get": "agents"}

    async def get(self) -> None:
        """The agents and their slots."""
        self.send({"agents": self.master.cluster.agents_view()})


class AgentHandler(APIHandler):
    answers = {"get": "agent"}

    async def get(self, agent_id: str) -> None:
        """One agent and its slots."""
        agent = next((a for a in self.master.cluster.agents_view() if a["id"] == agent_id), None)
        if agent is None:
            raise NotFound(f"agent {agent_id!r} not found")
        self.send({"agent": agent})


class AgentEnableHandler(APIHandler):
    answers = {"post": "agent"}

    async def post(self, agent_id: str) -> None:
        """Let an agent take new work again (admins only)."""
        agent = await self.master.set_agent_enabled(self.principal, agent_id, True)
        self.send({"agent": agent})


class AgentDisableHandler(APIHandler):
    body = {"post": {"type": "object", "properties": {
        "drain": {"type": "boolean", "default": True, "description": (
            "let the trials running there finish (true), or ask them to checkpoint and move "
            "to another agent (false)")}}}}
    answers = {"post": "agent"}

    async def post(self, agent_id: str) -> None:
        """Stop an agent from taking new work (admins only)."""
        drain = self.json_body().get("drain", True)
        if not isinstance(drain, bool):
            raise BadRequest("drain: must be true or false")
        agent = await self.master.set_agent_enabled(self.principal, agent_id, False,
                                                    drain=drain)
        self.send({"agent": agent})


class ResourcePoolsHandler(APIHandler):
    answers = {"get": "resource_pools"}

    async def get(self) -> None:
        """The resource pools, their scheduling settings and slot usage."""
        self.send({"resource_pools": self.master.cluster.pools_view()})


class JobsHandler(APIHandler):
    query = {"get": {"resource_pool": ("string", "only the jobs of this resource pool")}}
    answers = {"get": "jobs"}

    async def get(self) -> None:
        """The job queue, in the order the scheduler considers it."""
        pool = self.get_query_argument("resource_pool", None) or None
        self.send({"jobs": self.master.list_jobs(pool)})


class JobHandler(APIHandler):
    body = {"patch": {"type": "object", "minProperties": 1, "properties": {
        "priority": {"type": "integer", "minimum": 1, "maximum": 99,
                     "description": "smaller runs first"},
        "weight": {"type": "number", "exclusiveMinimum": 0,
                   "description": "share of a fair-share pool"},
        "ahead_of": {"type": "string", "description": (
            "a job id of the same pool: move this job right before it, taking its "
            "priority")}}}}
    answers = {"get": "job", "patch": "job"}

    async def get(self, job_id: str) -> None:
        """One job of the queue."""
        self.send({"job": self.master.job_view(job_id)})

    async def patch(self, job_id: str) -> None:
        """Change a job's priority, weight or place in the queue (its owner or an admin)."""
        changes = _job_changes(self.json_body())
        job = await self.master.update_job(self.principal, job_id, **changes)
        self.send({"job": self.master.job_view(job.id)})


def _job_changes(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of :meth:`Master.update_job` a PATCH body asks for; the ranges
    are the master's to check."""
    unknown = sorted(set(body) - set(JOB_FIELDS))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; give priority, weight or ahead_of")
    changes = {k: v for k, v in body.items() if v is not None}
    if not changes:
        raise BadRequest("nothing to change: give priority, weight or ahead_of")
    priority = changes.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise BadRequest("priority: must be an integer")
    weight = changes.get("weight")
    if weight is not None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight):
            raise BadRequest("weight: must be a number")
        changes["weight"] = float(weight)
    ahead_of = changes.get("ahead_of")
    if ahead_of is not None and (not isinstance(ahead_of, str) or not ahead_of.strip()):
        raise BadRequest("ahead_of: must be a job id such as 'exp-3'")
    if ahead_of is not None:
        if priority is not None:
            raise BadRequest("priority: cannot be given with ahead_of, which gives the job the "
                             "priority of the job it moves ahead of")
        changes["ahead_of"] = ahead_of.strip()
    return changes


routes = [
    (r"/agents", AgentsHandler),
    (rf"/agents/{AGENT}", AgentHandler),
    (rf"/agents/{AGENT}/enable", AgentEnableHandler),
    (rf"/agents/{AGENT}/disable", AgentDisableHandler),
    (r"/resource_pools", ResourcePoolsHandler),
    (r"/jobs", JobsHandler),
    (rf"/jobs/{JOB}", JobHandler),
]
