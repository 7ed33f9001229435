"""The async store: the :class:`Store` class, its engine, sessions and transactions.

Its queries live in one mixin per resource (see :mod:`det_hub.store`), each reaching the
database only through :meth:`Store._reading` and :meth:`Store._writing`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from ._common import ModelT, check_fields, plain, translate
from .checkpoints import CheckpointQueries
from .cluster import ClusterQueries
from .engine import WRITE_OPTION, create_store_engine, normalize_url, upgrade_to_head
from .errors import NotFound
from .experiments import ExperimentQueries
from .logs import LogQueries
from .metric_summaries import MetricSummaryQueries
from .metrics import MetricQueries
from .models import Experiment
from .registry import RegistryQueries
from .sources import TrialSourceQueries
from .tasks import TaskQueries
from .trials import TrialQueries, TrialSummary  # TrialSummary: importable from here too
from .users import UserQueries, hash_token  # hash_token: importable from here too
from .webhooks import WebhookQueries

# Alembic keeps the running migration in module globals, so two upgrades in one process (two
# stores opened at once) must not overlap.
_MIGRATION_LOCK = threading.Lock()


class Store(
    UserQueries,
    ExperimentQueries,
    TrialQueries,
    MetricQueries,
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
        self.experiment_listeners: list[Callable[[int], None]] = []
        self.experiment_state_listeners: list[Callable[[Experiment], None]] = []

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
        engine = create_store_engine(async_url, echo=echo)
        return cls(
            async_url.render_as_string(hide_password=False), async_url.get_backend_name(), engine
        )

    async def close(self) -> None:
        """Close every pooled connection."""
        await self._engine.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncSession]:
        async with self._read_sessions() as session:
            yield session

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncSession]:
        """One write transaction, committed on success; constraint violations become errors."""
        lock = self._write_lock or contextlib.nullcontext()
        async with lock, self._write_sessions() as session:
            try:
                async with session.begin():
                    yield session
            except IntegrityError as exc:
                translated = translate(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _experiment_changed(self, experiment_id: int) -> None:
        for listener in list(self.experiment_listeners):
            listener(experiment_id)

    async def _update(self, model: type[ModelT], key: Any, fields: Mapping[str, Any]) -> ModelT:
        check_fields(model, fields)
        async with self._writing() as session:
            obj = await session.get(model, key)
            if obj is None:
                raise NotFound(f"{model.__name__} {key!r} does not exist")
            for name, value in fields.items():
                setattr(obj, name, plain(value))
        return obj


__all__ = ["Store", "TrialSummary", "hash_token"]
