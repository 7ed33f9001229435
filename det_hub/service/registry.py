"""The model registry's manager: models and their versions, without HTTP.

Anyone may read the registry. A model is changed (edited, archived, deleted, given a version)
by its owner or an admin; a version by its own owner, its model's owner or an admin. A
registered checkpoint can no longer be deleted, so only who may change its experiment (its
owner, a user with the manage scope, an admin) registers it. An archived model is read-only
until it is unarchived, except that it may be deleted.

Request bodies are checked here, so that every bad field is named in the error's details.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound
from det_hub.service.serialize import checkpoint_json, model_json, model_version_json
from det_hub.states import CheckpointState
from det_hub.store import NotFound as StoreNotFound
from det_hub.store import StoreConflict

if TYPE_CHECKING:
    from det_hub.service.auth import Principal, UserManager
    from det_hub.service.checkpoints import CheckpointManager
    from det_hub.store import MetricRow, Model, ModelVersion, Store

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: Printable, without a slash (a name is one segment of the API's paths) or a space at an end.
_NAME = re.compile(r"^[^\s/\x00-\x1f\x7f](?:[^/\x00-\x1f\x7f]{0,253}[^\s/\x00-\x1f\x7f])?$")
_NAME_RULE = ("must be 1 to 255 characters, without '/' or control characters, and not start "
              "or end with a space")

_MODEL_FIELDS = ("name", "description", "labels", "notes", "metadata")
_VERSION_FIELDS = ("name", "comment", "notes", "labels", "metadata")
_METADATA_CHANGES = ("add_metadata", "remove_metadata")


def _fields(body: dict[str, Any], allowed: Iterable[str], required: Iterable[str] = (), *,
            model_name: bool = False) -> dict[str, Any]:
    """The body's fields checked by their kind, keyed as the store names its columns; every
    problem is one detail naming its field. ``model_name``: ``name`` names a model."""
    allowed = set(allowed)
    problems: list[dict[str, str]] = []
    for key in sorted(set(body) - allowed):
        problems.append({"path": key, "message": "unknown field; one of "
                         + ", ".join(sorted(allowed))})
    for key in required:
        if key not in body:
            problems.append({"path": key, "message": "required"})
    out: dict[str, Any] = {}
    for key in sorted(set(body) & allowed):
        value = body[key]
        if key in ("labels", "remove_metadata"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.append({"path": key, "message": "must be a list of strings"})
                continue
            out[key] = list(dict.fromkeys(value)) if key == "labels" else value
        elif key in ("metadata", "add_metadata"):
            if not isinstance(value, dict):
                problems.append({"path": key, "message": "must be an object"})
                continue
            out["meta" if key == "metadata" else key] = value
        elif key == "checkpoint_uuid":
            if not isinstance(value, str) or not _UUID.match(value):
                problems.append({"path": key, "message": "must be a lower-case UUID string"})
                continue
            out[key] = value
        elif not isinstance(value, str):
            problems.append({"path": key, "message": "must be a string"})
        elif key == "name" and model_name and not _NAME.match(value):
            problems.append({"path": key, "message": _NAME_RULE})
        elif key == "name" and len(value) > 255:
            problems.append({"path": key, "message": "must be at most 255 characters"})
        else:
            out[key] = value
    if problems:
        raise BadRequest("invalid request body", problems)
    return out


class ModelRegistry:
    """Models and versions for the REST handlers (see the module docstring for who may do
    what).

    Args:
        store: The master's store.
        users: The users, whose names are shown with what they own.
        checkpoints: The checkpoints, and what each was trained from (shown with each
            version's checkpoint).
    """

    def __init__(self, store: Store, users: UserManager, checkpoints: CheckpointManager) -> None:
        self.store = store
        self.users = users
        self.checkpoints = checkpoints

    # -- models -----------------------------------------------------------------------------

    async def create_model(self, who: Principal, body: dict[str, Any]) -> Model:
        """A new model owned by the caller, without versions.

        Raises:
            BadRequest: a bad field.
            Conflict: the name is taken.
        """
        if who.user is None:
            raise Forbidden("training code cannot create models")
        fields = _fields(body, _MODEL_FIELDS, required=("name",), model_name=True)
        name = fields.pop("name")
        try:
            return await self.store.create_model(
                name=name, owner_id=who.user.id, description=fields.get("description", ""),
                labels=fields.get("labels"), notes=fields.get("notes", ""),
                metadata=fields.get("meta"))
        except StoreConflict:
            raise Conflict(f"a model named {name!r} already exists") from None

    async def get_model(self, name: str) -> Model:
        """The model with this name.

        Raises:
            NotFound: there is none.
        """
        model = await self.store.get_model(name)
        if model is None:
            raise NotFound(f"model {name!r} not found")
        return model

    async def list_models(self, *, archived: bool | None = None, owner: str | None = None,
                          name_contains: str | None = None, label: str | None = None,
                          limit: int = 100, offset: int = 0) -> tuple[list[Model], int]:
        """One page of models by name, and how many match; an unknown owner has none."""
        owner_id = None
        if owner:
            user = await self.store.get_user(owner)
            if user is None:
                return [], 0
            owner_id = user.id
        return await self.store.list_models(
            archived=archived, owner_id=owner_id, name_contains=name_contains, label=label,
            limit=limit, offset=offset)

    async def _changeable(self, who: Principal, name: str, *, archived_ok: bool = False) -> Model:
        model = await self.get_model(name)
        if not who.may_change(model.owner_id):
            raise Forbidden(f"only the owner of model {name!r} or an admin can change it")
        if model.archived and not archived_ok:
            raise Conflict(f"model {name!r} is archived; unarchive it to change it")
        return model

    async def update_model(self, who: Principal, name: str, body: dict[str, Any]) -> Model:
        """Change a model's name, description, labels, notes or metadata (``metadata``
        replaces it; ``add_metadata`` merges keys in, ``remove_metadata`` takes keys out).

        Raises:
            BadRequest, Forbidden, NotFound: as their names say.
            Conflict: the model is archived, or a new name is taken.
        """
        fields = _fields(body, (*_MODEL_FIELDS, *_METADATA_CHANGES), model_name=True)
        model = await self._changeable(who, name)
        try:
            return await self.store.update_model(model.id, **fields)
        except StoreConflict:
            raise Conflict(f"a model named {fields.get('name')!r} already exists") from None
        except StoreNotFound:
            raise NotFound(f"model {name!r} not found") from None

    async def set_archived(self, who: Principal, name: str, archived: bool) -> Model:
        """Archive a model (it is then read-only and left out of default listings) or
        unarchive it."""
        model = await self._changeable(who, name, archived_ok=True)
        if model.archived == archived:
            return model
        return await self.store.update_model(model.id, archived=archived)

    async def delete_model(self, who: Principal, name: str) -> Model:
        """Delete a model and its versions; their checkpoints may then be deleted again."""
        model = await self._changeable(who, name, archived_ok=True)
        try:
            await self.store.delete_model(model.id)
        except StoreNotFound:
            raise NotFound(f"model {name!r} not found") from None
        return model

    async def model_json(self, models: Iterable[Model]) -> list[dict[str, Any]]:
        """Models as the API shows them, with their owners' names and version counts."""
        models = list(models)
        counts = await self.store.count_model_versions([m.id for m in models])
        return [model_json(m, await self.users.username(m.owner_id), counts.get(m.id, 0))
                for m in models]

    # -- versions ---------------------------------------------------------------------------

    async def register_version(self, who: Principal, name: str,
                               body: dict[str, Any]) -> ModelVersion:
        """Register a COMPLETED checkpoint as the model's next version. Registering pins
        the checkpoint (it can no longer be deleted), so the caller needs the right to its
        experiment too: its owner, a user with the manage scope, or an admin.

        Raises:
            BadRequest: a bad field.
            Forbidden: the caller may not change the model, or the checkpoint's experiment.
            NotFound: no such model or checkpoint.
            Conflict: the model is archived, or the checkpoint is not COMPLETED.
        """
        if who.user is None:
            raise Forbidden("training code cannot register model versions")
        fields = _fields(body, ("checkpoint_uuid", *_VERSION_FIELDS),
                         required=("checkpoint_uuid",))
        model = await self._changeable(who, name)
        uuid = fields.pop("checkpoint_uuid")
        checkpoint = await self.store.get_checkpoint(uuid)
        if checkpoint is None:
            raise NotFound(f"checkpoint {uuid} not found")
        experiment = await self.store.get_experiment(checkpoint.experiment_id)
        if experiment is None:  # deleted since the checkpoint was read
            raise NotFound(f"checkpoint {uuid} not found")
        if not who.may_change(experiment.owner_id):
            owner = await self.users.username(experiment.owner_id)
            raise Forbidden(f"checkpoint {uuid} is of experiment {experiment.id}, owned by "
                            f"{owner}: only its owner, a user with the manage scope or an "
                            "admin can register it")
        if checkpoint.state != CheckpointState.COMPLETED.value:
            raise Conflict(f"checkpoint {uuid} is {checkpoint.state}; only a COMPLETED "
                           "checkpoint can be registered")
        try:
            return await self.store.add_model_version(
                model_id=model.id, checkpoint_uuid=uuid, owner_id=who.user.id,
                name=fields.get("name", ""), comment=fields.get("comment", ""),
                notes=fields.get("notes", ""), labels=fields.get("labels"),
                metadata=fields.get("meta"))
        except StoreConflict as e:
            # Deleted since it was read above.
            raise Conflict(str(e)) from None
        except StoreNotFound:
            raise NotFound(f"model {name!r} not found") from None

    async def list_versions(self, name: str) -> tuple[Model, list[ModelVersion]]:
        """The model and its versions, newest first."""
        model = await self.get_model(name)
        return model, await self.store.list_model_versions(model.id)

    async def get_version(self, name: str, version: int | None = None,
                          ) -> tuple[Model, ModelVersion]:
        """The model and one version of it, the latest when ``version`` is None.

        Raises:
            NotFound: no such model, version, or no version at all.
        """
        model = await self.get_model(name)
        found = await self.store.get_model_version(model.id, version)
        if found is None:
            raise NotFound(f"model {name!r} has no versions" if version is None
                           else f"model {name!r} has no version {version}")
        return model, found

    async def _changeable_version(self, who: Principal, name: str,
                                  version: int) -> tuple[Model, ModelVersion]:
        model, found = await self.get_version(name, version)
        if not (who.may_change(found.owner_id) or who.may_change(model.owner_id)):
            raise Forbidden(f"only the owner of model {name!r} version {version}, the "
                            "model's owner or an admin can change it")
        if model.archived:
            raise Conflict(f"model {name!r} is archived; unarchive it to change it")
        return model, found

    async def update_version(self, who: Principal, name: str, version: int,
                             body: dict[str, Any]) -> tuple[Model, ModelVersion]:
        """Change a version's name, comment, notes, labels or metadata (as for models)."""
        fields = _fields(body, (*_VERSION_FIELDS, *_METADATA_CHANGES))
        model, found = await self._changeable_version(who, name, version)
        try:
            return model, await self.store.update_model_version(found.id, **fields)
        except StoreNotFound:
            raise NotFound(f"model {name!r} has no version {version}") from None

    async def delete_version(self, who: Principal, name: str,
                             version: int) -> tuple[Model, ModelVersion]:
        """Delete one version; its checkpoint may then be deleted, unless another version
        names it."""
        model, found = await self._changeable_version(who, name, version)
        try:
            await self.store.delete_model_version(found.id)
        except StoreNotFound:
            raise NotFound(f"model {name!r} has no version {version}") from None
        return model, found

    async def version_json(self, model: Model,
                           versions: Iterable[ModelVersion]) -> list[dict[str, Any]]:
        """Model versions as the API shows them, each with its checkpoint and what that was
        trained from."""
        out = []
        for v in versions:
            checkpoint = await self.store.get_checkpoint(v.checkpoint_uuid)
            out.append(model_version_json(
                v, model.name, await self.users.username(v.owner_id),
                None if checkpoint is None
                else checkpoint_json(checkpoint,
                                     training=await self.checkpoints.training(checkpoint))))
        return out

    # -- what trials used --------------------------------------------------------------------

    async def version_metrics(self, who: Principal, name: str, version: int,
                                    group: str | None = None) -> list[MetricRow]:
        """The metrics (of one group, or all) of every trial that reported using this model
        version, as :meth:`checkpoint_metrics` orders them.

        Raises:
            NotFound: No such model or version.
        """
        _, found = await self.get_version(name, version)
        return await self.store.model_version_metrics(found.id, group=group)

__all__ = ["ModelRegistry"]
