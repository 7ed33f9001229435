"""What the store's query modules share; it queries no table itself.

:class:`Queries` is the base of every query mixin of :class:`det_hub.store.Store`: it names,
for the type checker only, the parts of the store the mixins use (the transaction helpers and
the store's attributes). The functions here turn values into the form they are stored in, and
the databases' errors into the store's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import ColumnElement
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute

from .columns import UTC
from .errors import NotFound, StoreConflict
from .models import Base

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

ModelT = TypeVar("ModelT", bound=Base)


class Queries:
    """The base of the store's query mixins (see :class:`Store`); it adds nothing at run time.

    Each mixin holds the queries of a few tables and reaches the database only through
    :meth:`Store._reading` and :meth:`Store._writing`, one transaction per call.
    """

    if TYPE_CHECKING:
        dialect: str

        def _reading(self) -> contextlib.AbstractAsyncContextManager[AsyncSession]: ...

        def _writing(self) -> contextlib.AbstractAsyncContextManager[AsyncSession]: ...

        async def _update(
            self, model: type[ModelT], key: Any, fields: Mapping[str, Any]
        ) -> ModelT: ...

        def _experiment_changed(self, experiment_id: int) -> None: ...


def plain(value: Any) -> Any:
    """Store enums by value, and datetimes as UTC, so returned objects match what is stored."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def translate(exc: IntegrityError) -> Exception | None:
    """The store error for a uniqueness or foreign-key violation, on either database."""
    orig = exc.orig
    message = str(orig)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate == "23505" or "UNIQUE constraint failed" in message:
        return StoreConflict(message)
    if sqlstate == "23503" or "FOREIGN KEY constraint failed" in message:
        return NotFound(message)
    return None


def check_fields(model: type[Base], fields: Mapping[str, Any]) -> None:
    """Refuse to set what is not a column of ``model``, or is its primary key.

    Raises:
        ValueError: an unknown column, or the primary key.
    """
    mapper = model.__mapper__
    columns = {attr.key for attr in mapper.column_attrs}
    keys = {col.key for col in mapper.primary_key}
    unknown = sorted(set(fields) - columns)
    if unknown:
        raise ValueError(f"{model.__name__} has no column(s) {', '.join(unknown)}")
    fixed = sorted(set(fields) & keys)
    if fixed:
        raise ValueError(f"{model.__name__} primary key {', '.join(fixed)} cannot be updated")


def contains_text(column: InstrumentedAttribute[str], text: str) -> ColumnElement[bool]:
    """``column`` holds ``text``, ignoring case; ``%`` and ``_`` in it are plain characters."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return column.ilike(f"%{escaped}%", escape="\\")


__all__ = ["ModelT", "Queries", "check_fields", "contains_text", "plain", "translate"]
