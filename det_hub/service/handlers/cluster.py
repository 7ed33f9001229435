"""Agents, resource pools and the job queue."""

from __future__ import annotations

from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler

AGENT = r"(?P<agent_id>[^/]+)"
JOB = r"(?P<job_id>[^/]+)"

class AgentsHandler(APIHandler):
    answers = {"get": ("agents", list[wire.Agent])}

    async def get(self) -> None:
        """The agents and their slots."""
        self.send({"agents": self.master.jobs.agents()})


class AgentHandler(APIHandler):
    answers = {"get": ("agent", wire.Agent)}

    async def get(self, agent_id: str) -> None:
        """One agent and its slots."""
        self.send({"agent": self.master.jobs.agent(agent_id)})


class AgentEnableHandler(APIHandler):
    answers = {"post": ("agent", wire.Agent)}

    async def post(self, agent_id: str) -> None:
        """Let an agent take new work again (admins only)."""
        agent = await self.master.jobs.set_agent_enabled(self.principal, agent_id, True)
        self.send({"agent": agent})


class AgentDisableHandler(APIHandler):
    body = {"post": wire.AgentDisable}
    answers = {"post": ("agent", wire.Agent)}

    async def post(self, agent_id: str) -> None:
        """Stop an agent from taking new work (admins only)."""
        drain = self.parsed_body().drain
        agent = await self.master.jobs.set_agent_enabled(self.principal, agent_id, False,
                                                         drain=drain)
        self.send({"agent": agent})


class ResourcePoolsHandler(APIHandler):
    answers = {"get": ("resource_pools", list[wire.ResourcePool])}

    async def get(self) -> None:
        """The resource pools, their scheduling settings and slot usage."""
        self.send({"resource_pools": self.master.jobs.pools()})


class JobsHandler(APIHandler):
    query = {"get": {"resource_pool": ("string", "only the jobs of this resource pool")}}
    answers = {"get": ("jobs", list[wire.Job])}

    async def get(self) -> None:
        """The job queue, in the order the scheduler considers it."""
        pool = self.get_query_argument("resource_pool", None) or None
        self.send({"jobs": self.master.jobs.queue(pool)})


class JobHandler(APIHandler):
    body = {"patch": wire.JobChanges}
    answers = {"get": ("job", wire.Job), "patch": ("job", wire.Job)}

    async def get(self, job_id: str) -> None:
        """One job of the queue."""
        self.send({"job": self.master.jobs.view(job_id)})

    async def patch(self, job_id: str) -> None:
        """Change a job's priority, weight or place in the queue (its owner or an admin)."""
        job = await self.master.jobs.update(self.principal, job_id, self.parsed_body())
        self.send({"job": self.master.jobs.view(job.id)})


routes = [
    (r"/agents", AgentsHandler),
    (rf"/agents/{AGENT}", AgentHandler),
    (rf"/agents/{AGENT}/enable", AgentEnableHandler),
    (rf"/agents/{AGENT}/disable", AgentDisableHandler),
    (r"/resource_pools", ResourcePoolsHandler),
    (r"/jobs", JobsHandler),
    (rf"/jobs/{JOB}", JobHandler),
]
