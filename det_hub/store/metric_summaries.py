"""The metrics' block summaries in the database: queries of the ``metric_summaries`` table,
and the downsampling of a metric's curve by LTTB that reads them (and the metric chunks).

:class:`MetricSummaryQueries` is mixed into :class:`det_hub.store.Store`; its methods serve
:class:`~det_hub.store.metrics.MetricQueries`. What a block holds, and how a curve's candidates
are chosen from blocks, is :mod:`.summaries` (pure), and LTTB is :mod:`det_hub.lttb`; this
module reads and writes the blocks.
"""

from __future__ import annotations

import bisect
import functools
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
from .models import MetricChunk, MetricSummary
from .packing import MetricRow, by_step, chunk_of, chunk_rows, thin
from .summaries import (
    LEVELS,
    RAW_ROWS_PER_POINT,
    Block,
    Point,
    candidates,
    choose_level,
    coarsen,
    drawable,
    summarize,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


def summary_rows(trial_id: int, group: str, blocks: Iterable[Block]) -> list[dict[str, Any]]:
    """The ``metric_summaries`` rows of a trial's blocks of one group."""
    return [{"trial_id": trial_id, "group_name": group, **b.row()} for b in blocks]


def merge_rules(old: Any, new: Any) -> dict[str, ColumnElement[Any]]:
    """How a stored block (``old``, its columns) takes in a new one of the same key
    (``new``, the upsert's ``excluded``): counts added, and the first, last, lowest and
    highest row of both kept (the earliest row by step then id for a tie, and so on)."""

    def take(corner: str, better: ColumnElement[bool]) -> dict[str, ColumnElement[Any]]:
        return {
            f"{corner}_{part}": case(
                (better, new[f"{corner}_{part}"]), else_=old[f"{corner}_{part}"])
            for part in ("step", "id", "value")
        }

    return {
        "count": old.count + new.count,
        **take("first", or_(new.first_step < old.first_step,
                            and_(new.first_step == old.first_step, new.first_id < old.first_id))),
        **take("last", or_(new.last_step > old.last_step,
                           and_(new.last_step == old.last_step, new.last_id > old.last_id))),
        **take("min", new.min_value < old.min_value),
        **take("max", new.max_value > old.max_value),
    }


@functools.cache
def upsert_statement(dialect: str) -> Executable:
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
    merged = merge_rules(old, new)
    keys = [old.trial_id, old.group_name, old.name, old.level, old.block]
    statement: Executable = upsert.on_conflict_do_update(index_elements=keys, set_=merged)
    return statement


class MetricSummaryQueries(Queries):
    """Upkeep of the ``metric_summaries`` table, and downsampled reads of the ``metrics``
    table (see :meth:`Store.get_metrics`)."""

    # -- upkeep, in the transactions that write metrics -------------------------------------

    async def _save_summaries(
        self, session: AsyncSession, trial_id: int, group: str, blocks: Iterable[Block]
    ) -> None:
        """Merge blocks into the stored summaries: an upsert that keeps the extremes."""
        rows = summary_rows(trial_id, group, blocks)
        if not rows:
            return
        if self.dialect == "postgresql":
            # One statement over arrays, one value per block in each: a batch of metrics
            # touches about a hundred blocks, and a round trip each would cost more than
            # inserting the rows did.
            columns = MetricSummary.__table__.c.keys()
            await session.execute(
                upsert_statement(self.dialect), {c: [row[c] for row in rows] for c in columns})
        else:
            await session.execute(upsert_statement(self.dialect), rows)

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
        start = (steps >> finest) << finest
        chunks = await session.scalars(
            select(MetricChunk).where(MetricChunk.trial_id == trial_id,
                                      MetricChunk.last_step >= start))
        by_group: dict[str, list[tuple[int, int, Mapping[str, Any]]]] = {}
        for chunk in chunks:
            by_group.setdefault(chunk.group, []).extend(
                (r.id, r.steps_completed, r.metrics)
                for r in chunk_rows(chunk, lambda s: s >= start))
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
    ) -> list[MetricRow]:
        """A group of :meth:`get_metrics` downsampled by LTTB on one metric (see there).

        Args:
            chunks: the group's chunks holding rows past ``after``, as ``(id, count,
                first_id, last_id)``; ``count`` their rows.

        A group of up to ``RAW_ROWS_PER_POINT * max_points`` rows is read whole and LTTB runs
        over it. A larger one is not: its candidates are the extremes of buckets of whole
        blocks from the metric's summaries (:mod:`det_hub.store.summaries`), at most
        ``2 * max_points + 2`` rows, LTTB keeps ``max_points`` of them, and only the chunks
        holding those are read.
        """
        keep = None if after is None else (lambda step: step > after)

        async def every_row() -> list[MetricRow]:
            read = await session.scalars(select(MetricChunk).where(
                MetricChunk.id.in_([c[0] for c in chunks])))
            return by_step([r for c in read for r in chunk_rows(c, keep)])

        if count <= RAW_ROWS_PER_POINT * max_points:
            rows = await every_row()
            if len(rows) <= max_points:
                return rows
            points = [(r.steps_completed, r.id, v) for r in rows
                      if (v := drawable(r.metrics.get(metric))) is not None]
            if not points:
                return thin(rows, max_points)
            kept = {points[i][1] for i in lttb_indices(
                [p[0] for p in points], [p[2] for p in points], max_points)}
            return [r for r in rows if r.id in kept]
        points = await self._summary_candidates(session, trial_id, group, metric, max_points,
                                                after)
        if not points:
            # No row of the group has the metric: thin it as without ``metric``.
            return thin(await every_row(), max_points)
        kept = {points[i][1] for i in lttb_indices(
            [p[0] for p in points], [p[2] for p in points], max_points)}
        holding = _chunks_holding(kept, chunks)
        found: list[MetricRow] = []
        # Bounded IN lists: SQLite allows at most 32766 parameters in one statement.
        for start in range(0, len(holding), 10_000):
            read = await session.scalars(select(MetricChunk).where(
                MetricChunk.id.in_(holding[start : start + 10_000])))
            found.extend(r for c in read for r in chunk_rows(c) if r.id in kept)
        return by_step(found)

    async def _summary_candidates(
        self,
        session: AsyncSession,
        trial_id: int,
        group: str,
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
            head = await session.scalars(select(MetricChunk).where(
                MetricChunk.trial_id == trial_id, MetricChunk.group == group,
                MetricChunk.last_step > after, MetricChunk.first_step < head_end))
            summarised = summarize(
                ((r.id, r.steps_completed, {metric: r.metrics.get(metric)})
                 for c in head for r in chunk_rows(c, lambda s: after < s < head_end)),
                levels=LEVELS[:1])
            blocks.extend(summarised.values())
        return candidates(blocks, max_points)


def _chunks_holding(ids: Iterable[int],
                    chunks: list[tuple[int, int, int | None, int | None]]) -> list[int]:
    """The ids of the chunks (``(id, count, first_id, last_id)``) that hold these rows."""
    own = {c[0] for c in chunks if c[2] is None}
    listed = sorted((c[2], c[3] or c[2], c[0]) for c in chunks if c[2] is not None)
    firsts = [first for first, _, _ in listed]
    holding: set[int] = set()
    for row_id in ids:
        if chunk_of(row_id) in own:
            holding.add(chunk_of(row_id))
            continue
        at = bisect.bisect_right(firsts, row_id) - 1
        if at >= 0 and row_id <= listed[at][1]:
            holding.add(listed[at][2])
    return sorted(holding)


__all__ = ["MetricSummaryQueries"]
