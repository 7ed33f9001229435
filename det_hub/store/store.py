"""The async store: every query the master makes, over one SQLAlchemy engine."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import enum
import hashlib
import threading
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Executable,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from .columns import UTC, utcnow
from .engine import WRITE_OPTION, create_store_engine, normalize_url, upgrade_to_head
from .errors import NotFound, StoreConflict
from .lttb import lttb_indices
from .models import (
    AgentSetting,
    Allocation,
    Base,
    Checkpoint,
    Experiment,
    ExperimentContext,
    Metric,
    MetricRow,
    MetricSummary,
    Task,
    TaskContext,
    TaskLog,
    Token,
    Trial,
    User,
)
from .registry import RegistryQueries
from .sources import TrialSourceQueries
from .summaries import (
    LEVELS,
    RAW_ROWS_PER_POINT,
    Block,
    Point,
    candidates,
    choose_level,
    coarsen,
    summarize,
)
from .webhooks import WebhookQueries

ModelT = TypeVar("ModelT", bound=Base)

# Alembic keeps the running migration in module globals, so two upgrades in one process (two
# stores opened at once) must not overlap.
_MIGRATION_LOCK = threading.Lock()


def hash_token(secret: str) -> str:
    """The form in which a token is stored and looked up: sha256 hex of the secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _plain(value: Any) -> Any:
    """Store enums by value, and datetimes as UTC, so returned objects match what is stored."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def _translate(exc: IntegrityError) -> Exception | None:
    """The store error for a uniqueness or foreign-key violation, on either database."""
    orig = exc.orig
    message = str(orig)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate == "23505" or "UNIQUE constraint failed" in message:
        return StoreConflict(message)
    if sqlstate == "23503" or "FOREIGN KEY constraint failed" in message:
        return NotFound(message)
    return None


def _check_fields(model: type[Base], fields: Mapping[str, Any]) -> None:
    mapper = model.__mapper__
    columns = {attr.key for attr in mapper.column_attrs}
    keys = {col.key for col in mapper.primary_key}
    unknown = sorted(set(fields) - columns)
    if unknown:
        raise ValueError(f"{model.__name__} has no column(s) {', '.join(unknown)}")
    fixed = sorted(set(fields) & keys)
    if fixed:
        raise ValueError(f"{model.__name__} primary key {', '.join(fixed)} cannot be updated")


def _summary_upsert(dialect: str) -> Executable:
    """The statement :meth:`Store._save_summaries` runs: an insert of blocks that, for a block
    already stored, adds the counts and keeps the first, last, lowest and highest row of both.

    On PostgreSQL its parameters are arrays, one per column, unnested into rows; on SQLite,
    whose executemany runs in-process, they are rows.
    """
    table: Any = MetricSummary.__table__  # a Table; typed as any FromClause
    upsert: Any
    if dialect == "postgresql":
        arrays = [cast(bindparam(c.name), pg.ARRAY(c.type)) for c in table.c]
        unnested: Any = select(literal_column("*")).select_from(func.unnest(*arrays))
        upsert = pg.insert(table).from_select(table.c.keys(), unnested)
    else:
        upsert = sqlite.insert(table)
    old, new = table.c, upsert.excluded

    def take(corner: str, better: ColumnElement[bool]) -> dict[str, Any]:
        return {
            f"{corner}_{part}": case(
                (better, new[f"{corner}_{part}"]), else_=old[f"{corner}_{part}"])
            for part in ("step", "id", "value")
        }

    merged = {
        "count": old.count + new.count,
        **take("first", or_(new.first_step < old.first_step,
                            and_(new.first_step == old.first_step, new.first_id < old.first_id))),
        **take("last", or_(new.last_step > old.last_step,
                           and_(new.last_step == old.last_step, new.last_id > old.last_id))),
        **take("min", new.min_value < old.min_value),
        **take("max", new.max_value > old.max_value),
    }
    keys = [old.trial_id, old.group_name, old.name, old.level, old.block]
    statement: Executable = upsert.on_conflict_do_update(index_elements=keys, set_=merged)
    return statement


#: Trial columns that change what an experiment's summary shows (its best searcher metric).
_SUMMARY_TRIAL_FIELDS = frozenset({"searcher_metric_value", "state", "run_state"})


class TrialSummary(NamedTuple):
    """An experiment's trials in brief: how many, and the lowest and highest searcher-metric
    value any of them reported (None before any did)."""

    trials: int
    lowest: float | None
    highest: float | None


class Store(RegistryQueries, WebhookQueries, TrialSourceQueries):
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
        self._summary_upsert: Executable | None = None
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
                translated = _translate(exc)
                if translated is None:
                    raise
                raise translated from exc

    def _experiment_changed(self, experiment_id: int) -> None:
        for listener in list(self.experiment_listeners):
            listener(experiment_id)

    async def _update(self, model: type[ModelT], key: Any, fields: Mapping[str, Any]) -> ModelT:
        _check_fields(model, fields)
        async with self._writing() as session:
            obj = await session.get(model, key)
            if obj is None:
                raise NotFound(f"{model.__name__} {key!r} does not exist")
            for name, value in fields.items():
                setattr(obj, name, _plain(value))
        return obj

    # -- users and tokens -------------------------------------------------------------------

    async def create_user(self, username: str, *, admin: bool = False) -> User:
        """Add an active user.

        Raises:
            StoreConflict: the username is taken.
        """
        user = User(username=username, admin=admin, active=True, created_at=utcnow())
        async with self._writing() as session:
            session.add(user)
        return user

    async def get_user(self, username: str) -> User | None:
        """The user with this name, active or not."""
        async with self._reading() as session:
            return await session.scalar(select(User).where(User.username == username))

    async def get_user_by_id(self, user_id: int) -> User | None:
        """The user with this id, active or not."""
        async with self._reading() as session:
            return await session.get(User, user_id)

    async def list_users(self) -> list[User]:
        """All users, by id."""
        async with self._reading() as session:
            return list(await session.scalars(select(User).order_by(User.id)))

    async def update_user(self, user_id: int, **fields: Any) -> User:
        """Set columns of a user (``active``, ``admin``, ...).

        Raises:
            NotFound: no such user.
            StoreConflict: a new username is taken.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(User, user_id, fields)

    async def link_agent_user(self, user_id: int, *, agent_uid: int, agent_gid: int,
                              agent_user: str | None = None,
                              agent_group: str | None = None) -> User:
        """Link a user to the Unix account their tasks run as, replacing any earlier link
        (all four columns are written, so no part of an old link is left behind).

        Raises:
            NotFound: no such user.
        """
        return await self._update(User, user_id, {
            "agent_uid": agent_uid, "agent_gid": agent_gid, "agent_user": agent_user,
            "agent_group": agent_group})

    async def unlink_agent_user(self, user_id: int) -> User:
        """Forget a user's Unix account; unlinking a user without one changes nothing.

        Raises:
            NotFound: no such user.
        """
        return await self._update(User, user_id, {
            "agent_uid": None, "agent_gid": None, "agent_user": None, "agent_group": None})

    async def add_token(
        self,
        user_id: int,
        token_hash: str,
        *,
        description: str = "",
        expires_at: dt.datetime | None = None,
    ) -> Token:
        """Record a user token by its hash (see :func:`hash_token`).

        Raises:
            StoreConflict: the hash is already recorded.
            NotFound: no such user.
        """
        token = Token(
            user_id=user_id,
            token_hash=token_hash,
            description=description,
            created_at=utcnow(),
            expires_at=_plain(expires_at),
        )
        async with self._writing() as session:
            session.add(token)
        return token

    async def user_for_token(self, token_hash: str) -> User | None:
        """The active user owning an unexpired token with this hash, else ``None``."""
        stmt = (
            select(User)
            .join(Token, Token.user_id == User.id)
            .where(
                Token.token_hash == token_hash,
                User.active.is_(True),
                or_(Token.expires_at.is_(None), Token.expires_at > utcnow()),
            )
        )
        async with self._reading() as session:
            return await session.scalar(stmt)

    # -- experiments ------------------------------------------------------------------------

    async def create_experiment(
        self,
        *,
        name: str,
        owner_id: int,
        config: dict[str, Any],
        original_config: str,
        context: bytes | None,
        state: str,
        searcher_metric: str,
        smaller_is_better: bool,
        resource_pool: str = "default",
        priority: int = 42,
        weight: float = 1.0,
        description: str = "",
        seed: int = 0,
        parent_id: int | None = None,
    ) -> Experiment:
        """Add an experiment, with its context archive when given; ``parent_id`` is the
        experiment it was forked from.

        Raises:
            NotFound: no such owner.
        """
        experiment = Experiment(
            name=name,
            description=description,
            owner_id=owner_id,
            state=_plain(state),
            archived=False,
            progress=None,
            config=config,
            original_config=original_config,
            searcher_metric=searcher_metric,
            smaller_is_better=smaller_is_better,
            resource_pool=resource_pool,
            priority=priority,
            weight=weight,
            queue_position=None,
            seed=seed,
            searcher_state=None,
            created_at=utcnow(),
            ended_at=None,
            labels=[],
            notes="",
            parent_id=parent_id,
        )
        async with self._writing() as session:
            session.add(experiment)
            await session.flush()
            if context is not None:
                session.add(ExperimentContext(experiment_id=experiment.id, archive=context))
        self._experiment_changed(experiment.id)
        return experiment

    async def get_experiment(self, experiment_id: int) -> Experiment | None:
        """The experiment with this id (without its context archive)."""
        async with self._reading() as session:
            return await session.get(Experiment, experiment_id)

    async def list_experiments(
        self,
        *,
        states: list[str] | None = None,
        or_ids: Collection[int] = (),
        archived: bool | None = None,
        owner_id: int | None = None,
        name_contains: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Experiment], int]:
        """One page of experiments, newest first, and how many match in all.

        ``None`` leaves a filter out; an empty ``states`` list matches nothing but the
        experiments in ``or_ids``, which pass the states filter whatever their state.
        ``name_contains`` matches names holding that text, ignoring case; ``%`` and ``_`` in
        it are plain characters.
        """
        where: list[ColumnElement[bool]] = []
        if states is not None:
            in_states = Experiment.state.in_([_plain(s) for s in states])
            where.append(or_(in_states, Experiment.id.in_(list(or_ids))) if or_ids
                         else in_states)
        if archived is not None:
            where.append(Experiment.archived.is_(archived))
        if owner_id is not None:
            where.append(Experiment.owner_id == owner_id)
        if name_contains:
            text = name_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(Experiment.name.ilike(f"%{text}%", escape="\\"))
        page = (
            select(Experiment)
            .where(*where)
            .order_by(Experiment.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._reading() as session:
            total = await session.scalar(select(func.count()).select_from(Experiment).where(*where))
            experiments = list(await session.scalars(page))
        return experiments, int(total or 0)

    async def list_experiments_in_states(self, states: list[str]) -> list[Experiment]:
        """Every experiment in one of these states, by id (the master's recovery at start)."""
        stmt = (
            select(Experiment)
            .where(Experiment.state.in_([_plain(s) for s in states]))
            .order_by(Experiment.id)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_experiment(self, experiment_id: int, **fields: Any) -> Experiment:
        """Set columns of an experiment (``state``, ``progress``, ``archived``, ...).

        Raises:
            NotFound: no such experiment.
            ValueError: a name that is not a column, or the primary key.
        """
        experiment = await self._update(Experiment, experiment_id, fields)
        self._experiment_changed(experiment_id)
        if "state" in fields:
            for listener in list(self.experiment_state_listeners):
                listener(experiment)
        return experiment

    async def get_experiment_context(self, experiment_id: int) -> bytes | None:
        """The experiment's context archive, or ``None`` when it has none."""
        stmt = select(ExperimentContext.archive).where(
            ExperimentContext.experiment_id == experiment_id
        )
        async with self._reading() as session:
            return await session.scalar(stmt)

    # -- trials -----------------------------------------------------------------------------

    async def create_trial(
        self, *, experiment_id: int, request_id: str, hparams: dict[str, Any], seed: int, state: str
    ) -> Trial:
        """Add a trial to an experiment.

        Raises:
            NotFound: no such experiment.
        """
        trial = Trial(
            experiment_id=experiment_id,
            request_id=request_id,
            state=_plain(state),
            run_state=None,
            hparams=hparams,
            seed=seed,
            restarts=0,
            created_at=utcnow(),
            ended_at=None,
            steps_completed=0,
            progress=None,
            latest_checkpoint=None,
            best_validation=None,
            latest_validation=None,
            searcher_metric_value=None,
            runner_state=None,
        )
        async with self._writing() as session:
            session.add(trial)
        self._experiment_changed(experiment_id)
        return trial

    async def get_trial(self, trial_id: int) -> Trial | None:
        """The trial with this id."""
        async with self._reading() as session:
            return await session.get(Trial, trial_id)

    async def list_trials(self, experiment_id: int) -> list[Trial]:
        """An experiment's trials, by id."""
        stmt = select(Trial).where(Trial.experiment_id == experiment_id).order_by(Trial.id)
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_trial(self, trial_id: int, **fields: Any) -> Trial:
        """Set columns of a trial.

        Raises:
            NotFound: no such trial.
            ValueError: a name that is not a column, or the primary key.
        """
        trial = await self._update(Trial, trial_id, fields)
        if _SUMMARY_TRIAL_FIELDS.intersection(fields):
            self._experiment_changed(trial.experiment_id)
        return trial

    async def count_trials(self, experiment_ids: list[int]) -> dict[int, int]:
        """How many trials each experiment has (0 for ids without any)."""
        summaries = await self.trial_summaries(experiment_ids)
        return {i: summary.trials for i, summary in summaries.items()}

    async def trial_summaries(self, experiment_ids: list[int]) -> dict[int, TrialSummary]:
        """Each experiment's :class:`TrialSummary` (no trials: ``(0, None, None)``), in one
        query."""
        summaries = {i: TrialSummary(0, None, None) for i in experiment_ids}
        if not experiment_ids:
            return summaries
        stmt = (
            select(
                Trial.experiment_id,
                func.count(),
                func.min(Trial.searcher_metric_value),
                func.max(Trial.searcher_metric_value),
            )
            .where(Trial.experiment_id.in_(experiment_ids))
            .group_by(Trial.experiment_id)
        )
        async with self._reading() as session:
            for experiment_id, count, lowest, highest in await session.execute(stmt):
                summaries[experiment_id] = TrialSummary(
                    int(count),
                    None if lowest is None else float(lowest),
                    None if highest is None else float(highest),
                )
        return summaries

    # -- allocations ------------------------------------------------------------------------

    async def create_allocation(
        self,
        *,
        id: str,
        token_hash: str,
        slots: int,
        state: str,
        trial_id: int | None = None,
        task_id: int | None = None,
    ) -> Allocation:
        """Add an allocation (one attempt at running a trial, or a task).

        Raises:
            StoreConflict: the id or token hash is taken.
            NotFound: no such trial or task.
            ValueError: not exactly one of ``trial_id`` and ``task_id`` given.
        """
        if (trial_id is None) == (task_id is None):
            raise ValueError("an allocation belongs to a trial or a task: give exactly one")
        allocation = Allocation(
            id=id,
            trial_id=trial_id,
            task_id=task_id,
            token_hash=token_hash,
            state=_plain(state),
            slots=slots,
            agent_id=None,
            slot_ids=None,
            pid=None,
            workdir=None,
            log_offset=0,
            preempt=False,
            created_at=utcnow(),
            started_at=None,
            ended_at=None,
            exit_code=None,
            exit_reason=None,
        )
        async with self._writing() as session:
            session.add(allocation)
        return allocation

    async def get_allocation(self, allocation_id: str) -> Allocation | None:
        """The allocation with this id."""
        async with self._reading() as session:
            return await session.get(Allocation, allocation_id)

    async def allocation_for_token(self, token_hash: str) -> Allocation | None:
        """The allocation whose token has this hash, ended or not."""
        stmt = select(Allocation).where(Allocation.token_hash == token_hash)
        async with self._reading() as session:
            return await session.scalar(stmt)

    async def update_allocation(self, allocation_id: str, **fields: Any) -> Allocation:
        """Set columns of an allocation.

        Raises:
            NotFound: no such allocation.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Allocation, allocation_id, fields)

    async def list_open_allocations(self) -> list[Allocation]:
        """Allocations that have not ended, oldest first."""
        stmt = (
            select(Allocation)
            .where(Allocation.ended_at.is_(None))
            .order_by(Allocation.created_at, Allocation.id)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    # -- tasks ------------------------------------------------------------------------------

    async def create_task(
        self,
        *,
        type: str,
        owner_id: int,
        state: str,
        config: dict[str, Any],
        context: bytes | None = None,
        description: str = "",
        resource_pool: str = "default",
        priority: int = 42,
        details: dict[str, Any] | None = None,
        secret: str | None = None,
    ) -> Task:
        """Add a task, with its context archive when given.

        Raises:
            NotFound: no such owner.
        """
        task = Task(
            type=_plain(type),
            owner_id=owner_id,
            state=_plain(state),
            description=description,
            config=config,
            resource_pool=resource_pool,
            priority=priority,
            queue_position=None,
            created_at=utcnow(),
            ended_at=None,
            exit_code=None,
            exit_reason=None,
            details=details,
            secret=secret,
            proxy_address=None,
        )
        async with self._writing() as session:
            session.add(task)
            await session.flush()
            if context is not None:
                session.add(TaskContext(task_id=task.id, archive=context))
        return task

    async def get_task(self, task_id: int) -> Task | None:
        """The task with this id (without its context archive)."""
        async with self._reading() as session:
            return await session.get(Task, task_id)

    async def list_tasks(
        self,
        *,
        type: str | None = None,
        states: list[str] | None = None,
        owner_id: int | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        """Tasks matching every filter given, by id (oldest first); ``limit`` keeps the newest."""
        where: list[ColumnElement[bool]] = []
        if type is not None:
            where.append(Task.type == _plain(type))
        if states is not None:
            where.append(Task.state.in_([_plain(s) for s in states]))
        if owner_id is not None:
            where.append(Task.owner_id == owner_id)
        stmt = select(Task).where(*where).order_by(Task.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        async with self._reading() as session:
            return list(reversed(list(await session.scalars(stmt))))

    async def update_task(self, task_id: int, **fields: Any) -> Task:
        """Set columns of a task (``state``, ``exit_code``, ...).

        Raises:
            NotFound: no such task.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Task, task_id, fields)

    async def get_task_context(self, task_id: int) -> bytes | None:
        """The task's context archive, or ``None`` when it has none."""
        stmt = select(TaskContext.archive).where(TaskContext.task_id == task_id)
        async with self._reading() as session:
            return await session.scalar(stmt)

    # -- agents -----------------------------------------------------------------------------

    async def agent_settings(self) -> dict[str, bool]:
        """Whether each agent an admin has enabled or disabled is enabled, by agent id."""
        async with self._reading() as session:
            return {row.id: row.enabled for row in await session.scalars(select(AgentSetting))}

    async def set_agent_enabled(self, agent_id: str, enabled: bool) -> None:
        """Remember that an admin enabled or disabled an agent."""
        async with self._writing() as session:
            row = await session.get(AgentSetting, agent_id)
            if row is None:
                session.add(AgentSetting(id=agent_id, enabled=enabled, updated_at=utcnow()))
            else:
                row.enabled, row.updated_at = enabled, utcnow()

    # -- metrics ----------------------------------------------------------------------------

    async def add_metrics(self, trial_id: int, group: str, rows: list[dict[str, Any]]) -> int:
        """Add a batch of metric rows to one group of a trial, in one statement.

        Args:
            rows: ``{"steps_completed": int, "metrics": dict, "report_time": datetime}``;
                ``report_time`` is optional and defaults to now.

        Returns:
            The number of rows added.

        Raises:
            NotFound: no such trial.
        """
        return len(await self.insert_metrics(trial_id, group, rows))

    async def insert_metrics(
        self, trial_id: int, group: str, rows: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """:meth:`add_metrics`, answering the stored rows: ``{"id", "trial_id", "group",
        "steps_completed", "metrics", "report_time"}`` in the order given, once committed."""
        if not rows:
            return []
        now = utcnow()
        params = [
            {
                "trial_id": trial_id,
                "group": group,
                "steps_completed": int(row["steps_completed"]),
                "metrics": row["metrics"],
                "report_time": _plain(row.get("report_time") or now),
            }
            for row in rows
        ]
        # RETURNING makes SQLAlchemy send multi-row VALUES batches ("insertmanyvalues") on both
        # databases instead of one statement per row.
        stmt = insert(Metric).returning(Metric.id, sort_by_parameter_order=True)
        async with self._writing() as session:
            result = await session.execute(stmt, params)
            ids = list(result.scalars())
            blocks = summarize(
                (row_id, p["steps_completed"], p["metrics"])
                for row_id, p in zip(ids, params, strict=True)
            )
            await self._save_summaries(session, trial_id, group, blocks.values())
        return [{"id": row_id, **p} for row_id, p in zip(ids, params, strict=True)]

    async def experiment_metrics_after(
        self, experiment_id: int, after_id: int, limit: int
    ) -> list[MetricRow]:
        """The metric rows of an experiment's trials with an id above ``after_id``, by id:
        what a stream of the experiment's metrics resumes from."""
        trial_ids = select(Trial.id).where(Trial.experiment_id == experiment_id)
        stmt = (
            select(Metric)
            .where(Metric.trial_id.in_(trial_ids), Metric.id > after_id)
            .order_by(Metric.id)
            .limit(limit)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def get_metrics(
        self,
        trial_id: int,
        *,
        group: str | None = None,
        max_points: int | None = None,
        after: int | None = None,
        metric: str | None = None,
    ) -> list[MetricRow]:
        """A trial's metric rows, ascending by ``steps_completed`` (then id).

        Args:
            group: only this group; all groups by default.
            max_points: downsample each group that has more rows than this, so that a chart of
                a million points costs about ``max_points`` rows. The database counts the rows.
            after: only rows with ``steps_completed`` greater than this.
            metric: with ``max_points``, the metric whose curve downsampling keeps: each large
                group is reduced to at most ``max_points`` rows by Largest-Triangle-Three-Buckets
                over ``(steps_completed, metric)`` (see :mod:`det_hub.store.lttb`). Up to
                ``RAW_ROWS_PER_POINT * max_points`` rows, LTTB sees every row; above, it sees
                the lowest and highest row of each of at most ``max_points`` step ranges plus
                the first and last row, read from the metric's block summaries
                (:mod:`det_hub.store.summaries`) rather than from the rows. Spikes and both
                ends survive either way. Rows without a finite number for ``metric``
                (booleans included) are left out; a group where no row has one is thinned as
                without ``metric``. Without
                ``metric``, every k-th row is kept with ``k = ceil(n / max_points)``, plus the
                last row, by the database.
        """
        where: list[ColumnElement[bool]] = [Metric.trial_id == trial_id]
        if group is not None:
            where.append(Metric.group == group)
        if after is not None:
            where.append(Metric.steps_completed > after)
        ordered = select(Metric).where(*where).order_by(Metric.steps_completed, Metric.id)
        if max_points is None:
            async with self._reading() as session:
                return list(await session.scalars(ordered))
        if max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")

        async with self._reading() as session:
            if self.dialect == "postgresql":
                # Count and thinning must see the same rows, or the "last" row could be missed
                # while a trial is still reporting.
                await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            # One pass over the index: each group's size and step range.
            count_stmt = (
                select(
                    Metric.group,
                    func.count(),
                    func.min(Metric.steps_completed),
                    func.max(Metric.steps_completed),
                )
                .where(*where)
                .group_by(Metric.group)
            )
            ranges = {
                g: (int(n), int(lo), int(hi)) for g, n, lo, hi in await session.execute(count_stmt)
            }
            counts = {g: n for g, (n, _, _) in ranges.items()}
            if all(n <= max_points for n in counts.values()):
                return list(await session.scalars(ordered))
            if metric is not None:
                return await self._lttb_metrics(
                    session, where, ranges, max_points, metric, trial_id, after)

            # Numbering reads only indexed columns; full rows are fetched for the kept ids alone.
            numbered = (
                select(
                    Metric.id.label("id"),
                    Metric.group.label("group_name"),
                    func.row_number()
                    .over(
                        partition_by=Metric.group,
                        order_by=(Metric.steps_completed, Metric.id),
                    )
                    .label("rn"),
                )
                .where(*where)
                .subquery("numbered")
            )
            keep: list[ColumnElement[bool]] = []
            small = [g for g, n in counts.items() if n <= max_points]
            if small:
                keep.append(numbered.c.group_name.in_(small))
            for g, n in counts.items():
                if n > max_points:
                    k = -(-n // max_points)
                    keep.append(
                        and_(
                            numbered.c.group_name == g,
                            or_((numbered.c.rn - 1) % k == 0, numbered.c.rn == n),
                        )
                    )
            stmt = (
                select(Metric)
                .join(numbered, numbered.c.id == Metric.id)
                .where(or_(*keep))
                .order_by(Metric.steps_completed, Metric.id)
            )
            return list(await session.scalars(stmt))

    async def _lttb_metrics(
        self,
        session: AsyncSession,
        where: list[ColumnElement[bool]],
        counts: dict[str, tuple[int, int, int]],
        max_points: int,
        metric: str,
        trial_id: int,
        after: int | None,
    ) -> list[MetricRow]:
        """:meth:`get_metrics` downsampled by LTTB on one metric (see there).

        A group of up to ``RAW_ROWS_PER_POINT * max_points`` rows is read whole (one number per
        row) and LTTB runs over it. A larger one never travels to Python: its candidates are the
        extremes of buckets of whole blocks from the metric's summaries
        (:mod:`det_hub.store.summaries`), at most ``2 * max_points + 2`` rows, and LTTB keeps
        ``max_points`` of them. Full rows are fetched for the kept ids alone.
        """
        small = [g for g, (n, _, _) in counts.items() if n <= max_points]
        keep_ids: list[int] = []
        if small:
            keep_ids.extend(
                await session.scalars(select(Metric.id).where(*where, Metric.group.in_(small)))
            )
        for g, (n, _, _) in counts.items():
            if n <= max_points:
                continue
            in_group = [*where, Metric.group == g]
            if n <= RAW_ROWS_PER_POINT * max_points:
                points = await self._numeric_points(session, in_group, metric)
            else:
                points = await self._summary_candidates(
                    session, trial_id, g, in_group, metric, max_points, after)
            if points:
                keep_ids.extend(
                    points[i][1]
                    for i in lttb_indices([p[0] for p in points], [p[2] for p in points],
                                          max_points)
                )
                continue
            # No row of the group has the metric: thin it as without ``metric``.
            all_ids = list(
                await session.scalars(
                    select(Metric.id).where(*in_group).order_by(Metric.steps_completed, Metric.id)
                )
            )
            k = -(-len(all_ids) // max_points)
            keep_ids.extend(all_ids[::k])
            if (len(all_ids) - 1) % k:
                keep_ids.append(all_ids[-1])
        rows: list[MetricRow] = []
        # Bounded IN lists: SQLite allows at most 32766 parameters in one statement.
        for start in range(0, len(keep_ids), 10_000):
            chunk = keep_ids[start : start + 10_000]
            rows.extend(await session.scalars(select(Metric).where(Metric.id.in_(chunk))))
        rows.sort(key=lambda r: (r.steps_completed, r.id))
        return rows

    async def _numeric_points(
        self, session: AsyncSession, in_group: list[ColumnElement[bool]], metric: str
    ) -> list[Point]:
        """Every row of a group with a number for ``metric`` (booleans are not), ascending.
        The database extracts the one value: parsing whole documents here would cost more
        than reading them."""
        if self.dialect == "postgresql":
            element = Metric.metrics[metric]
            value: ColumnElement[Any] = element.as_float()
            is_number = func.jsonb_typeof(element) == "number"
        else:
            quoted = metric.replace("\\", "\\\\").replace('"', '\\"')
            path = f'$."{quoted}"'
            value = func.json_extract(Metric.metrics, path)
            # json_type tells true and false from the numbers json_extract makes of them.
            is_number = func.json_type(Metric.metrics, path).in_(["integer", "real"])
        rows = await session.execute(
            select(Metric.steps_completed, Metric.id, value)
            .where(*in_group, is_number)
            .order_by(Metric.steps_completed, Metric.id)
        )
        return [(step, row_id, float(v)) for step, row_id, v in rows]

    @staticmethod
    async def _summary_candidates(
        session: AsyncSession,
        trial_id: int,
        group: str,
        in_group: list[ColumnElement[bool]],
        metric: str,
        max_points: int,
        after: int | None,
    ) -> list[Point]:
        """LTTB's candidates for a large group, from the metric's block summaries.

        With ``after``, only blocks that start past it are used; the rows between ``after``
        and the first of them are summarised here, at the finest level.
        """
        series = [MetricSummary.trial_id == trial_id, MetricSummary.group == group,
                  MetricSummary.name == metric]

        def starting_past(level: int) -> ColumnElement[bool]:
            # A block starts past ``after`` when its first step, block << level, exceeds it.
            return MetricSummary.block > (after >> level) if after is not None else true()

        per_level: dict[int, int] = {}
        for level in LEVELS:
            per_level[level] = int(await session.scalar(
                select(func.count()).select_from(MetricSummary)
                .where(*series, MetricSummary.level == level, starting_past(level))) or 0)
        chosen = choose_level(per_level, max_points)
        blocks: list[Block] = []
        if chosen is not None:
            blocks = [Block.from_row(row) for row in (await session.execute(
                select(MetricSummary.__table__)
                .where(*series, MetricSummary.level == chosen, starting_past(chosen))
            )).mappings()]
        if after is not None:
            level = chosen if chosen is not None else LEVELS[-1]
            head_end = ((after >> level) + 1) << level
            head = await session.execute(
                select(Metric.id, Metric.steps_completed, Metric.metrics)
                .where(*in_group, Metric.steps_completed < head_end)
            )
            summarised = summarize(
                ((i, s, {metric: m.get(metric)}) for i, s, m in head), levels=LEVELS[:1])
            blocks.extend(summarised.values())
        return candidates(blocks, max_points)

    async def metrics_at(self, trial_id: int, group: str, steps_completed: int) -> MetricRow | None:
        """The row of a group reported at exactly ``steps_completed`` (the latest on a tie)."""
        stmt = (
            select(Metric)
            .where(Metric.trial_id == trial_id, Metric.group == group,
                   Metric.steps_completed == steps_completed)
            .order_by(Metric.id.desc())
            .limit(1)
        )
        async with self._reading() as session:
            return await session.scalar(stmt)

    async def latest_metrics(self, trial_id: int, group: str) -> MetricRow | None:
        """The row with the most ``steps_completed`` (the latest reported on a tie)."""
        stmt = (
            select(Metric)
            .where(Metric.trial_id == trial_id, Metric.group == group)
            .order_by(Metric.steps_completed.desc(), Metric.id.desc())
            .limit(1)
        )
        async with self._reading() as session:
            return await session.scalar(stmt)

    async def delete_metrics_after(self, trial_id: int, steps_completed: int) -> int:
        """Drop a trial's metric rows (every group) reported past ``steps_completed``: what a
        trial that resumes from an earlier checkpoint will report again.

        Returns:
            The number of rows deleted.
        """
        stmt = delete(Metric).where(
            Metric.trial_id == trial_id, Metric.steps_completed > steps_completed
        )
        async with self._writing() as session:
            result = await session.execute(stmt)
            await self._cut_summaries(session, trial_id, steps_completed)
            return int(getattr(result, "rowcount", 0) or 0)

    async def _save_summaries(
        self, session: AsyncSession, trial_id: int, group: str, blocks: Iterable[Block]
    ) -> None:
        """Merge blocks into the stored summaries: an upsert that keeps the extremes."""
        rows = [{"trial_id": trial_id, "group_name": group, **b.row()} for b in blocks]
        if not rows:
            return
        if self._summary_upsert is None:
            self._summary_upsert = _summary_upsert(self.dialect)
        if self.dialect == "postgresql":
            # One statement over arrays, one value per block in each: a batch of metrics
            # touches about a hundred blocks, and a round trip each would cost more than
            # inserting the rows did.
            columns = MetricSummary.__table__.c.keys()
            await session.execute(
                self._summary_upsert, {c: [row[c] for row in rows] for c in columns})
        else:
            await session.execute(self._summary_upsert, rows)

    async def _cut_summaries(self, session: AsyncSession, trial_id: int, steps: int) -> None:
        """Make the summaries match a trial whose rows past ``steps`` were just deleted.

        Blocks that reach past ``steps`` go. The one block per level that also held rows up to
        ``steps`` is rebuilt: at the finest level from those rows (fewer than ``2 ** level``
        steps of them), at each coarser level from the finer blocks it spans (at most eight).
        """
        for level in LEVELS:
            await session.execute(delete(MetricSummary).where(
                MetricSummary.trial_id == trial_id, MetricSummary.level == level,
                MetricSummary.block >= steps >> level))
        if steps < 0:
            return
        finest = LEVELS[0]
        rows = await session.execute(
            select(Metric.group, Metric.id, Metric.steps_completed, Metric.metrics)
            .where(Metric.trial_id == trial_id,
                   Metric.steps_completed >= (steps >> finest) << finest)
        )
        by_group: dict[str, list[tuple[int, int, Mapping[str, Any]]]] = {}
        for group, row_id, step, metrics in rows:
            by_group.setdefault(group, []).append((row_id, step, metrics))
        for group, group_rows in by_group.items():
            blocks = summarize(group_rows, levels=(finest,))
            await self._save_summaries(session, trial_id, group, blocks.values())
        for finer, level in zip(LEVELS, LEVELS[1:], strict=False):
            spanned = await session.execute(
                select(MetricSummary.__table__).where(
                    MetricSummary.trial_id == trial_id, MetricSummary.level == finer,
                    MetricSummary.block >= (steps >> level) << (level - finer)))
            by_group_blocks: dict[str, list[Block]] = {}
            for row in spanned.mappings():
                by_group_blocks.setdefault(row["group_name"], []).append(Block.from_row(row))
            for group, fine in by_group_blocks.items():
                await self._save_summaries(
                    session, trial_id, group, coarsen(fine, level).values())

    # -- checkpoints ------------------------------------------------------------------------

    async def add_checkpoint(
        self,
        *,
        uuid: str,
        trial_id: int,
        experiment_id: int,
        allocation_id: str | None,
        state: str,
        steps_completed: int,
        resources: dict[str, int],
        metadata: dict[str, Any],
        storage: dict[str, Any],
        report_time: dt.datetime | None = None,
    ) -> Checkpoint:
        """Record a checkpoint; its size is the sum of its resources' sizes.

        Raises:
            StoreConflict: the uuid is taken.
            NotFound: no such trial or experiment.
        """
        checkpoint = Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=experiment_id,
            allocation_id=allocation_id,
            state=_plain(state),
            steps_completed=steps_completed,
            report_time=_plain(report_time or utcnow()),
            resources=resources,
            meta=metadata,
            size=sum(int(v) for v in resources.values()),
            storage=storage,
        )
        async with self._writing() as session:
            session.add(checkpoint)
        return checkpoint

    async def get_checkpoint(self, uuid: str) -> Checkpoint | None:
        """The checkpoint with this uuid."""
        async with self._reading() as session:
            return await session.get(Checkpoint, uuid)

    async def list_checkpoints(
        self,
        *,
        experiment_id: int | None = None,
        trial_id: int | None = None,
        states: list[str] | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints matching every filter given, newest first."""
        where: list[ColumnElement[bool]] = []
        if experiment_id is not None:
            where.append(Checkpoint.experiment_id == experiment_id)
        if trial_id is not None:
            where.append(Checkpoint.trial_id == trial_id)
        if states is not None:
            where.append(Checkpoint.state.in_([_plain(s) for s in states]))
        stmt = (
            select(Checkpoint)
            .where(*where)
            .order_by(
                Checkpoint.report_time.desc(), Checkpoint.steps_completed.desc(), Checkpoint.uuid
            )
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_checkpoint(self, uuid: str, **fields: Any) -> Checkpoint:
        """Set columns of a checkpoint (``state``, ``meta``, ...).

        Raises:
            NotFound: no such checkpoint.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Checkpoint, uuid, fields)

    # -- logs -------------------------------------------------------------------------------

    async def add_logs(self, rows: list[dict[str, Any]]) -> int:
        """Add log lines in one statement.

        Args:
            rows: ``{"trial_id" or "task_id", "allocation_id", "timestamp", "rank", "stdtype",
                "message"}``; ``timestamp`` defaults to now, the others to ``None``.

        Returns:
            The number of lines added.
        """
        if not rows:
            return 0
        now = utcnow()
        params = [
            {
                "trial_id": row.get("trial_id"),
                "task_id": row.get("task_id"),
                "allocation_id": row.get("allocation_id"),
                "timestamp": _plain(row.get("timestamp") or now),
                "rank": row.get("rank"),
                "stdtype": row["stdtype"],
                "message": row["message"],
            }
            for row in rows
        ]
        async with self._writing() as session:
            result = await session.execute(insert(TaskLog).returning(TaskLog.id), params)
            return len(result.all())

    async def get_logs(
        self, trial_id: int, *, after_id: int = 0, limit: int = 1000
    ) -> list[TaskLog]:
        """A trial's log lines with id greater than ``after_id``, ascending, at most ``limit``."""
        stmt = (
            select(TaskLog)
            .where(TaskLog.trial_id == trial_id, TaskLog.id > after_id)
            .order_by(TaskLog.id)
            .limit(limit)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def get_task_logs(
        self, task_id: int, *, after_id: int = 0, limit: int = 1000
    ) -> list[TaskLog]:
        """A task's log lines with id greater than ``after_id``, ascending, at most ``limit``."""
        stmt = (
            select(TaskLog)
            .where(TaskLog.task_id == task_id, TaskLog.id > after_id)
            .order_by(TaskLog.id)
            .limit(limit)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    # -- usage ------------------------------------------------------------------------------

    async def slot_hours_by_user(self, now: dt.datetime) -> dict[str, float]:
        """How many slot-hours each user's trials and tasks have held: the sum, over every
        allocation that started, of ``slots × ((ended_at, or now while it runs) − started_at)``.

        Args:
            now: where allocations still running are counted up to.

        Returns:
            ``{username: slot-hours}`` for the users with any usage.
        """
        columns = (User.username, Allocation.slots, Allocation.started_at, Allocation.ended_at)
        of_trials = (
            select(*columns)
            .select_from(Allocation)
            .join(Trial, Allocation.trial_id == Trial.id)
            .join(Experiment, Trial.experiment_id == Experiment.id)
            .join(User, Experiment.owner_id == User.id)
        )
        of_tasks = (
            select(*columns)
            .select_from(Allocation)
            .join(Task, Allocation.task_id == Task.id)
            .join(User, Task.owner_id == User.id)
        )
        now = _plain(now)
        hours: dict[str, float] = {}
        # Summed here rather than in SQL: SQLite and PostgreSQL subtract timestamps in ways
        # that have no common expression.
        async with self._reading() as session:
            for stmt in (of_trials, of_tasks):
                for username, slots, started, ended in await session.execute(stmt):
                    if started is None:  # never started: it held nothing
                        continue
                    held = max(((ended or now) - started).total_seconds(), 0.0)
                    hours[username] = hours.get(username, 0.0) + slots * held / 3600.0
        return hours
