"""Metrics: storing the batches trials report, each as a chunk of ``metric_chunks``
(:mod:`.packing`) with its block summaries, exactly once by its key.

:class:`MetricWriteQueries` is mixed into :class:`det_hub.store.Store`; the reads are
:mod:`.metrics`, the summaries :mod:`.metric_summaries`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import (
    BigInteger,
    BindParameter,
    Executable,
    Integer,
    Select,
    String,
    bindparam,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import sqlite

from ._common import Queries, check_fields, keyed_update, plain
from .chunk_sql import ENDED, chunk_statement, direct_chunk_sql
from .columns import UTCDateTime, utcnow
from .errors import NotFound
from .metric_summaries import roll_up_in, summary_rows, upsert_statement
from .metrics import chunk_insert
from .models import Allocation, MetricBatch, Trial
from .packing import MAX_CHUNK_ROWS, MetricRow, Pack
from .summaries import (
    LEVELS,
    is_summarised_eagerly,
    rollup_mark,
    summarize,
    summarize_columns,
)
from .trials import SUMMARY_TRIAL_FIELDS

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncSession

    from .summaries import Block


@dataclass(slots=True)
class StoredMetrics:
    """A batch as stored: its chunks (id and pack) and what every row shares."""

    trial_id: int
    group: str
    trial_run: int
    report_time: dt.datetime
    chunks: list[tuple[int, Pack]]
    #: The trial's summary mark as the batch was stored (``Trial.summaries_below``).
    summaries_below: int = 0

    def __len__(self) -> int:
        return sum(len(pack) for _, pack in self.chunks)

    def rows(self) -> list[MetricRow]:
        """The stored rows, in the order given."""
        return [row for chunk_id, pack in self.chunks
                for row in pack.metric_rows(chunk_id, self.trial_id, self.group,
                                            self.report_time, self.trial_run)]


#: Trials whose summary marks a store keeps at most (all are forgotten past it).
_MARKS_KEPT = 4096

def _token_trial(token_hash: str | BindParameter[str], *columns: Any) -> Select[Any]:
    """``columns`` of the trial whose open allocation (not ended) holds the token."""
    return (select(*columns).join(Allocation, Allocation.trial_id == Trial.id)
            .where(Allocation.token_hash == token_hash, Allocation.ended_at.is_(None)))


@dataclass(frozen=True)
class Repeat:
    """A batch whose key was stored before: what its first copy stored."""

    rows: int


@dataclass(frozen=True)
class IngestTarget:
    """The trial an allocation's token reports for (:meth:`MetricWriteQueries.ingest_target`)."""

    trial_id: int
    experiment_id: int
    state: str


@dataclass(frozen=True)
class StoredNotice:
    """A stored chunk as :meth:`MetricWriteQueries.insert_pack` announces it, in the text
    ``"<trial> <chunk> <last step> <group>"`` (the group last, so that a name holding spaces
    reads back whole): the trial, the chunk's id, its rows' greatest step and their group."""

    trial_id: int
    chunk_id: int
    group: str
    last_step: int

    @classmethod
    def parse(cls, payload: str) -> StoredNotice:
        """Read a notice's text.

        Raises:
            ValueError: Not a notice.
        """
        trial, chunk, last, group = payload.split(" ", 3)
        return cls(int(trial), int(chunk), group, int(last))


class MetricWriteQueries(Queries):
    """Storing metric batches (see :class:`Store`)."""

    if TYPE_CHECKING:
        _summary_marks: dict[int, int]

        async def _save_summaries(self, session: AsyncSession, trial_id: int, group: str,
                                  blocks: Iterable[Block]) -> None: ...

        async def _roll_up(self, session: AsyncSession, trial_id: int, below: int) -> None: ...

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
        stored = await self.insert_metrics(trial_id, group, rows)
        return stored if isinstance(stored, int) else len(stored)

    async def insert_metrics(
        self, trial_id: int, group: str, rows: list[dict[str, Any]], *, key: str | None = None
    ) -> list[dict[str, Any]] | int:
        """:meth:`add_metrics`, answering the stored rows: ``{"id", "trial_id", "group",
        "steps_completed", "metrics", "report_time", "trial_run"}`` in the order given, once
        committed; or, for a repeated ``key`` (see :meth:`insert_pack`), the number of rows
        the first copy stored."""
        if not rows:
            return []
        stored = await self.insert_pack(trial_id, group, Pack.of_rows(rows), key=key)
        if isinstance(stored, int):
            return stored
        return [{"id": r.id, "trial_id": r.trial_id, "group": r.group,
                 "steps_completed": r.steps_completed, "metrics": r.metrics,
                 "report_time": r.report_time, "trial_run": r.trial_run}
                for r in stored.rows()]

    async def insert_pack(self, trial_id: int, group: str, pack: Pack, *,
                          key: str | None = None,
                          steps_completed: int | None = None,
                          notify: str | None = None,
                          token_hash: str | None = None,
                          trial_fields: Mapping[str, Any] | None = None) -> StoredMetrics | int:
        """Store a packed batch of one group of a trial as one chunk (several past
        ``MAX_CHUNK_ROWS`` rows) with its block summaries, in one transaction.

        Args:
            key: the batch's key, unique within the trial. A batch whose key was stored before
                is a repeat: nothing is written, and the answer is the number of rows the
                first copy stored. The key commits with the rows, so of two copies arriving
                together exactly one is stored.
            steps_completed: raise the trial's ``steps_completed`` to this (never lower it)
                in the same transaction: a report costs one commit, not two.
            notify: on PostgreSQL, the channel to announce each stored chunk on
                (:class:`StoredNotice`), by the statement that stores it: listeners hear of
                batches in the order they were committed, and never of one rolled back.
            token_hash: store only while an open allocation of the trial holds this token
                and the trial has not ended (checked by the statement that stores).
            trial_fields: columns of the trial that the batch sets (a validation's best and
                latest), set only where the batch is no repeat: on SQLite in the same
                transaction, on PostgreSQL (whose batch is one statement of its own) right
                after it.

        Raises:
            NotFound: no such trial (or, with ``token_hash``, none it may report for).
            ValueError: a name in ``trial_fields`` that is not a column of the trial's, or
                its key (nothing is stored).
        """
        fields = {k: plain(v) for k, v in (trial_fields or {}).items()}
        check_fields(Trial, fields)
        now = utcnow()
        parts = [pack.part(i, i + MAX_CHUNK_ROWS) for i in range(0, len(pack), MAX_CHUNK_ROWS)]
        stored = StoredMetrics(trial_id, group, 0, now, [])
        if self.dialect == "postgresql" and len(parts) == 1 and parts[0].ids is None:
            # One chunk with its summaries is one statement, atomic by itself.
            inserted = await self._insert_alone_pg(
                stored, parts[0], key=key, steps_completed=steps_completed, notify=notify,
                token_hash=token_hash)
            if isinstance(inserted, Repeat):
                return inserted.rows
            stored.chunks.append((inserted, parts[0]))
            await self._roll_up_after(stored, max(parts[0].steps))
            if fields:
                await self._set_trial_fields(trial_id, fields)
            return stored
        if self.dialect == "sqlite":
            repeat = await self._write_in_thread(functools.partial(
                _insert_parts_sqlite, stored, parts, key=key, rows=len(pack),
                steps_completed=steps_completed, token_hash=token_hash, trial_fields=fields))
            if isinstance(repeat, Repeat):
                return repeat.rows
            if repeat is not None:  # the trial's experiment, whose summary the fields change
                self._experiment_changed(repeat)
            return stored
        async with self._writing() as session:
            for n, part in enumerate(parts):
                inserted = await self._insert_chunk_pg(
                    session, stored, part, key=key if n == 0 else None, rows=len(pack),
                    steps_completed=steps_completed, notify=notify, token_hash=token_hash)
                if isinstance(inserted, Repeat):
                    return inserted.rows
                stored.chunks.append((inserted, part))
                await self._save_summaries(session, trial_id, group, _eager(
                    inserted, part, stored.summaries_below))
        await self._roll_up_after(stored, max(pack.steps))
        if fields:
            await self._set_trial_fields(trial_id, fields)
        return stored

    async def _roll_up_after(self, stored: StoredMetrics, last_step: int) -> None:
        """PostgreSQL, once a batch reaching ``last_step`` is committed: roll the trial's
        summaries up where its rows have gone two spans past its mark (see
        :mod:`.summaries`), in a transaction of its own, which takes the trial's row for
        update with no other lock of the batch's held."""
        below = rollup_mark(last_step)
        if below > stored.summaries_below:
            async with self._writing() as session:
                await self._roll_up(session, stored.trial_id, below)

    async def _set_trial_fields(self, trial_id: int, fields: Mapping[str, Any]) -> None:
        """PostgreSQL: a stored batch's ``trial_fields`` (see :meth:`insert_pack`)."""
        trial = await self._update(Trial, trial_id, fields)
        if SUMMARY_TRIAL_FIELDS.intersection(fields):
            self._experiment_changed(trial.experiment_id)

    async def _insert_alone_pg(self, stored: StoredMetrics, part: Pack, *, key: str | None,
                               steps_completed: int | None, notify: str | None,
                               token_hash: str | None) -> int | Repeat:
        """PostgreSQL, a batch of one chunk whose rows have no ids of their own: claim the
        key, raise the trial's steps, insert the chunk, announce it and merge its block
        summaries (row ids relative to the chunk) in one statement that commits by itself
        (:func:`.chunk_sql.chunk_sql`), on the driver's own connections (:mod:`.direct`).
        The chunk's id (and ``stored.trial_run`` set), or for a repeated key what its first
        copy stored.

        Raises:
            NotFound: no such trial, or none ``token_hash`` may report for.
        """
        params = _chunk_params(stored, part, key=key, rows=len(part),
                               steps_completed=steps_completed, notify=notify,
                               token_hash=token_hash)
        # Rows mostly arrive past the trial's mark: their coarse blocks are made and sent
        # only where the mark its last batch read lies past them, or the statement answers
        # that it does now.
        seen = self._summary_marks.get(stored.trial_id, 0)
        for finest_only in (True, False) if min(part.steps) >= seen else (False,):
            levels = LEVELS[:1] if finest_only else LEVELS
            params["summaries"] = orjson.dumps(
                [block.row() for block in _summaries(0, part, levels).values()]).decode()
            sql, names = direct_chunk_sql(key is not None, steps_completed is not None,
                                          notify is not None, token_hash is not None,
                                          finest_only)
            answer = await self._write_direct(sql, [params[n] for n in names])
            assert answer is not None, "the chunk statement answers one row"
            claimed, chunk_id, trial_run, below, needs_coarse = answer
            if not needs_coarse:
                break
        if below is not None:
            if len(self._summary_marks) >= _MARKS_KEPT:
                self._summary_marks.clear()
            self._summary_marks[stored.trial_id] = int(below)
        if chunk_id is not None:
            stored.trial_run, stored.summaries_below = int(trial_run), int(below)
            return int(chunk_id)
        if not claimed and key is not None:
            # Not claimed: stored before under this key, or refused (then no key is there).
            first = await self._write_direct(_FIRST_COPY_ROWS, [stored.trial_id, key])
            if first is not None:
                return Repeat(int(first[0]))
        raise _refused(stored.trial_id, token_hash)

    async def _insert_chunk_pg(self, session: AsyncSession, stored: StoredMetrics, part: Pack,
                               *, key: str | None, rows: int, steps_completed: int | None,
                               notify: str | None, token_hash: str | None) -> int | Repeat:
        """PostgreSQL, in a session's transaction: claim the key, raise the trial's steps,
        insert the chunk and announce it in one statement (see :func:`.chunk_sql.chunk_sql`); the
        chunk's id (and ``stored.trial_run`` set), or for a repeated key what its first copy
        stored.

        Raises:
            NotFound: no such trial, or none ``token_hash`` may report for.
        """
        params = _chunk_params(stored, part, key=key, rows=rows,
                               steps_completed=steps_completed, notify=notify,
                               token_hash=token_hash)
        statement = chunk_statement(key is not None, steps_completed is not None,
                                    notify is not None, token_hash is not None)
        claimed, chunk_id, trial_run, below, _ = (await session.execute(statement, params)).one()
        if chunk_id is not None:
            stored.trial_run, stored.summaries_below = int(trial_run), int(below)
            return int(chunk_id)
        if not claimed and key is not None:
            # Not claimed: stored before under this key, or refused (then no key is there).
            first = await self._first_copy_rows(session, stored.trial_id, key)
            if first is not None:
                return Repeat(first)
        raise _refused(stored.trial_id, token_hash)

    async def ingest_target(self, token_hash: str) -> IngestTarget | None:
        """The trial an open allocation's token may report metrics for (its allocation not
        ended), with the trial's experiment and state; None for any other token."""
        async with self._reading() as session:
            row = (await session.execute(_token_trial(
                token_hash, Trial.id, Trial.experiment_id, Trial.state))).first()
        return None if row is None else IngestTarget(int(row[0]), int(row[1]), str(row[2]))

    async def _first_copy_rows(self, session: AsyncSession, trial_id: int,
                               key: str) -> int | None:
        """How many rows the batch stored first under ``key`` holds; None when no batch was
        stored under it."""
        stored = await session.scalar(_batch_statements().first_copy,
                                      {"v_trial_id": trial_id, "v_key": key})
        return None if stored is None else int(stored)


#: How many rows the batch stored first under a key holds (``$1``: trial, ``$2``: key).
_FIRST_COPY_ROWS = "SELECT rows FROM metric_batches WHERE trial_id = $1 AND key = $2"


def _chunk_params(stored: StoredMetrics, part: Pack, *, key: str | None, rows: int,
                  steps_completed: int | None, notify: str | None,
                  token_hash: str | None) -> dict[str, Any]:
    """The parameters of :func:`.chunk_sql.chunk_sql` but the summaries'."""
    ids = part.ids
    return {"trial_id": stored.trial_id, "group_name": stored.group, "count": len(part),
            "first_step": min(part.steps), "last_step": max(part.steps),
            "first_id": None if ids is None else min(ids),
            "last_id": None if ids is None else max(ids),
            "report_time": stored.report_time, "payload": part.encode(),
            "key": key, "rows": rows, "steps_completed": steps_completed,
            "channel": notify, "token_hash": token_hash}


def _refused(trial_id: int, token_hash: str | None) -> NotFound:
    """What a batch the chunk statement stored nothing of, and no earlier copy of, raises."""
    return NotFound(f"trial {trial_id} not found" if token_hash is None else
                    f"trial {trial_id} not found, ended, or not this token's")


@dataclass(frozen=True)
class _BatchStatements:
    """The statements of :func:`_insert_parts_sqlite`, made once with bound parameters;
    ``first_copy`` serves PostgreSQL's transactions too."""

    token_trial: Executable
    claim: Executable
    first_copy: Executable
    raise_steps: Executable
    mark: Executable


@functools.cache
def _batch_statements() -> _BatchStatements:
    # Core statements on the tables, their values bound as v_<name>: a Connection runs each
    # as one statement with its parameters.
    batches: Any = MetricBatch.__table__
    trials: Any = Trial.__table__
    trial = bindparam("v_trial_id", type_=BigInteger)
    key = bindparam("v_key", type_=String)
    steps = bindparam("v_steps", type_=BigInteger)
    return _BatchStatements(
        token_trial=_token_trial(bindparam("v_token_hash", type_=String), Trial.id)
        .where(Trial.state.not_in(ENDED)),
        # The key is claimed only for a trial that exists, as on PostgreSQL.
        claim=sqlite.insert(batches).from_select(
            ["trial_id", "key", "rows", "created_at"],
            select(trial, key, bindparam("v_rows", type_=Integer),
                   bindparam("v_created_at", type_=UTCDateTime()))
            .where(trials.c.id == trial))
        .on_conflict_do_nothing(index_elements=["trial_id", "key"])
        .returning(batches.c.rows),
        first_copy=select(batches.c.rows).where(batches.c.trial_id == trial,
                                                batches.c.key == key),
        # Never lower.
        raise_steps=update(trials).where(trials.c.id == trial, or_(
            trials.c.steps_completed.is_(None), trials.c.steps_completed < steps))
        .values(steps_completed=steps),
        mark=select(trials.c.summaries_below).where(trials.c.id == trial))


def _insert_parts_sqlite(stored: StoredMetrics, parts: list[Pack], conn: Connection, *,
                         key: str | None, rows: int, steps_completed: int | None,
                         token_hash: str | None,
                         trial_fields: Mapping[str, Any]) -> Repeat | int | None:
    """SQLite, in the writer thread's transaction (:meth:`Store._write_in_thread`): what
    :meth:`MetricWriteQueries.insert_pack` stores, a statement at a time; the chunks go to
    ``stored.chunks``. None once stored, or the trial's experiment id where
    ``trial_fields`` that change its summary were set too; for a repeated key what its first
    copy stored.

    Raises:
        NotFound: no such trial, or none ``token_hash`` may report for.
    """
    trial_id = stored.trial_id
    statements = _batch_statements()
    if token_hash is not None and conn.scalar(
            statements.token_trial, {"v_token_hash": token_hash}) != trial_id:
        raise _refused(trial_id, token_hash)
    if key is not None:
        batch = {"v_trial_id": trial_id, "v_key": key}
        if conn.execute(statements.claim, {**batch, "v_rows": rows,
                                           "v_created_at": stored.report_time}).first() is None:
            first = conn.scalar(statements.first_copy, batch)
            if first is None:
                raise _refused(trial_id, token_hash)
            return Repeat(int(first))
    stored.summaries_below = int(conn.scalar(statements.mark, {"v_trial_id": trial_id}) or 0)
    for part in parts:
        inserted = conn.execute(
            *chunk_insert(trial_id, stored.group, part, stored.report_time)).first()
        if inserted is None:
            raise _refused(trial_id, token_hash)
        chunk_id, stored.trial_run = int(inserted[0]), int(inserted[1])
        stored.chunks.append((chunk_id, part))
        summaries = summary_rows(trial_id, stored.group, _eager(
            chunk_id, part, stored.summaries_below))
        if summaries:
            conn.execute(upsert_statement("sqlite"), summaries)
    below = rollup_mark(max(step for part in parts for step in part.steps))
    if below > stored.summaries_below:
        roll_up_in(conn, trial_id, below)
    if steps_completed is not None:
        conn.execute(statements.raise_steps,
                     {"v_trial_id": trial_id, "v_steps": steps_completed})
    if trial_fields:
        experiment_id = conn.execute(*keyed_update(Trial, trial_id, trial_fields)).one() \
            ._mapping[Trial.__table__.c.experiment_id]
        if SUMMARY_TRIAL_FIELDS.intersection(trial_fields):
            return int(experiment_id)
    return None


def _eager(chunk_id: int, pack: Pack, mark: int) -> list[Block]:
    """The blocks of a newly stored pack that are written with it (see
    :func:`.summaries.is_summarised_eagerly`): the coarse ones are made only for rows below
    the trial's ``mark``."""
    levels = LEVELS if min(pack.steps) < mark else LEVELS[:1]
    return [block for block in _summaries(chunk_id, pack, levels).values()
            if is_summarised_eagerly(block, mark)]


def _summaries(chunk_id: int, pack: Pack, levels: Sequence[int] = LEVELS) -> dict[Any, Block]:
    """The block summaries, at ``levels``, of a pack stored as chunk ``chunk_id``."""
    ids = pack.row_ids(chunk_id)
    if pack.columns is not None:
        return summarize_columns(ids, pack.steps, pack.columns, levels=levels)
    assert pack.rows is not None
    return summarize(zip(ids, pack.steps, pack.rows, strict=True), levels=levels)


__all__ = ["IngestTarget", "MetricWriteQueries", "Repeat", "StoredMetrics", "StoredNotice"]
