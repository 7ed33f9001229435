"""Checkpoints: reported by training code, read by everyone."""

from __future__ import annotations

from det_hub.service.handlers.base import APIHandler
from det_hub.service.serialize import checkpoint_json


class CheckpointsHandler(APIHandler):
    allow_allocation = True
    created = frozenset({"post"})
    body = {"post": {"type": "object", "required": ["uuid", "trial_id"], "properties": {
        "uuid": {"type": "string"}, "trial_id": {"type": "integer"},
        "steps_completed": {"type": "integer"}, "resources": {"type": "object"},
        "metadata": {"type": "object"}, "state": {"enum": ["ACTIVE", "COMPLETED"]}}}}
    answers = {"post": "checkpoint"}

    async def post(self) -> None:
        """Record a checkpoint the training code has written (training code)."""
        ckpt = await self.master.report_checkpoint(self.principal, self.json_body())
        self.send({"checkpoint": checkpoint_json(ckpt)}, status=201)


class CheckpointHandler(APIHandler):
    allow_allocation = True
    answers = {"get": "checkpoint"}

    async def get(self, uuid: str) -> None:
        """One checkpoint."""
        self.send({"checkpoint": checkpoint_json(
            await self.master.get_checkpoint(self.principal, uuid))})


routes = [
    (r"/checkpoints", CheckpointsHandler),
    (r"/checkpoints/(?P<uuid>[0-9a-fA-F-]{36})", CheckpointHandler),
]
