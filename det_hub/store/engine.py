"""Database URLs, engines and migrations: everything about connecting, nothing about queries."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from det_hub import nonfinite

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

#: Execution option marking a connection that is about to write; on SQLite its transactions
#: begin with ``BEGIN IMMEDIATE``.
WRITE_OPTION = "det_hub_write"

SQLITE_BUSY_TIMEOUT_S = 30
#: Seconds a new PostgreSQL connection may take before the attempt fails.
PG_CONNECT_TIMEOUT_S = 5

_SQLITE_DRIVERS = {"sqlite", "sqlite+pysqlite", "sqlite+aiosqlite"}
_PG_DRIVERS = {
    "postgres",
    "postgresql",
    "postgresql+psycopg",
    "postgresql+psycopg_async",
}


def normalize_url(url: str) -> tuple[URL, URL]:
    """Map a database URL to the (async, sync) pair of URLs the store uses.

    ``sqlite:///x.db`` and ``postgresql://...`` are accepted as well as the explicit
    ``sqlite+aiosqlite`` and ``postgresql+psycopg`` forms.

    Raises:
        ValueError: for another database or driver, or an in-memory SQLite database (every
            pooled connection would see a different, empty database).
    """
    parsed = make_url(url)
    driver = parsed.drivername
    if driver in _SQLITE_DRIVERS:
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file::memory:"):
            raise ValueError(f"in-memory SQLite is not supported, give a file path: {url!r}")
        return parsed.set(drivername="sqlite+aiosqlite"), parsed.set(drivername="sqlite")
    if driver in _PG_DRIVERS:
        # psycopg 3 serves both: SQLAlchemy picks its async dialect under create_async_engine.
        pg = parsed.set(drivername="postgresql+psycopg")
        return pg, pg
    raise ValueError(
        f"unsupported database URL {parsed.render_as_string()!r}: "
        "use sqlite:///path or postgresql://user@host/db"
    )


def configure_sqlite(engine: Engine, *, always_immediate: bool) -> None:
    """Per-connection SQLite settings and transaction handling.

    The driver's own transaction handling is switched off so that SQLAlchemy's ``begin`` event
    decides how a transaction starts: writers take the write lock up front with ``BEGIN
    IMMEDIATE`` and wait for it (``busy_timeout``). A deferred transaction that reads and then
    writes can fail at once with SQLITE_BUSY when another process committed in between, which no
    timeout can help.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
            # WAL lets readers run alongside the single writer, across processes too.
            cursor.execute("PRAGMA journal_mode = WAL")
            # In WAL mode NORMAL is still crash-safe; only the last commits may be lost on power
            # failure, and commits stop waiting for fsync.
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = always_immediate or conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def create_store_engine(async_url: URL, *, echo: bool = False) -> AsyncEngine:
    """The async engine for a normalised URL, with pool and per-connection settings.

    JSON columns hold NaN and infinities as Determined's strings (:mod:`det_hub.nonfinite`):
    ``jsonb`` refuses the bare tokens, and SQLite's JSON functions would too."""
    if async_url.get_backend_name() == "sqlite":
        engine = create_async_engine(
            async_url,
            echo=echo,
            json_serializer=nonfinite.dumps,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S},
            pool_size=5,
            max_overflow=10,
            pool_timeout=60,
        )
        configure_sqlite(engine.sync_engine, always_immediate=False)
        return engine
    # The service runs ~30 concurrent request handlers and background tasks. A server that
    # went away is noticed by pre-ping before a pooled connection is used, and a connection
    # that breaks in use is dropped from the pool (SQLAlchemy's disconnect handling), so the
    # pool recovers by itself once the server is back. A connection attempt gives up after
    # PG_CONNECT_TIMEOUT_S rather than the system's TCP timeout, so that calls fail fast (503)
    # while the server is unreachable.
    return create_async_engine(
        async_url,
        echo=echo,
        json_serializer=nonfinite.dumps,
        # A connect_timeout in the URL is the operator's and wins.
        connect_args={} if "connect_timeout" in async_url.query
        else {"connect_timeout": PG_CONNECT_TIMEOUT_S},
        pool_size=20,
        max_overflow=20,
        pool_timeout=60,
        pool_pre_ping=True,
        pool_recycle=1800,
    )


def alembic_config() -> Config:
    """An Alembic config pointing at the store's migrations, for programmatic use."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    return config


def upgrade_to_head(sync_url: URL) -> None:
    """Run ``alembic upgrade head`` on the database (blocking; the store calls it in a thread)."""
    if sync_url.get_backend_name() == "sqlite":
        database = Path(sync_url.database or "").expanduser().resolve()
        database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Made 0600 before SQLite opens it (an empty file is an empty database): SQLite would
        # create it under the umask, and its -wal and -shm files take the database's mode.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        engine = create_engine(sync_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        configure_sqlite(engine, always_immediate=True)
    else:
        engine = create_engine(sync_url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as connection:
            config = alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()
