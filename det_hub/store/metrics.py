"""Metrics: reading the rows trials report, packed in ``metric_chunks``, and rolling them back.

:class:`MetricQueries` is mixed into :class:`det_hub.store.Store`. A reported batch is stored as
one chunk (:mod:`.packing`) by :mod:`.metric_writes`; every write keeps the metrics' block
summaries in step in the same transaction, and a downsampled read may use them; both are in
:mod:`.metric_summaries`.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Executable,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)

from ._common import Queries, plain
from .columns import utcnow
from .errors import NotFound
from .models import MetricChunk, RolledBackMetric, Trial
from .packing import (
    ROW_BITS,
    MetricColumns,
    MetricRow,
    Pack,
    by_step,
    chunk_rows,
    thin_chunks,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from .summaries import Block

#: How many chunks one statement reads at most while a stream catches up.
_CHUNKS_PER_READ = 64


def _first_id() -> ColumnElement[int]:
    """A chunk's least row id, whether its pack lists ids or not."""
    return func.coalesce(MetricChunk.first_id, MetricChunk.id * (1 << ROW_BITS))


def _last_id() -> ColumnElement[int]:
    """A chunk's greatest row id, whether its pack lists ids or not."""
    return func.coalesce(MetricChunk.last_id,
                         MetricChunk.id * (1 << ROW_BITS) + MetricChunk.count - 1)


#: The columns :func:`chunk_insert` fills; each value is bound as ``v_<column>``.
_CHUNK_COLUMNS = ("trial_id", "group_name", "trial_run", "count", "first_step", "last_step",
                  "first_id", "last_id", "report_time", "payload")


@functools.cache
def _chunk_insert_statement(own_run: bool) -> Executable:
    """:func:`chunk_insert`'s statement, made once (a Core insert, so that a session runs it
    with its parameters as one statement): with ``own_run`` the run is a parameter, else the
    trial's current one."""
    table: Any = MetricChunk.__table__
    values: list[Any] = [
        Trial.run_id if name == "trial_run" and not own_run
        else bindparam(f"v_{name}", type_=table.c[name].type)
        for name in _CHUNK_COLUMNS]
    return insert(table).from_select(
        list(_CHUNK_COLUMNS),
        select(*values).where(Trial.id == bindparam("v_trial_id")),
    ).returning(table.c.id, table.c.trial_run)


def chunk_insert(trial_id: int, group: str, pack: Pack, report_time: dt.datetime,
                 trial_run: int | None = None) -> tuple[Executable, dict[str, Any]]:
    """The insert of one chunk, of the trial's current run unless ``trial_run`` is given,
    answering its id and run, and its parameters; one statement, the trial's run read by the
    insert itself, and no row for a trial that does not exist."""
    ids = pack.ids
    values = {"trial_id": trial_id, "group_name": group, "trial_run": trial_run,
              "count": len(pack), "first_step": min(pack.steps), "last_step": max(pack.steps),
              "first_id": None if ids is None else min(ids),
              "last_id": None if ids is None else max(ids),
              "report_time": report_time, "payload": pack.encode()}
    if trial_run is None:
        del values["trial_run"]
    return (_chunk_insert_statement(trial_run is not None),
            {f"v_{name}": value for name, value in values.items()})


class MetricQueries(Queries):
    """Queries of the ``metric_chunks`` table (see :class:`Store`)."""

    if TYPE_CHECKING:
        async def _save_summaries(self, session: AsyncSession, trial_id: int, group: str,
                                  blocks: Iterable[Block]) -> None: ...

        async def _cut_summaries(self, session: AsyncSession, trial_id: int,
                                 steps: int) -> None: ...

        async def _downsampled(
            self,
            session: AsyncSession,
            trial_id: int,
            group: str,
            chunks: list[tuple[int, int, int | None, int | None]],
            count: int,
            max_points: int,
            metric: str,
            after: int | None,
        ) -> list[MetricRow]: ...

    async def chunk_rows(self, chunk_ids: Iterable[int]) -> list[MetricRow]:
        """The rows of the chunks with these ids, by id (those that no longer exist, rolled
        back since, are left out)."""
        ids = sorted(set(chunk_ids))
        async with self._reading() as session:
            chunks = list(await session.scalars(
                select(MetricChunk).where(MetricChunk.id.in_(ids)).order_by(_first_id())))
        return [row for chunk in chunks for row in chunk_rows(chunk)]

    async def _insert_chunk(self, session: AsyncSession, trial_id: int, group: str,
                            pack: Pack, report_time: dt.datetime,
                            trial_run: int | None = None) -> tuple[int, int]:
        """Insert one chunk, of the trial's current run unless ``trial_run`` is given; its id
        and run (:func:`chunk_insert`).

        Raises:
            NotFound: no such trial.
        """
        row = (await session.execute(
            *chunk_insert(trial_id, group, pack, report_time, trial_run))).first()
        if row is None:
            raise NotFound(f"trial {trial_id} not found")
        return int(row[0]), int(row[1])

    async def experiment_metrics_after(
        self, experiment_id: int, after_id: int, limit: int
    ) -> list[MetricRow]:
        """The metric rows of an experiment's trials with an id above ``after_id``, by id,
        at most ``limit``: what a stream of the experiment's metrics resumes from. Chunks'
        id ranges never overlap, so reading chunks by their first id reads rows by id."""
        trial_ids = select(Trial.id).where(Trial.experiment_id == experiment_id)
        rows: list[MetricRow] = []
        async with self._reading() as session:
            while len(rows) < limit:
                chunks = list(await session.scalars(
                    select(MetricChunk)
                    .where(MetricChunk.trial_id.in_(trial_ids), _last_id() > after_id)
                    .order_by(_first_id()).limit(_CHUNKS_PER_READ)))
                for chunk in chunks:
                    rows.extend(r for r in chunk_rows(chunk) if r.id > after_id)
                if len(chunks) < _CHUNKS_PER_READ:
                    break
                after_id = max(after_id, *(r.id for r in rows[-1:]))
        rows.sort(key=lambda r: r.id)
        return rows[:limit]

    async def _chunks(self, session: AsyncSession, trial_id: int, group: str | None,
                      after: int | None, *more: ColumnElement[bool]) -> list[MetricChunk]:
        """A trial's chunks (of one group) holding rows past step ``after``."""
        where = [MetricChunk.trial_id == trial_id, *more]
        if group is not None:
            where.append(MetricChunk.group == group)
        if after is not None:
            where.append(MetricChunk.last_step > after)
        return list(await session.scalars(select(MetricChunk).where(*where)))

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
                a million points costs about ``max_points`` rows.
            after: only rows with ``steps_completed`` greater than this.
            metric: with ``max_points``, the metric whose curve downsampling keeps: each large
                group is reduced to at most ``max_points`` rows by Largest-Triangle-Three-Buckets
                over ``(steps_completed, metric)`` (see :mod:`det_hub.lttb`). Up to
                ``RAW_ROWS_PER_POINT * max_points`` rows, LTTB sees every row; above, it sees
                the lowest and highest row of each of at most ``max_points`` step ranges plus
                the first and last row, read from the metric's block summaries
                (:mod:`det_hub.store.summaries`), and only the chunks holding the rows it keeps
                are read. Spikes and both ends survive either way. Rows without a finite number
                for ``metric`` (booleans included) are left out; a group where no row has one is
                thinned as without ``metric``. Without ``metric``, every k-th row is kept with
                ``k = ceil(n / max_points)``, plus the last row.
        """
        if max_points is not None and max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")
        keep = None if after is None else (lambda step: step > after)
        async with self._reading() as session:
            if max_points is None:
                return by_step([r for c in await self._chunks(session, trial_id, group, after)
                                 for r in chunk_rows(c, keep)])
            if self.dialect == "postgresql":
                # The chunks' sizes and the chunks read must be the same, or the "last" row
                # could be missed while a trial is still reporting.
                await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            where = [MetricChunk.trial_id == trial_id]
            if group is not None:
                where.append(MetricChunk.group == group)
            if after is not None:
                where.append(MetricChunk.last_step > after)
            heads = await session.execute(
                select(MetricChunk.group, MetricChunk.id, MetricChunk.count,
                       MetricChunk.first_id, MetricChunk.last_id).where(*where))
            groups: dict[str, list[tuple[int, int, int | None, int | None]]] = {}
            for g, chunk_id, count, first, last in heads:
                groups.setdefault(g, []).append((chunk_id, count, first, last))
            rows: list[MetricRow] = []
            for g, chunks in groups.items():
                count = sum(c[1] for c in chunks)
                if metric is not None and count > max_points:
                    rows.extend(await self._downsampled(
                        session, trial_id, g, chunks, count, max_points, metric, after))
                    continue
                rows.extend(thin_chunks(await self._chunks(session, trial_id, g, after),
                                        max_points, after))
        return by_step(rows)

    async def get_metric_columns(
        self,
        trial_id: int,
        *,
        group: str | None = None,
        names: Iterable[str] | None = None,
        after: int | None = None,
    ) -> dict[str, MetricColumns]:
        """A trial's metrics as columns, by group: each row's id and step, ascending by step
        then id, and each metric's values (None where a row lacks the metric). The chunks'
        columns are joined as they are stored, without a dict per row: a curve of 100,000
        points is read in milliseconds.

        Args:
            group: only this group; all groups by default.
            names: only these metrics; all by default.
            after: only rows with ``steps_completed`` greater than this.
        """
        wanted = None if names is None else list(dict.fromkeys(names))
        async with self._reading() as session:
            chunks = await self._chunks(session, trial_id, group, after)
        by_group: dict[str, list[tuple[int, Pack]]] = {}
        for chunk in chunks:
            by_group.setdefault(chunk.group, []).append((chunk.id, Pack.decode(chunk.payload)))
        return {g: MetricColumns.join(packs, wanted, after) for g, packs in by_group.items()}

    async def metrics_at(self, trial_id: int, group: str, steps_completed: int) -> MetricRow | None:
        """The row of a group reported at exactly ``steps_completed`` (the latest on a tie)."""
        async with self._reading() as session:
            chunks = await self._chunks(session, trial_id, group, steps_completed - 1,
                                        MetricChunk.first_step <= steps_completed)
        rows = [r for c in chunks for r in chunk_rows(c, lambda s: s == steps_completed)]
        return max(rows, key=lambda r: r.id, default=None)

    async def latest_metrics(self, trial_id: int, group: str) -> MetricRow | None:
        """The row with the most ``steps_completed`` (the latest reported on a tie)."""
        async with self._reading() as session:
            last = await session.scalar(
                select(func.max(MetricChunk.last_step))
                .where(MetricChunk.trial_id == trial_id, MetricChunk.group == group))
            if last is None:
                return None
            chunks = await self._chunks(session, trial_id, group, last - 1)
        rows = [r for c in chunks for r in chunk_rows(c, lambda s: s == last)]
        return max(rows, key=lambda r: r.id, default=None)

    async def start_trial_run(self, trial_id: int, from_steps: int) -> tuple[int, int]:
        """Number a new run of a trial, which trains on from ``from_steps`` (its checkpoint's
        step count, 0 without one), and roll back what earlier runs reported past that point:
        those rows move to ``rolled_back_metrics``, out of every read, and the summaries are
        cut to match; all in one transaction. A chunk holding rows on both sides keeps the
        earlier ones, with their ids.

        Returns:
            The new run's number, and how many rows were rolled back.

        Raises:
            NotFound: no such trial.
        """
        async with self._writing() as session:
            run = await session.scalar(
                update(Trial).where(Trial.id == trial_id)
                .values(run_id=Trial.run_id + 1).returning(Trial.run_id))
            if run is None:
                raise NotFound(f"trial {trial_id} not found")
            now = utcnow()
            moved: list[dict[str, Any]] = []
            for chunk in await self._chunks(session, trial_id, None, from_steps):
                pack = Pack.decode(chunk.payload)
                rows = list(pack.metric_rows(chunk.id, trial_id, chunk.group,
                                             plain(chunk.report_time), chunk.trial_run))
                moved.extend({"id": r.id, "trial_id": trial_id, "group": r.group,
                              "steps_completed": r.steps_completed,
                              "report_time": r.report_time, "metrics": r.metrics,
                              "trial_run": r.trial_run, "rolled_back_by_run": run,
                              "rolled_back_at": now}
                             for r in rows if r.steps_completed > from_steps)
                await session.execute(delete(MetricChunk).where(MetricChunk.id == chunk.id))
                kept = [i for i, r in enumerate(rows) if r.steps_completed <= from_steps]
                if kept:
                    await self._insert_chunk(session, trial_id, chunk.group,
                                             pack.select(kept, chunk.id),
                                             plain(chunk.report_time), chunk.trial_run)
            if moved:
                await session.execute(insert(RolledBackMetric), moved)
                await self._cut_summaries(session, trial_id, from_steps)
        return int(run), len(moved)

    async def rolled_back_metrics(self, trial_id: int) -> list[RolledBackMetric]:
        """The rows of a trial that later runs rolled back, oldest first (for audit)."""
        async with self._reading() as session:
            return list(await session.scalars(
                select(RolledBackMetric).where(RolledBackMetric.trial_id == trial_id)
                .order_by(RolledBackMetric.id)))


__all__ = ["MetricQueries"]
