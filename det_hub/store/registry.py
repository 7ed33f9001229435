"""The model registry's queries: models, their versions, and the checkpoints they protect.

:class:`RegistryQueries` is mixed into :class:`det_hub.store.Store`, so these are methods of the
store like any other; they live here to keep the registry in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, cast, delete, exists, func, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from det_hub.states import CheckpointState

from ._common import Queries, contains_text
from .columns import utcnow
from .errors import NotFound, StoreConflict
from .models import Checkpoint, Model, ModelVersion

RowT = TypeVar("RowT", Model, ModelVersion)

#: Columns of a model that :meth:`RegistryQueries.update_model` may set.
MODEL_FIELDS = frozenset({"name", "description", "labels", "notes", "meta", "archived"})
#: Columns of a model version that :meth:`RegistryQueries.update_model_version` may set.
VERSION_FIELDS = frozenset({"name", "comment", "notes", "labels", "meta"})


def _check(fields: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"{what} has no settable column(s) {', '.join(unknown)}")


def _merged(meta: Mapping[str, Any], add: Mapping[str, Any] | None,
            remove: Iterable[str] | None) -> dict[str, Any]:
    out = dict(meta or {})
    out.update(add or {})
    for key in remove or ():
        out.pop(key, None)
    return out


class RegistryQueries(Queries):
    """Queries of the ``models`` and ``model_versions`` tables (see :class:`Store`)."""

    # -- models -----------------------------------------------------------------------------

    async def create_model(
        self,
        *,
        name: str,
        owner_id: int,
        description: str = "",
        labels: list[str] | None = None,
        notes: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> Model:
        """Add a model with no versions.

        Raises:
            StoreConflict: the name is taken.
            NotFound: no such owner.
        """
        now = utcnow()
        model = Model(name=name, description=description, labels=list(labels or []),
                      notes=notes, meta=dict(metadata or {}), owner_id=owner_id,
                      creation_time=now, last_updated_time=now, archived=False)
        await self._write(lambda session: session.add(model))
        return model

    async def get_model(self, name: str) -> Model | None:
        """The model with this name."""
        async with self._reading() as session:
            return await session.scalar(select(Model).where(Model.name == name))

    async def get_model_by_id(self, model_id: int) -> Model | None:
        """The model with this id."""
        async with self._reading() as session:
            return await session.get(Model, model_id)

    async def list_models(
        self,
        *,
        archived: bool | None = None,
        owner_id: int | None = None,
        name_contains: str | None = None,
        label: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Model], int]:
        """One page of models by name, and how many match in all.

        ``None`` leaves a filter out. ``name_contains`` matches names holding that text,
        ignoring case (``%`` and ``_`` are plain characters); ``label`` keeps models carrying
        that label.
        """
        where: list[ColumnElement[bool]] = []
        if archived is not None:
            where.append(Model.archived.is_(archived))
        if owner_id is not None:
            where.append(Model.owner_id == owner_id)
        if name_contains:
            where.append(contains_text(Model.name, name_contains))
        if label is not None:
            where.append(self._has_label(label))
        page = select(Model).where(*where).order_by(Model.name).limit(limit).offset(offset)
        async with self._reading() as session:
            total = await session.scalar(select(func.count()).select_from(Model).where(*where))
            models = list(await session.scalars(page))
        return models, int(total or 0)

    def _has_label(self, label: str) -> ColumnElement[bool]:
        # JSON list membership has no portable SQL: JSONB containment on PostgreSQL,
        # json_each on SQLite.
        if self.dialect == "postgresql":
            return cast(Model.labels, JSONB).op("@>")(func.jsonb_build_array(label))
        each = func.json_each(Model.labels).table_valued("value")
        return exists(select(1).select_from(each).where(each.c.value == label))

    async def update_model(
        self,
        model_id: int,
        *,
        add_metadata: Mapping[str, Any] | None = None,
        remove_metadata: Iterable[str] | None = None,
        **fields: Any,
    ) -> Model:
        """Set columns of a model (those of :data:`MODEL_FIELDS`), and merge into or remove
        from its metadata, in one transaction; ``last_updated_time`` becomes now.

        Raises:
            NotFound: no such model.
            StoreConflict: a new name is taken.
            ValueError: a column that cannot be set.
        """
        _check(fields, MODEL_FIELDS, "a model")
        return await self._update_registry_row(
            Model, model_id, "model", fields, add_metadata, remove_metadata)

    async def delete_model(self, model_id: int) -> None:
        """Remove a model and its versions (the checkpoints they named are kept).

        Raises:
            NotFound: no such model.
        """
        def remove(session: Session) -> None:
            result = session.execute(delete(Model).where(Model.id == model_id))
            if not getattr(result, "rowcount", 0):
                raise NotFound(f"model {model_id} does not exist")

        await self._write(remove)

    async def count_model_versions(self, model_ids: list[int]) -> dict[int, int]:
        """How many versions each of these models has (models with none are left out)."""
        if not model_ids:
            return {}
        stmt = (select(ModelVersion.model_id, func.count())
                .where(ModelVersion.model_id.in_(model_ids))
                .group_by(ModelVersion.model_id))
        async with self._reading() as session:
            return {int(m): int(n) for m, n in (await session.execute(stmt)).all()}

    # -- versions ---------------------------------------------------------------------------

    async def add_model_version(
        self,
        *,
        model_id: int,
        checkpoint_uuid: str,
        owner_id: int,
        name: str = "",
        comment: str = "",
        notes: str = "",
        labels: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ModelVersion:
        """Register a COMPLETED checkpoint as the model's next version (one more than its
        highest).

        The model's and the checkpoint's rows are locked first, so that the checkpoint
        cannot be deleted (:meth:`claim_checkpoints_for_deletion`) while it is registered, and
        two registrations never take the same number.

        Raises:
            NotFound: no such model or checkpoint.
            StoreConflict: the checkpoint is not COMPLETED (it is being written, or deleted).
        """
        def register(session: Session) -> ModelVersion:
            model = session.scalar(
                select(Model).where(Model.id == model_id).with_for_update())
            if model is None:
                raise NotFound(f"model {model_id} does not exist")
            ckpt = session.scalar(
                select(Checkpoint).where(Checkpoint.uuid == checkpoint_uuid).with_for_update())
            if ckpt is None:
                raise NotFound(f"checkpoint {checkpoint_uuid} does not exist")
            if ckpt.state != CheckpointState.COMPLETED.value:
                raise StoreConflict(f"checkpoint {checkpoint_uuid} is {ckpt.state}; only a "
                                    "COMPLETED checkpoint can be registered")
            highest = session.scalar(
                select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model_id))
            now = utcnow()
            version = ModelVersion(
                model_id=model_id, version=int(highest or 0) + 1,
                checkpoint_uuid=checkpoint_uuid, name=name, comment=comment, notes=notes,
                labels=list(labels or []), meta=dict(metadata or {}), owner_id=owner_id,
                creation_time=now, last_updated_time=now)
            session.add(version)
            model.last_updated_time = now
            return version

        return await self._write(register)

    async def get_model_version(self, model_id: int,
                                version: int | None = None) -> ModelVersion | None:
        """Version number ``version`` of the model, or its latest when ``None``."""
        stmt = select(ModelVersion).where(ModelVersion.model_id == model_id)
        if version is None:
            stmt = stmt.order_by(ModelVersion.version.desc()).limit(1)
        else:
            stmt = stmt.where(ModelVersion.version == version)
        async with self._reading() as session:
            return await session.scalar(stmt)

    async def list_model_versions(self, model_id: int) -> list[ModelVersion]:
        """The model's versions, newest (highest number) first."""
        stmt = (select(ModelVersion).where(ModelVersion.model_id == model_id)
                .order_by(ModelVersion.version.desc()))
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_model_version(
        self,
        version_id: int,
        *,
        add_metadata: Mapping[str, Any] | None = None,
        remove_metadata: Iterable[str] | None = None,
        **fields: Any,
    ) -> ModelVersion:
        """Set columns of a version (those of :data:`VERSION_FIELDS`) and change its metadata
        as :meth:`update_model` does.

        Raises:
            NotFound: no such version.
            ValueError: a column that cannot be set.
        """
        _check(fields, VERSION_FIELDS, "a model version")
        return await self._update_registry_row(
            ModelVersion, version_id, "model version", fields, add_metadata, remove_metadata)

    async def _update_registry_row(
        self,
        table: type[RowT],
        row_id: int,
        what: str,
        fields: Mapping[str, Any],
        add_metadata: Mapping[str, Any] | None,
        remove_metadata: Iterable[str] | None,
    ) -> RowT:
        """:meth:`update_model` and :meth:`update_model_version`, once checked: set the
        columns and change the metadata of one row, under a row lock."""
        def change(session: Session) -> RowT:
            row = session.scalar(
                select(table).where(table.id == row_id).with_for_update())
            if row is None:
                raise NotFound(f"{what} {row_id} does not exist")
            for name, value in fields.items():
                setattr(row, name, value)
            if add_metadata or remove_metadata:
                row.meta = _merged(row.meta, add_metadata, remove_metadata)
            row.last_updated_time = utcnow()
            return row

        return await self._write(change)

    async def delete_model_version(self, version_id: int) -> None:
        """Remove one version; its checkpoint may then be deleted again, unless another
        version names it.

        Raises:
            NotFound: no such version.
        """
        def remove(session: Session) -> None:
            result = session.execute(delete(ModelVersion).where(ModelVersion.id == version_id))
            if not getattr(result, "rowcount", 0):
                raise NotFound(f"model version {version_id} does not exist")

        await self._write(remove)

    # -- checkpoints the registry protects --------------------------------------------------

    async def registered_versions(self, uuids: Iterable[str]) -> dict[str, list[tuple[str, int]]]:
        """``(model name, version)`` of every version naming each of these checkpoints;
        checkpoints no version names are left out."""
        wanted = sorted(set(uuids))
        if not wanted:
            return {}
        stmt = (select(ModelVersion.checkpoint_uuid, Model.name, ModelVersion.version)
                .join(Model, Model.id == ModelVersion.model_id)
                .where(ModelVersion.checkpoint_uuid.in_(wanted))
                .order_by(Model.name, ModelVersion.version))
        found: dict[str, list[tuple[str, int]]] = {}
        async with self._reading() as session:
            for uuid, model, number in (await session.execute(stmt)).all():
                found.setdefault(uuid, []).append((model, int(number)))
        return found

    async def claim_checkpoints_for_deletion(self, uuids: Iterable[str]) -> list[str]:
        """Mark DELETED those of these checkpoints that are COMPLETED and named by no model
        version, in one transaction, and return their uuids (sorted); their files are the
        caller's to delete next.

        Marking first, under the checkpoints' row locks, is what keeps a registration that
        races with a deletion safe: whichever commits first wins, and a checkpoint is never
        both registered and deleted.
        """
        wanted = sorted(set(uuids))
        if not wanted:
            return []

        def claim(session: Session) -> list[str]:
            rows = session.scalars(
                select(Checkpoint.uuid)
                .where(Checkpoint.uuid.in_(wanted),
                       Checkpoint.state == CheckpointState.COMPLETED.value)
                .order_by(Checkpoint.uuid)
                .with_for_update())
            candidates = list(rows)
            registered = set(session.scalars(
                select(ModelVersion.checkpoint_uuid)
                .where(ModelVersion.checkpoint_uuid.in_(candidates))))
            claimed = [u for u in candidates if u not in registered]
            if claimed:
                session.execute(
                    update(Checkpoint)
                    .where(Checkpoint.uuid.in_(claimed))
                    .values(state=CheckpointState.DELETED.value))
            return claimed

        return await self._write(claim)


__all__ = ["MODEL_FIELDS", "VERSION_FIELDS", "RegistryQueries"]
