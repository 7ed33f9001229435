"""Signals to running training code: the preemption long-poll."""

from __future__ import annotations

from det_hub.service import wire
from det_hub.service.cluster import Allocation
from det_hub.service.errors import Forbidden, NotFound
from det_hub.service.handlers.base import APIHandler

ID = r"(?P<allocation_id>[0-9]+\.[0-9a-f]+)"


class _AllocationHandler(APIHandler):
    allow_allocation = True
    def allocation(self, allocation_id: str) -> Allocation:
        alloc = self.master.jobs.allocation(allocation_id)
        mine = self.principal.allocation
        if mine is not None and mine.id != allocation_id:
            raise Forbidden("this token is not valid for that allocation")
        if mine is None and not self.principal.is_admin:
            raise Forbidden("only the allocation's own training code can use its signals")
        if alloc is None:
            raise NotFound(f"allocation {allocation_id} is not running")
        return alloc


class PreemptionHandler(_AllocationHandler):
    query = {"get": {"timeout_seconds": ("integer", "how long to wait, at most 60")}}
    answers = {"get": wire.Preemption}

    async def get(self, allocation_id: str) -> None:
        """Wait until the allocation should stop, or the timeout passes."""
        alloc = self.allocation(allocation_id)
        timeout = self.int_arg("timeout_seconds", 60, 0, 60)
        self.send({"preempt": await self.master.wait_preempt(alloc, timeout)})


class AckPreemptionHandler(_AllocationHandler):
    answers = {"post": wire.Empty}

    async def post(self, allocation_id: str) -> None:
        """Acknowledge the preemption signal."""
        self.allocation(allocation_id)
        self.send({})


routes = [
    (rf"/allocations/{ID}/signals/preemption", PreemptionHandler),
    (rf"/allocations/{ID}/signals/ack_preemption", AckPreemptionHandler),
]
