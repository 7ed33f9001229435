"""The async store: the :class:`Store` class, its engine, sessions and transactions.

Its queries live in one mixin per resource (see :mod:`det_hub.store`), each reaching the
database only through :meth:`Store._reading` and :meth:`Store._writing`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import URL, Connection, Row, create_engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.pool import SingletonThreadPool

from det_hub import nonfinite

from ._common import ModelT, keyed_update, loaded_columns, translate, unavailable
from .checkpoints import CheckpointQueries
from .cluster import ClusterQueries
from .engine import (
    PG_CONNECT_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_S,
    WRITE_OPTION,
    configure_sqlite,
    create_store_engine,
    normalize_url,
    upgrade_to_head,
)
from .errors import NotFound, StoreUnavailable
from .experiments import ExperimentQueries
from .logs import LogQueries
from .metric_summaries import MetricSummaryQueries
from .metric_writes import MetricWriteQueries
from .metrics import MetricQueries
from .models import Experiment
from .registry import RegistryQueries
from .sources import TrialSourceQueries
from .tasks import TaskQueries
from .trials import TrialQueries, TrialSummary  # TrialSummary: importable from here too
from .users import UserQueries, hash_token  # hash_token: importable from here too
from .webhooks import WebhookQueries

if TYPE_CHECKING:
    from .direct import DirectConnections

T = TypeVar("T")

# Alembic keeps the running migration in module globals, so two upgrades in one process (two
# stores opened at once) must not overlap.
_MIGRATION_LOCK = threading.Lock()

log = logging.getLogger("det_hub.store")


class Store(
    UserQueries,
    ExperimentQueries,
    TrialQueries,
    MetricQueries,
    MetricWriteQueries,
    MetricSummaryQueries,
    CheckpointQueries,
    LogQueries,
    TaskQueries,
    ClusterQueries,
    RegistryQueries,
    WebhookQueries,
    TrialSourceQueries,
):
    """The master's database: SQLite (embedded default) or PostgreSQL, through one async API.

    Open with :meth:`open`, which also brings the schema up to date. Every method runs in its
    own transaction; returned model instances are detached with all columns loaded, so their
    attributes may be read after the call. Datetimes are timezone-aware UTC both ways.

    Attributes:
        url: the database URL in use, normalised to its async driver (password included).
        dialect: ``"sqlite"`` or ``"postgresql"``.
        experiment_listeners: callables given an experiment's id after each committed write
            that may change its summary (the experiments list's row): the experiment created
            or updated, a trial added to it, or a trial's searcher-metric value. They run on
            the event loop and must not block; the master's live experiment list is one.
        experiment_state_listeners: callables given an experiment's row after each committed
            write of its ``state`` (webhooks); they run on the event loop and must not block.

    A database that cannot be used (stopped, restarting, unreachable, its disk full) makes a
    call raise :class:`~det_hub.store.errors.StoreUnavailable`; the outage is logged once, at
    its start, and its end once a call succeeds again (see :attr:`outage`).
    """

    def __init__(self, url: str, dialect: str, engine: AsyncEngine) -> None:
        """Wrap an engine already migrated; use :meth:`open` instead."""
        self.url = url
        self.dialect = dialect
        self._engine = engine
        self._read_sessions = async_sessionmaker(engine, expire_on_commit=False)
        self._write_sessions = async_sessionmaker(
            engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )
        # SQLite has one writer at a time anyway: queueing this process's writers here spares
        # them the busy handler's sleep-and-retry; other processes still wait in busy_timeout.
        self._write_lock: asyncio.Lock | None = asyncio.Lock() if dialect == "sqlite" else None
        # SQLite: a thread and connection of its own for metric writes, made on first use.
        self._writer: _SQLiteWriter | None = None
        # PostgreSQL: the driver's own connections for the one-statement metric write.
        self._direct: DirectConnections | None = None
        if dialect == "postgresql":
            from .direct import DirectConnections
            self._direct = DirectConnections(engine.url, connect_timeout=PG_CONNECT_TIMEOUT_S)
        # PostgreSQL: each trial's summary mark as its last batch read it (see
        # MetricWriteQueries._insert_alone_pg), to send a batch's coarse blocks only with rows
        # below it.
        self._summary_marks: dict[int, int] = {}
        self.experiment_listeners: list[Callable[[int], None]] = []
        self.experiment_state_listeners: list[Callable[[Experiment], None]] = []
        self._outage: StoreUnavailable | None = None
        self._outage_since = 0.0
        self._outage_writes_only = False

    @classmethod
    async def open(cls, url: str, *, echo: bool = False) -> Store:
        """Migrate the database to the latest schema and open a store on it.

        Args:
            url: ``sqlite:///path.db`` (parent folders are created) or ``postgresql://...``;
                the ``+aiosqlite`` and ``+psycopg`` forms are accepted too.
            echo: log every SQL statement (SQLAlchemy's ``echo``).

        Raises:
            ValueError: an unsupported URL.
        """
        async_url, sync_url = normalize_url(url)

        def migrate() -> None:
            with _MIGRATION_LOCK:
                upgrade_to_head(sync_url)

        await asyncio.to_thread(migrate)
        return cls.connect(url, echo=echo)

    @classmethod
    def connect(cls, url: str, *, echo: bool = False) -> Store:
        """A store on a database another process keeps migrated (the master, for its ingest
        workers): :meth:`open` without the migration.

        Raises:
            ValueError: an unsupported URL.
        """
        async_url, _ = normalize_url(url)
        engine = create_store_engine(async_url, echo=echo)
        return cls(
            async_url.render_as_string(hide_password=False), async_url.get_backend_name(), engine
        )

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._direct is not None:
            await self._direct.close()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await asyncio.get_running_loop().run_in_executor(writer.thread, writer.close)
            writer.thread.shutdown(wait=False)
        await self._engine.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def ping(self) -> None:
        """Ask the database for nothing, to see that it answers.

        Raises:
            StoreUnavailable: It does not.
        """
        async with self._reading() as session:
            await session.execute(text("SELECT 1"))

    @property
    def outage(self) -> StoreUnavailable | None:
        """The error of the database outage under way, None while the database answers."""
        return self._outage

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncSession]:
        """One read-only session; a database that cannot be used raises StoreUnavailable."""
        try:
            async with self._read_sessions() as session:
                yield session
        except DBAPIError as exc:
            error = self._unavailable(exc, writing=False)
            if error is None:
                raise
            raise error from exc
        self._answered(wrote=False)

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncSession]:
        """One write transaction, committed on success, with errors as
        :meth:`_write_errors` makes them."""
        lock = self._write_lock or contextlib.nullcontext()
        async with lock:
            with self._write_errors():
                async with self._write_sessions() as session, session.begin():
                    yield session
        self._answered(wrote=True)

    @contextlib.contextmanager
    def _write_errors(self) -> Iterator[None]:
        """What a write's database errors become: constraint violations the store's errors,
        and a database that cannot be used (down, unreachable, disk full) StoreUnavailable."""
        try:
            yield
        except IntegrityError as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc
        except DBAPIError as exc:
            error = self._unavailable(exc, writing=True)
            if error is None:
                raise
            raise error from exc

    async def _write(self, work: Callable[[Session], T]) -> T:
        """One write transaction: ``work`` with a synchronous ORM session, committed when it
        returns; errors as :meth:`_writing` makes them. What it returns comes back detached,
        with the columns it loaded.

        On SQLite this runs on the writer thread (:meth:`_write_in_thread`): one hop to a
        thread for the whole transaction, where an async session pays one for every
        statement, each hop waiting for a turn of this process's event loop (a read and an
        update took 1.6 ms that way, 0.55 ms this way, on an idle loop). On PostgreSQL it
        runs in an async session (:meth:`AsyncSession.run_sync`).
        """
        if self._write_lock is None:
            async with self._writing() as session:
                return await session.run_sync(work)

        def in_thread(conn: Connection) -> T:
            # The session joins the connection's transaction, which the writer commits.
            with Session(bind=conn, expire_on_commit=False) as session:
                result = work(session)
                session.flush()
                session.expunge_all()
                return result

        return await self._write_in_thread(in_thread)

    async def _write_in_thread(self, work: Callable[[Connection], T]) -> T:
        """SQLite: run ``work`` in one transaction (``BEGIN IMMEDIATE``) on this store's own
        writer thread and its own connection, with errors as :meth:`_writing` gives them.

        A write of several statements costs one hop to a thread this way, where the async
        driver pays one per statement, each waiting for this process's event loop; since
        SQLite takes one writer at a time, that wait was the writers' queue.
        """
        assert self._write_lock is not None, "the writer thread is SQLite's"
        if self._writer is None:
            self._writer = _SQLiteWriter(normalize_url(self.url)[1])
        writer = self._writer
        async with self._write_lock:
            with self._write_errors():
                result = await asyncio.get_running_loop().run_in_executor(
                    writer.thread, writer.run, work)
        self._answered(wrote=True)
        return result

    async def _write_direct(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """PostgreSQL: one statement that commits by itself (``$n`` parameters), on the
        driver's own connections (:mod:`.direct`); its first row. Errors are those of
        :meth:`_writing`."""
        assert self._direct is not None, "direct writes are PostgreSQL's"
        import psycopg
        with self._write_errors():
            try:
                row = await self._direct.execute(sql, params)
            except psycopg.Error as exc:
                # Wrapped as SQLAlchemy wraps the driver's errors, for the same translation.
                raise DBAPIError.instance(sql, params, exc, psycopg.Error) from exc
        self._answered(wrote=True)
        return row

    def _unavailable(self, exc: DBAPIError, *, writing: bool) -> StoreUnavailable | None:
        """The StoreUnavailable for ``exc``, if it is one; the first of an outage is logged.

        SQLAlchemy has already dropped a connection it saw break (PostgreSQL's pool also
        checks each one before use), so the pool recovers by itself once the database does.
        """
        error = unavailable(exc)
        if error is None:
            return None
        if self._outage is None:
            self._outage_since = time.monotonic()
            log.warning("%s (%s); calls that need it fail until it is back",
                        error.what, error.cause)
            self._outage_writes_only = writing
        elif not writing:
            self._outage_writes_only = False
        self._outage = error
        return error

    def _answered(self, *, wrote: bool) -> None:
        """A call succeeded: the outage under way is over, unless only writes failed (a full
        disk, a file that cannot grow) and this was a read."""
        if self._outage is not None and (wrote or not self._outage_writes_only):
            log.warning("the database answers again after %.1f s (%s)",
                        time.monotonic() - self._outage_since, self._outage.cause)
            self._outage = None

    def _experiment_changed(self, experiment_id: int) -> None:
        for listener in list(self.experiment_listeners):
            listener(experiment_id)

    async def _update(self, model: type[ModelT], key: Any, fields: Mapping[str, Any]) -> ModelT:
        """Set columns (by attribute name) of the row of ``model`` whose primary key is
        ``key``, and answer the row as updated, detached as a read answers it: one
        ``UPDATE ... RETURNING`` statement (:func:`.keyed_update`), without loading the row
        into a session first (an ORM load, change and flush took twice as long as even an
        ``UPDATE`` built anew for each call).

        Raises:
            NotFound: no such row.
            ValueError: a name that is not a column, or the primary key.
        """
        statement, params = keyed_update(model, key, fields)
        if self._write_lock is None:
            async with self._writing() as session:
                row = (await session.execute(statement, params)).first()
        else:
            row = await self._write_in_thread(
                lambda conn: conn.execute(statement, params).first())
        if row is None:
            raise NotFound(f"{model.__name__} {key!r} does not exist")
        return _detached(model, row)


def _detached(model: type[ModelT], row: Row[Any]) -> ModelT:
    """An instance of ``model`` holding ``row`` (the columns :func:`.loaded_columns` names),
    as a session that loaded it and let it go would hand it over: detached, with its
    identity."""
    obj: ModelT = model.__mapper__.class_manager.new_instance()
    values = row._mapping
    for attr in loaded_columns(model):
        set_committed_value(obj, attr.key, values[attr.columns[0]])
    make_transient_to_detached(obj)
    return obj


class _SQLiteWriter:
    """A thread and a synchronous SQLite connection of one store's, for
    :meth:`Store._write_in_thread`; the connection is used from that thread only."""

    def __init__(self, sync_url: URL) -> None:
        self.thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="det-hub-sqlite-writer")
        self._engine = create_engine(
            sync_url, poolclass=SingletonThreadPool, json_serializer=nonfinite.dumps,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        configure_sqlite(self._engine, always_immediate=True)

    def run(self, work: Callable[[Connection], T]) -> T:
        """``work`` in one transaction, committed when it returns."""
        with self._engine.begin() as conn:
            return work(conn)

    def close(self) -> None:
        """Close the connection (on the writer thread)."""
        self._engine.dispose()


__all__ = ["Store", "TrialSummary", "hash_token"]
