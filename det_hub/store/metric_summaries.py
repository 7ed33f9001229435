"""The metrics' block summaries in the database: queries of the ``metric_summaries`` table,
and the downsampling of a metric's curve by LTTB that reads them (and the ``metrics`` rows).

:class:`MetricSummaryQueries` is mixed into :class:`det_hub.store.Store`; its methods serve
:class:`~det_hub.store.metrics.MetricQueries`. What a block holds, and how a curve's candidates
are chosen from blocks, is :mod:`.summaries` (pure), and LTTB is :mod:`det_hub.lttb`; this
module reads and writes the blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Executable,
    and_,
    bindparam,
    case,
    cast,
    delete,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from det_hub.lttb import lttb_indices

from ._common import Queries
from .models import Metric, MetricRow, MetricSummary
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

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


def _upsert_statement(dialect: str) -> Executable:
    """The statement :meth:`MetricSummaryQueries._save_summaries` runs: an insert of blocks
    that, for a block already stored, adds the counts and keeps the first, last, lowest and
    highest row of both.

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


class MetricSummaryQueries(Queries):
    """Upkeep of the ``metric_summaries`` table, and downsampled reads of the ``metrics``
    table (see :meth:`Store.get_metrics`)."""

    #: The dialect's upsert of blocks, made on first use (:func:`_upsert_statement`).
    _summary_upsert: Executable | None = None

    # -- upkeep, in the transactions that write metrics -------------------------------------

    async def _save_summaries(
        self, session: AsyncSession, trial_id: int, group: str, blocks: Iterable[Block]
    ) -> None:
        """Merge blocks into the stored summaries: an upsert that keeps the extremes."""
        rows = [{"trial_id": trial_id, "group_name": group, **b.row()} for b in blocks]
        if not rows:
            return
        if self._summary_upsert is None:
            self._summary_upsert = _upsert_statement(self.dialect)
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

    # -- downsampled reads ------------------------------------------------------------------

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


__all__ = ["MetricSummaryQueries"]
