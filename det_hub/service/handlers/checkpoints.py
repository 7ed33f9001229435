"""Checkpoints: reported by training code, read by everyone."""

from __future__ import annotations

from det_hub.service import wire
from det_hub.service.errors import Forbidden
from det_hub.service.handlers.base import APIHandler
from det_hub.service.serialize import checkpoint_json, metric_json

#: The query of the metrics of what trials used (checkpoints, model versions).
SOURCE_METRICS_QUERY = {"get": {
    "group": ("string", "training, validation or another group name (default: all)"),
}}


class CheckpointsHandler(APIHandler):
    allow_allocation = True
    created = repeatable = frozenset({"post"})
    body = {"post": wire.CheckpointReport}
    answers = {"post": ("checkpoint", wire.Checkpoint)}
    extra_responses = {"post": {"409": "the uuid is another checkpoint's"}}

    async def post(self) -> None:
        """Record a checkpoint the training code has written (training code)."""
        ckpt, repeat = await self.master.checkpoints.report(self.principal, self.parsed_body())
        self.send({"checkpoint": checkpoint_json(ckpt)}, status=200 if repeat else 201)


class CheckpointHandler(APIHandler):
    allow_allocation = True
    answers = {"get": ("checkpoint", wire.Checkpoint), "delete": ("checkpoint", wire.Checkpoint)}
    extra_responses = {"delete": {"409": (
        "a model version names it, or it is the latest checkpoint of a trial that can still "
        "run, or it is not COMPLETED")}}

    async def get(self, uuid: str) -> None:
        """One checkpoint, with ``training``: what it was trained from."""
        ckpt = await self.master.checkpoints.get(self.principal, uuid)
        self.send({"checkpoint": checkpoint_json(
            ckpt, training=await self.master.checkpoints.training(ckpt))})

    async def delete(self, uuid: str) -> None:
        """Delete a checkpoint's files; it stays listed as DELETED (owner or admin)."""
        if self.principal.allocation is not None:
            raise Forbidden("training code cannot delete checkpoints through this endpoint")
        self.send({"checkpoint": checkpoint_json(
            await self.master.checkpoints.delete(self.principal, uuid.lower()))})


class CheckpointMetricsHandler(APIHandler):
    query = SOURCE_METRICS_QUERY
    answers = {"get": ("metrics", list[wire.MetricRow])}

    async def get(self, uuid: str) -> None:
        """The metrics of the trials that reported using the checkpoint."""
        rows = await self.master.checkpoints.metrics(
            self.principal, uuid.lower(), self.get_query_argument("group", None) or None)
        self.send({"metrics": [metric_json(r) for r in rows]})


routes = [
    (r"/checkpoints", CheckpointsHandler),
    (r"/checkpoints/(?P<uuid>[0-9a-fA-F-]{36})", CheckpointHandler),
    (r"/checkpoints/(?P<uuid>[0-9a-fA-F-]{36})/metrics", CheckpointMetricsHandler),
]
