"""Agents, resource pools and the job queue."""

from __future__ import annotations

from det_hub.service.handlers.base import APIHandler


class AgentsHandler(APIHandler):
    answers = {"get": "agents"}

    async def get(self) -> None:
        """The agents and their slots."""
        self.send({"agents": self.master.cluster.agents_view()})


class ResourcePoolsHandler(APIHandler):
    answers = {"get": "resource_pools"}

    async def get(self) -> None:
        """The resource pools."""
        agents = self.master.cluster.agents_view()
        slots = [s for a in agents for s in a["slots"]]
        self.send({"resource_pools": [{
            "name": "default", "type": "local", "agents": len(agents),
            "slots_total": len(slots),
            "slots_used": sum(1 for s in slots if s["allocation_id"])}]})


class JobsHandler(APIHandler):
    answers = {"get": "jobs"}

    async def get(self) -> None:
        """The job queue: queued and running allocations."""
        self.send({"jobs": self.master.cluster.jobs_view()})


routes = [
    (r"/agents", AgentsHandler),
    (r"/resource_pools", ResourcePoolsHandler),
    (r"/jobs", JobsHandler),
]
