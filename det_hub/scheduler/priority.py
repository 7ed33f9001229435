"""Priority scheduling: the most important request first, first come first served among equals."""

from __future__ import annotations

from collections.abc import Sequence

from det_hub.scheduler._base import Agent, Assignment, Decision, Request, Scheduler


class PriorityScheduler(Scheduler):
    """Places each request on the agent whose free slots fit it most tightly.

    A request that fits nowhere does not block smaller ones behind it (backfilling), because
    idle slots help nobody; a request can never fit when it asks for more slots than any single
    agent has, which callers should reject up front.
    """

    def schedule(self, agents: Sequence[Agent], pending: Sequence[Request]) -> Decision:
        free = {a.id: [s.id for s in a.free_slots()] for a in agents}
        decision = Decision()
        for request in sorted(pending, key=lambda r: (r.priority, r.queued_at, r.allocation_id)):
            fitting = [aid for aid, slots in free.items() if len(slots) >= request.slots]
            if not fitting:
                continue
            # Best fit keeps large holes free for large requests; ties go to the agent id order.
            agent_id = min(fitting, key=lambda aid: (len(free[aid]), aid))
            chosen = tuple(free[agent_id][: request.slots])
            free[agent_id] = free[agent_id][request.slots :]
            decision.assignments.append(Assignment(request.allocation_id, agent_id, chosen))
        return decision
