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
    insert,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from det_hub.lttb import lttb_indices

from ._common import Queries
from .models import MetricChunk, MetricSummary, Trial
from .packing import MetricRow, by_step, chunk_of, chunk_rows, thin
from .summaries import (
    LEVELS,
    MAX_BLOCKS_PER_POINT,
    RAW_ROWS_PER_POINT,
    ROLLUP_SPAN,
    Block,
    Point,
    candidates,
    choose_level,
    coarsen,
    drawable,
    roll_up,
    summarize,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection, Select
    from sqlalchemy.ext.asyncio import AsyncSession


#: The ``metric_summaries`` table (a Table; typed as any FromClause).
_TABLE: Any = MetricSummary.__table__


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


def _finest_between(trial_id: int, start: int, end: int) -> Select[Any]:
    """The trial's finest blocks (every group and metric) from step ``start`` to before
    ``end``."""
    finest = LEVELS[0]
    return select(MetricSummary.__table__).where(
        MetricSummary.trial_id == trial_id, MetricSummary.level == finest,
        MetricSummary.block >= start >> finest, MetricSummary.block < end >> finest)


def _rolled_up_rows(trial_id: int, fine: Iterable[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """The coarse ``metric_summaries`` rows made of finest ones (:func:`.summaries.roll_up`)."""
    by_group: dict[str, list[Block]] = {}
    for row in fine:
        by_group.setdefault(row["group_name"], []).append(Block.from_row(row))
    return [row for group, blocks in by_group.items()
            for row in summary_rows(trial_id, group, roll_up(blocks))]


def roll_up_in(conn: Connection, trial_id: int, below: int) -> None:
    """:meth:`MetricSummaryQueries._roll_up` on a synchronous connection in a transaction
    (SQLite's writer, whose transactions run one at a time)."""
    mark = conn.scalar(select(Trial.summaries_below).where(Trial.id == trial_id))
    if mark is None or below <= mark:
        return
    rows = _rolled_up_rows(
        trial_id, conn.execute(_finest_between(trial_id, mark, below)).mappings())
    if rows:
        conn.execute(insert(_TABLE), rows)
    conn.execute(update(Trial).where(Trial.id == trial_id).values(summaries_below=below))


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
        """Make the summaries match a trial whose rows past ``steps`` were just deleted, in
        the transaction that deleted them (which holds the trial's row).

        Finest blocks that reach past ``steps`` go, and the one that also held rows up to
        ``steps`` is rebuilt from those rows (fewer than ``2 ** level`` steps of them). Where
        ``steps`` is below the trial's mark, the mark comes down to the span holding
        ``steps`` and the coarse blocks from there on go: what is left of their rows is in
        the finest blocks, to be rolled up again (see :mod:`.summaries`).
        """
        finest = LEVELS[0]
        await session.execute(delete(MetricSummary).where(
            MetricSummary.trial_id == trial_id, MetricSummary.level == finest,
            MetricSummary.block >= steps >> finest))
        mark = int(await session.scalar(
            select(Trial.summaries_below).where(Trial.id == trial_id)) or 0)
        if steps < mark:
            below = max(0, steps // ROLLUP_SPAN * ROLLUP_SPAN)
            await session.execute(delete(MetricSummary).where(
                MetricSummary.trial_id == trial_id, MetricSummary.level > finest,
                # A coarse block from ``below`` on starts at or past it (none straddles it).
                (MetricSummary.block.op("<<")(MetricSummary.level)) >= below))
            await session.execute(update(Trial).where(Trial.id == trial_id)
                                  .values(summaries_below=below))
        if steps < 0:
            return
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

    async def _roll_up(self, session: AsyncSession, trial_id: int, below: int) -> None:
        """Move the trial's mark up to ``below``, rolling its finest blocks from the mark up
        to there into the coarse levels (see :mod:`.summaries`), in ``session``'s
        transaction. The trial's row is locked first, so that no write of its rows is
        between its read of the mark and its commit, and the blocks are read after: each
        row stored before is in them, and each stored after sees the new mark."""
        mark = await session.scalar(
            select(Trial.summaries_below).where(Trial.id == trial_id).with_for_update())
        if mark is None or below <= mark:
            return
        fine = (await session.execute(_finest_between(trial_id, mark, below))).mappings()
        rows = _rolled_up_rows(trial_id, fine)
        if rows:
            # An insert, not a merge: no coarse block from the mark on exists, and one that
            # did would hold rows twice; its key would be refused, loudly.
            await session.execute(insert(_TABLE), rows)
        await session.execute(update(Trial).where(Trial.id == trial_id)
                              .values(summaries_below=below))

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
            found.extend(r for c in read for r in chunk_rows(c, ids=kept))
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

        async def stored(level: int) -> int:
            return int(await session.scalar(
                select(func.count()).select_from(MetricSummary)
                .where(*series, MetricSummary.level == level, starting_past(level))) or 0)

        finest = LEVELS[0]
        per_level = {finest: await stored(finest)}
        # The coarse blocks at and past the trial's mark, made of its finest ones there.
        made: dict[int, list[Block]] = {}
        if per_level[finest] > MAX_BLOCKS_PER_POINT * max_points:
            # Too many to draw from: a coarse level is read, whose blocks from the mark on
            # are not stored yet (see .summaries).
            mark = int(await session.scalar(
                select(Trial.summaries_below).where(Trial.id == trial_id)) or 0)
            tail = [Block.from_row(row) for row in (await session.execute(
                select(MetricSummary.__table__).where(
                    *series, MetricSummary.level == finest, starting_past(finest),
                    MetricSummary.block >= mark >> finest))).mappings()]
            for level in LEVELS[1:]:
                made[level] = [b for b in coarsen(tail, level).values()
                               if after is None or b.block > after >> level]
                per_level[level] = await stored(level) + len(made[level])
        chosen = choose_level(per_level, max_points)
        blocks: list[Block] = []
        if chosen is not None:
            blocks = [Block.from_row(row) for row in (await session.execute(
                select(MetricSummary.__table__)
                .where(*series, MetricSummary.level == chosen, starting_past(chosen))
            )).mappings()]
            blocks.extend(made.get(chosen, ()))
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
