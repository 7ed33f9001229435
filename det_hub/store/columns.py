"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Integer
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

UTC = dt.timezone.utc


def utcnow() -> dt.datetime:
    """The current time as a timezone-aware UTC datetime."""
    return dt.datetime.now(UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    PostgreSQL stores ``timestamptz`` and hands back values in the session's time zone; SQLite has
    no time zone support at all and would silently drop ``tzinfo``. Both are normalised here so
    callers compare and serialise datetimes without caring which database is underneath.
    Naive datetimes given to the store are taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if dialect.name == "sqlite":
            # Stored as naive text; dropping tzinfo only after converting keeps the text UTC and
            # lexically ordered.
            return value.replace(tzinfo=None)
        return value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


#: The largest value of an ``Integer`` column (ids of experiments, trials, tasks, users...) on
#: PostgreSQL, and of a ``BigInteger`` one (steps, metric ids) on both databases: what the API
#: takes for such a value, so that a larger one is a 400 rather than a database error.
MAX_INTEGER = 2**31 - 1
MAX_BIG_INTEGER = 2**63 - 1


def json_type() -> TypeEngine[Any]:
    """JSON everywhere, stored as JSONB on PostgreSQL (smaller, and indexable should we need it)."""
    return JSON().with_variant(JSONB(), "postgresql")


def big_id_type() -> TypeEngine[int]:
    """A 64-bit key on PostgreSQL; SQLite only autoincrements a column declared ``INTEGER``."""
    return BigInteger().with_variant(Integer(), "sqlite")
