"""The model registry: models, and their versions that name checkpoints."""

from __future__ import annotations

from typing import Any

from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler
from det_hub.service.handlers.checkpoints import SOURCE_METRICS_QUERY
from det_hub.service.serialize import metric_json

NAME = r"(?P<name>[^/]+)"
VERSION = r"(?P<version>\d+)"

_ARCHIVED = {"409": "the model is archived"}


class _RegistryHandler(APIHandler):
    """The registry checks the bodies itself, naming every bad field (its models in
    :mod:`det_hub.service.wire` describe them)."""

    async def send_model(self, model: Any, status: int = 200) -> None:
        [body] = await self.master.registry.model_json([model])
        self.send({"model": body}, status=status)

    async def send_version(self, model: Any, version: Any, status: int = 200) -> None:
        [body] = await self.master.registry.version_json(model, [version])
        self.send({"model_version": body}, status=status)


class ModelsHandler(_RegistryHandler):
    created = frozenset({"post"})
    query = {"get": {
        "archived": ("boolean", "only archived (true) or unarchived (false) models"),
        "name": ("string", "only models whose name holds this text (any case)"),
        "label": ("string", "only models with this label"),
        "owner": ("string", "only models of this user"),
        "limit": ("integer", "at most this many (default 100, at most 1000)"),
        "offset": ("integer", "skip this many"),
    }}
    body = {"post": wire.ModelCreate}
    answers = {"get": wire.ModelPage, "post": ("model", wire.Model)}

    async def get(self) -> None:
        """List models by name."""
        limit = self.int_arg("limit", 100, 1, 1000)
        offset = self.int_arg("offset", 0)
        rows, total = await self.master.registry.list_models(
            archived=self.bool_arg("archived"), owner=self.get_query_argument("owner", None),
            name_contains=self.get_query_argument("name", None),
            label=self.get_query_argument("label", None), limit=limit, offset=offset)
        self.send({"models": await self.master.registry.model_json(rows),
                   "pagination": {"offset": offset, "limit": limit, "total": total}})

    async def post(self) -> None:
        """Create a model, without versions."""
        model = await self.master.registry.create_model(self.principal, self.json_body())
        await self.send_model(model, status=201)


class ModelHandler(_RegistryHandler):
    body = {"patch": wire.ModelChanges}
    answers = {"get": ("model", wire.Model), "patch": ("model", wire.Model),
               "delete": ("model", wire.Model)}
    extra_responses = {"patch": {"409": "the model is archived, or the new name is taken"}}

    async def get(self, name: str) -> None:
        """One model."""
        await self.send_model(await self.master.registry.get_model(name))

    async def patch(self, name: str) -> None:
        """Change a model's name, description, labels, notes or metadata (owner or admin)."""
        await self.send_model(await self.master.registry.update_model(
            self.principal, name, self.json_body()))

    async def delete(self, name: str) -> None:
        """Delete a model and its versions; their checkpoints are kept (owner or admin)."""
        await self.send_model(await self.master.registry.delete_model(self.principal, name))


class ModelActionHandler(_RegistryHandler):
    answers = {"post": ("model", wire.Model)}

    def initialize(self, action: str) -> None:
        self.action = action

    async def post(self, name: str) -> None:
        """Archive a model (read-only, left out of default lists) or unarchive it."""
        await self.send_model(await self.master.registry.set_archived(
            self.principal, name, self.action == "archive"))


class ModelVersionsHandler(_RegistryHandler):
    created = frozenset({"post"})
    body = {"post": wire.VersionCreate}
    answers = {"get": wire.ModelVersions, "post": ("model_version", wire.ModelVersion)}
    extra_responses = {"post": {"409": "the model is archived, or the checkpoint is not "
                                       "COMPLETED"}}

    async def get(self, name: str) -> None:
        """A model's versions, newest first."""
        model, versions = await self.master.registry.list_versions(name)
        [body] = await self.master.registry.model_json([model])
        self.send({"model": body,
                   "model_versions": await self.master.registry.version_json(model, versions)})

    async def post(self, name: str) -> None:
        """Register a checkpoint as the model's next version (owner or admin)."""
        registry = self.master.registry
        version = await registry.register_version(self.principal, name, self.json_body())
        await self.send_version(await registry.get_model(name), version, status=201)


class ModelVersionHandler(_RegistryHandler):
    body = {"patch": wire.VersionChanges}
    answers = {"get": ("model_version", wire.ModelVersion),
               "patch": ("model_version", wire.ModelVersion),
               "delete": ("model_version", wire.ModelVersion)}
    extra_responses = {"patch": _ARCHIVED, "delete": _ARCHIVED}

    async def get(self, name: str, version: str) -> None:
        """One version of a model."""
        await self.send_version(*await self.master.registry.get_version(name, int(version)))

    async def patch(self, name: str, version: str) -> None:
        """Change a version's name, comment, notes, labels or metadata."""
        await self.send_version(*await self.master.registry.update_version(
            self.principal, name, int(version), self.json_body()))

    async def delete(self, name: str, version: str) -> None:
        """Delete a version; its checkpoint may then be deleted (unless another names it)."""
        await self.send_version(*await self.master.registry.delete_version(
            self.principal, name, int(version)))


class ModelVersionMetricsHandler(_RegistryHandler):
    query = SOURCE_METRICS_QUERY
    answers = {"get": ("metrics", list[wire.MetricRow])}

    async def get(self, name: str, version: str) -> None:
        """The metrics of the trials that reported using the version."""
        rows = await self.master.registry.version_metrics(
            self.principal, name, int(version), self.get_query_argument("group", None) or None)
        self.send({"metrics": [metric_json(r) for r in rows]})


routes = [
    (r"/models", ModelsHandler),
    *[(rf"/models/{NAME}/{action}", ModelActionHandler, {"action": action})
      for action in ("archive", "unarchive")],
    (rf"/models/{NAME}/versions", ModelVersionsHandler),
    (rf"/models/{NAME}/versions/{VERSION}", ModelVersionHandler),
    (rf"/models/{NAME}/versions/{VERSION}/metrics", ModelVersionMetricsHandler),
    (rf"/models/{NAME}", ModelHandler),
]
