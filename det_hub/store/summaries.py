"""Block summaries of metric curves, so that a chart of a million rows reads a few thousand.

Each numeric metric of each group of a trial is cut, at several *levels*, into blocks of
``2 ** level`` consecutive steps: block ``steps_completed >> level``. A block keeps how many
values fell in it and four of them as ``(step, id, value)``: the first and the last (by step,
then row id) and the lowest and the highest. The store updates the blocks in the same
transaction that inserts the rows, and rebuilds the blocks a deletion cuts into.

The coarse levels follow a trial's rows in spans of :data:`ROLLUP_SPAN` steps. Every row is
in its finest block as soon as it is stored; the coarser blocks hold the rows below the
trial's mark (``Trial.summaries_below``, a multiple of the span, so that no block straddles
it), and a row stored below the mark goes into them too. Once a trial's rows reach a span
past the one after its mark, the store rolls the finest blocks between the mark and the
start of the span before the newest up into the coarse levels (:func:`roll_up`) and moves the
mark there, under the trial's row lock, which every write of its rows also takes. A batch of
100 steps thus touches 2 or 3 blocks of each metric where it touched 6 or 7 (a coarse block
changed with nearly every batch), and a read of a coarse level makes the blocks at and past
the mark, at most two spans of finest blocks, from those (:func:`coarsen`).

To draw a long curve, :func:`candidates` picks the finest level that has at most
:data:`MAX_BLOCKS_PER_POINT` blocks per wanted point, joins neighbouring blocks into at most
``max_points`` buckets of whole blocks, and answers each bucket's lowest and highest row plus
the curve's first and last: exactly the per-bucket extremes of the rows themselves, because
a bucket never splits a block. LTTB then runs over those candidates (:mod:`det_hub.lttb`).

Booleans, non-finite numbers and everything that is not a number are left out, as a chart
would leave them out.

This module is pure: rows in, blocks out; the store does the reading and writing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .packing import ascending

#: Block sizes ``2 ** level`` in steps. Eight times apart, so that some level has between
#: ``MAX_BLOCKS_PER_POINT / 8`` and ``MAX_BLOCKS_PER_POINT`` blocks per point for any curve up
#: to about 2**18 steps per point; sparser curves read more blocks, never wrong ones. The
#: finest is 64 steps: each block is a row written as metrics arrive, and a batch of 500
#: steps then touches about a dozen per metric. Curves of up to
#: :data:`RAW_ROWS_PER_POINT` rows per point are drawn from their rows instead.
LEVELS = (6, 9, 12, 15, 18)

#: The steps of a span of rows whose coarse blocks are made at once (see the module): the
#: coarsest block, so that a mark at a multiple of it splits no block of any level.
ROLLUP_SPAN = 1 << LEVELS[-1]

#: How many blocks per wanted point a chart may read at most (when a level allows it).
MAX_BLOCKS_PER_POINT = 16

#: Up to this many rows per wanted point, a chart reads the rows themselves (one number
#: each, extracted by the database): that many are read about as fast as the blocks, and the
#: finest level would have fewer blocks than points.
RAW_ROWS_PER_POINT = 2 ** LEVELS[0]

#: ``(step, id, value)`` of one row.
Point = tuple[int, int, float]


def drawable(value: Any) -> float | None:
    """``value`` as a float when a chart can draw it, else None (booleans are not numbers)."""
    if type(value) is float:  # the common case, first
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass
class Block:
    """The summary of one metric's values in ``[block << level, (block + 1) << level)``."""

    name: str
    level: int
    block: int
    count: int
    first: Point
    last: Point
    low: Point
    high: Point

    @classmethod
    def of(cls, name: str, level: int, point: Point) -> Block:
        return cls(name, level, point[0] >> level, 1, point, point, point, point)

    def add(self, point: Point) -> None:
        """Take one more row; on equal values the row already held stays the extreme."""
        self.count += 1
        if point[:2] < self.first[:2]:
            self.first = point
        if point[:2] > self.last[:2]:
            self.last = point
        if point[2] < self.low[2]:
            self.low = point
        if point[2] > self.high[2]:
            self.high = point

    def merge(self, other: Block) -> None:
        """Take the rows of another block of the same metric (a finer one, when coarsening)."""
        self.count += other.count
        if other.first[:2] < self.first[:2]:
            self.first = other.first
        if other.last[:2] > self.last[:2]:
            self.last = other.last
        if other.low[2] < self.low[2]:
            self.low = other.low
        if other.high[2] > self.high[2]:
            self.high = other.high

    def row(self) -> dict[str, Any]:
        """The columns of this block's ``metric_summaries`` row, less trial and group."""
        row: dict[str, Any] = {
            "name": self.name, "level": self.level, "block": self.block, "count": self.count,
        }
        for corner, (step, row_id, value) in (
            ("first", self.first), ("last", self.last), ("min", self.low), ("max", self.high)
        ):
            row[f"{corner}_step"], row[f"{corner}_id"], row[f"{corner}_value"] = (
                step, row_id, value)
        return row

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Block:
        """The inverse of :meth:`row`."""

        def point(corner: str) -> Point:
            return (int(row[f"{corner}_step"]), int(row[f"{corner}_id"]),
                    float(row[f"{corner}_value"]))

        return cls(row["name"], int(row["level"]), int(row["block"]), int(row["count"]),
                   point("first"), point("last"), point("min"), point("max"))


BlockKey = tuple[str, int, int]


def summarize(
    rows: Iterable[tuple[int, int, Mapping[str, Any]]],
    into: dict[BlockKey, Block] | None = None,
    *,
    levels: Iterable[int] = LEVELS,
) -> dict[BlockKey, Block]:
    """The blocks of ``(id, steps_completed, metrics)`` rows of one group, by
    ``(name, level, block)``; merged into ``into`` when given, so rows can come in batches."""
    finest, *coarser = sorted(levels)
    # Each value goes into its finest block only; coarser blocks are made of finer ones, a
    # few per batch, since a batch's steps mostly run on.
    fine: dict[BlockKey, Block] = {}
    for row_id, step, metrics in rows:
        for name, raw in metrics.items():
            value = drawable(raw)
            if value is None:
                continue
            point = (int(step), int(row_id), value)
            key = (name, finest, point[0] >> finest)
            found = fine.get(key)
            if found is None:
                fine[key] = Block.of(name, finest, point)
            else:
                found.add(point)
    return _with_coarser(fine, coarser, into)


def _finite_numbers(values: Sequence[Any]) -> bool:
    """Whether every value is a finite int or float (booleans are not numbers here)."""
    try:
        total = sum(values)
    except TypeError:
        return False
    return type(total) is float and math.isfinite(total) and bool not in map(type, values) \
        or type(total) is int and all(type(v) is int for v in values)


def _summarize_sorted(name: str, level: int, ids: Sequence[int], steps: Sequence[int],
                      values: Sequence[float], into: dict[BlockKey, Block]) -> None:
    """The blocks of one column of finite numbers whose rows ascend by step and id: each
    block is a slice, summarised by builtins rather than a row at a time."""
    lo, n = 0, len(steps)
    while lo < n:
        number = steps[lo] >> level
        hi = bisect.bisect_left(steps, (number + 1) << level, lo, n)
        part = values[lo:hi]
        low = lo + part.index(min(part))
        high = lo + part.index(max(part))
        block = Block(name, level, number, hi - lo, (steps[lo], ids[lo], float(values[lo])),
                      (steps[hi - 1], ids[hi - 1], float(values[hi - 1])),
                      (steps[low], ids[low], float(values[low])),
                      (steps[high], ids[high], float(values[high])))
        found = into.get((name, level, number))
        if found is None:
            into[(name, level, number)] = block
        else:
            found.merge(block)
        lo = hi


def _with_coarser(fine: dict[BlockKey, Block], coarser: Iterable[int],
                  into: dict[BlockKey, Block] | None) -> dict[BlockKey, Block]:
    """The finest blocks of some rows and the coarser ones made of them, merged into
    ``into`` when given."""
    blocks = {} if into is None else into
    for level_blocks in (fine, *(coarsen(fine.values(), level) for level in coarser)):
        for key, block in level_blocks.items():
            found = blocks.get(key)
            if found is None:
                blocks[key] = block
            else:
                found.merge(block)
    return blocks


def summarize_columns(
    ids: Sequence[int],
    steps: Sequence[int],
    columns: Mapping[str, Sequence[Any]],
    into: dict[BlockKey, Block] | None = None,
    *,
    levels: Iterable[int] = LEVELS,
) -> dict[BlockKey, Block]:
    """:func:`summarize` for rows given as columns: each metric's values, one per row, beside
    the rows' ids and steps. A column is read in one pass, a block at a time, without a dict
    per row."""
    finest, *coarser = sorted(levels)
    fine: dict[BlockKey, Block] = {}
    ascending_rows = ascending(steps) and (isinstance(ids, range) or ascending(ids))
    for name, values in columns.items():
        if ascending_rows and _finite_numbers(values):
            _summarize_sorted(name, finest, ids, steps, values, fine)
            continue
        block: Block | None = None
        for row_id, step, raw in zip(ids, steps, values, strict=True):
            # Finite floats first: x - x is 0.0 for them and NaN for NaN and infinities.
            value = raw if type(raw) is float and raw - raw == 0.0 else drawable(raw)
            if value is None:
                continue
            point = (step, row_id, value)
            number = step >> finest
            if block is None or block.block != number:
                block = fine.get((name, finest, number))
                if block is None:
                    block = fine[(name, finest, number)] = Block.of(name, finest, point)
                    continue
            block.add(point)
    return _with_coarser(fine, coarser, into)


def coarsen(blocks: Iterable[Block], level: int) -> dict[BlockKey, Block]:
    """Blocks at a coarser ``level`` made of finer blocks of the same group, by key."""
    coarse: dict[BlockKey, Block] = {}
    for fine in blocks:
        key = (fine.name, level, fine.first[0] >> level)
        found = coarse.get(key)
        if found is None:
            coarse[key] = Block(fine.name, level, key[2], fine.count, fine.first, fine.last,
                                fine.low, fine.high)
        else:
            found.merge(fine)
    return coarse


def rollup_mark(step: int) -> int:
    """Where a trial's mark goes once its rows reach ``step``: the start of the span before
    the span holding ``step`` (never below 0). Rows may still arrive a little behind the
    newest; those past the mark are in no coarse block yet."""
    return max(0, ((step // ROLLUP_SPAN) - 1) * ROLLUP_SPAN)


def is_summarised_eagerly(block: Block, mark: int) -> bool:
    """Whether a block of newly stored rows is written as they are stored: every finest block,
    and the coarser ones below the trial's ``mark``."""
    return block.level == LEVELS[0] or block.block << block.level < mark


def roll_up(fine: Iterable[Block]) -> list[Block]:
    """The blocks of every coarser level made of finest blocks (of one group of a trial)."""
    finest = list(fine)
    return [block for level in LEVELS[1:] for block in coarsen(finest, level).values()]


def choose_level(blocks_per_level: Mapping[int, int], max_points: int) -> int | None:
    """The finest level with at most ``MAX_BLOCKS_PER_POINT * max_points`` blocks, or the
    coarsest there is when none has so few; None when there are no blocks at all."""
    present = sorted(level for level, n in blocks_per_level.items() if n > 0)
    if not present:
        return None
    for level in present:
        if blocks_per_level[level] <= MAX_BLOCKS_PER_POINT * max_points:
            return level
    return present[-1]


def candidates(blocks: Iterable[Block], max_points: int) -> list[Point]:
    """The rows LTTB chooses from: the first and the last row of the curve and the lowest and
    highest row of each of at most ``max_points`` buckets of whole blocks, ascending by step
    then id, each once.

    Args:
        blocks: the blocks of one level of one curve, in any order.
        max_points: how many points the chart will keep (>= 1).
    """
    ordered = sorted(blocks, key=lambda b: b.block)
    if not ordered:
        return []
    per_bucket = -(-len(ordered) // max_points)
    # Blocks are disjoint step ranges, so the curve starts in the first and ends in the last.
    chosen = {ordered[0].first[1]: ordered[0].first, ordered[-1].last[1]: ordered[-1].last}
    for start in range(0, len(ordered), per_bucket):
        bucket = ordered[start : start + per_bucket]
        low = min((b.low for b in bucket), key=lambda p: p[2])
        high = max((b.high for b in bucket), key=lambda p: p[2])
        chosen[low[1]] = low
        chosen[high[1]] = high
    return sorted(chosen.values(), key=lambda p: p[:2])


__all__ = [
    "LEVELS",
    "MAX_BLOCKS_PER_POINT",
    "RAW_ROWS_PER_POINT",
    "ROLLUP_SPAN",
    "Block",
    "Point",
    "candidates",
    "choose_level",
    "coarsen",
    "drawable",
    "is_summarised_eagerly",
    "roll_up",
    "rollup_mark",
    "summarize",
    "summarize_columns",
]
