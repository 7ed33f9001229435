"""Metrics: queries of the ``metrics`` table, reading and writing the rows trials report.

:class:`MetricQueries` is mixed into :class:`det_hub.store.Store`. Every write keeps the
metrics' block summaries in step in the same transaction, and a downsampled read may use them;
both are in :mod:`.metric_summaries`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    and_,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from ._common import Queries, plain
from .columns import UTCDateTime, utcnow
from .errors import NotFound
from .models import Metric, MetricBatch, MetricRow, RolledBackMetric, Trial
from .summaries import summarize

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.ext.asyncio import AsyncSession

    from .summaries import Block


class MetricQueries(Queries):
    """Queries of the ``metrics`` table (see :class:`Store`)."""

    if TYPE_CHECKING:
        async def _save_summaries(self, session: AsyncSession, trial_id: int, group: str,
                                  blocks: Iterable[Block]) -> None: ...

        async def _cut_summaries(self, session: AsyncSession, trial_id: int,
                                 steps: int) -> None: ...

        async def _lttb_metrics(
            self,
            session: AsyncSession,
            where: list[ColumnElement[bool]],
            counts: dict[str, tuple[int, int, int]],
            max_points: int,
            metric: str,
            trial_id: int,
            after: int | None,
        ) -> list[MetricRow]: ...

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
        "steps_completed", "metrics", "report_time"}`` in the order given, once committed.

        Args:
            key: the batch's key, unique within the trial. A batch whose key was stored before
                is a repeat: nothing is written, and the answer is the number of rows the
                first copy stored. The key commits with the rows, so of two copies arriving
                together exactly one is stored.
        """
        if not rows:
            return []
        now = utcnow()
        params = [
            {
                "trial_id": trial_id,
                "group": group,
                "steps_completed": int(row["steps_completed"]),
                "metrics": row["metrics"],
                "report_time": plain(row.get("report_time") or now),
            }
            for row in rows
        ]
        async with self._writing() as session:
            if key is not None:
                first = await self._claim_batch_key(session, trial_id, key, len(params))
                if first is not None:
                    return first
            run = await session.scalar(select(Trial.run_id).where(Trial.id == trial_id))
            if run is None:
                raise NotFound(f"trial {trial_id} not found")
            # RETURNING makes SQLAlchemy send multi-row VALUES batches ("insertmanyvalues") on
            # both databases instead of one statement per row. The run is one number for the
            # whole batch: written into the statement, not bound once per row.
            stmt = (insert(Metric).values(trial_run=literal_column(str(int(run))))
                    .returning(Metric.id, sort_by_parameter_order=True))
            result = await session.execute(stmt, params)
            ids = list(result.scalars())
            blocks = summarize(
                (row_id, p["steps_completed"], p["metrics"])
                for row_id, p in zip(ids, params, strict=True)
            )
            await self._save_summaries(session, trial_id, group, blocks.values())
        return [{"id": row_id, **p, "trial_run": run}
                for row_id, p in zip(ids, params, strict=True)]

    async def _claim_batch_key(
        self, session: AsyncSession, trial_id: int, key: str, rows: int
    ) -> int | None:
        """Record ``key`` as stored in this transaction; if it already was, the number of rows
        its first copy stored. On PostgreSQL a copy in flight in another transaction makes
        this wait for that one's outcome."""
        dialect_insert = pg.insert if self.dialect == "postgresql" else sqlite.insert
        claim = (
            dialect_insert(MetricBatch)
            .values(trial_id=trial_id, key=key, rows=rows, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["trial_id", "key"])
            .returning(MetricBatch.rows)
        )
        if (await session.execute(claim)).first() is not None:
            return None
        stored = await session.scalar(
            select(MetricBatch.rows).where(MetricBatch.trial_id == trial_id,
                                           MetricBatch.key == key))
        return int(stored or 0)

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
                over ``(steps_completed, metric)`` (see :mod:`det_hub.lttb`). Up to
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

    async def start_trial_run(self, trial_id: int, from_steps: int) -> tuple[int, int]:
        """Number a new run of a trial, which trains on from ``from_steps`` (its checkpoint's
        step count, 0 without one), and roll back what earlier runs reported past that point:
        those rows move to ``rolled_back_metrics``, out of every read, and the summaries are
        cut to match; all in one transaction.

        Returns:
            The new run's number, and how many rows were rolled back.

        Raises:
            NotFound: no such trial.
        """
        past = (Metric.trial_id == trial_id, Metric.steps_completed > from_steps)
        async with self._writing() as session:
            run = await session.scalar(
                update(Trial).where(Trial.id == trial_id)
                .values(run_id=Trial.run_id + 1).returning(Trial.run_id))
            if run is None:
                raise NotFound(f"trial {trial_id} not found")
            moved = await session.execute(insert(RolledBackMetric).from_select(
                ["id", "trial_id", "group_name", "steps_completed", "report_time", "metrics",
                 "trial_run", "rolled_back_by_run", "rolled_back_at"],
                select(Metric.id, Metric.trial_id, Metric.group, Metric.steps_completed,
                       Metric.report_time, Metric.metrics, Metric.trial_run,
                       literal(run, Integer), literal(utcnow(), UTCDateTime()))
                .where(*past)).returning(RolledBackMetric.id))
            count = len(moved.all())
            if count:
                await session.execute(delete(Metric).where(*past))
                await self._cut_summaries(session, trial_id, from_steps)
        return int(run), count

    async def rolled_back_metrics(self, trial_id: int) -> list[RolledBackMetric]:
        """The rows of a trial that later runs rolled back, oldest first (for audit)."""
        async with self._reading() as session:
            return list(await session.scalars(
                select(RolledBackMetric).where(RolledBackMetric.trial_id == trial_id)
                .order_by(RolledBackMetric.id)))

__all__ = ["MetricQueries"]
