"""Metric chunks: a batch of a trial's metric rows of one group, packed into one database row.

A trial reports metrics in batches of hundreds of rows. Storing each row as its own database
row (a JSON document, an index entry, a foreign key) costs the database tens of microseconds
per row; storing the batch as one row of packed columns costs it about as much as one row.
A :class:`Pack` is that batch: the rows' steps, and their metrics as one list per metric name
when every row has the same names (the common case), else as one dict per row.

Every row keeps an id of its own, which streams resume from and charts' summaries point at:
row ``i`` of chunk ``c`` is ``c << ROW_BITS | i``, so ids grow with the chunks. Rows carried
over from the row-per-row layout, and the rows left in a chunk that a rollback cut, keep the
ids they had: the pack lists them (:attr:`Pack.ids`).

Pure: bytes in, rows out; the store reads and writes the chunks.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import math
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from det_hub import nonfinite

#: Bits of a row id that number the row within its chunk.
ROW_BITS = 20
#: The most rows one chunk holds; a larger batch is stored as several chunks.
MAX_CHUNK_ROWS = 1 << ROW_BITS

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def chunk_row_ids(chunk_id: int, count: int) -> range:
    """The ids of the rows of a chunk that lists none of its own."""
    base = chunk_id << ROW_BITS
    return range(base, base + count)


def chunk_of(row_id: int) -> int:
    """The chunk a row id was given by (for rows whose chunk lists no ids)."""
    return row_id >> ROW_BITS


@dataclass(slots=True, eq=False)
class MetricRow:
    """One reported row of metrics (training, validation or another group) of a trial."""

    id: int
    trial_id: int
    group: str
    steps_completed: int
    report_time: dt.datetime
    metrics: dict[str, Any]
    #: The trial's run that reported the row (see ``Trial.run_id``).
    trial_run: int


def to_micros(time: dt.datetime) -> int:
    if time.tzinfo is None:
        time = time.replace(tzinfo=dt.timezone.utc)
    return (time - _EPOCH) // dt.timedelta(microseconds=1)


def _time(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


def plain_numbers(values: list[Any]) -> bool:
    """Whether ``values`` holds only finite numbers, checked without a Python-level loop in
    the common case: a sum of numbers is finite when each one is (an overflow to infinity
    only sends the column the slow way)."""
    try:
        total = sum(values)
    except TypeError:
        return False
    return type(total) in (int, float) and math.isfinite(total)


def _stored(values: list[Any]) -> list[Any]:
    """A column as it is stored: NaN and infinities as Determined's strings
    (:mod:`det_hub.nonfinite`), since JSON has no token for them."""
    return values if plain_numbers(values) else nonfinite.encode(values)


@dataclass(slots=True, eq=False)
class Pack:
    """A batch of rows of one group of a trial, packed (see the module's docstring).

    Exactly one of ``columns`` and ``rows`` is set.
    """

    steps: list[int]
    #: Every row's metrics, one list per name, when every row has the same names.
    columns: dict[str, list[Any]] | None = None
    #: Each row's metrics, when the rows' names differ.
    rows: list[dict[str, Any]] | None = None
    #: Each row's report time in microseconds since the epoch, when the rows gave their own;
    #: otherwise every row has its chunk's.
    times: list[int] | None = None
    #: Each row's id, when they are not the chunk's own (see the module's docstring).
    ids: list[int] | None = None

    def __len__(self) -> int:
        return len(self.steps)

    @classmethod
    def of_rows(cls, rows: Sequence[Mapping[str, Any]]) -> Pack:
        """Pack rows ``{"steps_completed", "metrics", "report_time"?}`` (a time or None)."""
        steps = [int(r["steps_completed"]) for r in rows]
        metrics = [r["metrics"] for r in rows]
        times = [r.get("report_time") for r in rows]
        pack = cls.of_metrics(steps, metrics)
        if any(t is not None for t in times):
            now = to_micros(dt.datetime.now(dt.timezone.utc))
            pack.times = [now if t is None else to_micros(t) for t in times]
        return pack

    @classmethod
    def of_metrics(cls, steps: list[int], metrics: Sequence[Mapping[str, Any]]) -> Pack:
        """Pack rows given as their steps and their metrics dicts."""
        names = list(metrics[0]) if metrics else []
        if all(len(m) == len(names) and all(n in m for n in names) for m in metrics):
            return cls(steps, columns={n: _stored([m[n] for m in metrics]) for n in names})
        return cls(steps, rows=[nonfinite.encode(dict(m)) for m in metrics])

    @classmethod
    def of_columns(cls, steps: list[int], columns: dict[str, list[Any]]) -> Pack:
        """Pack rows given as columns, each as long as ``steps``."""
        return cls(steps, columns={n: _stored(v) for n, v in columns.items()})

    # -- reading ---------------------------------------------------------------------------

    def row_metrics(self, index: int) -> dict[str, Any]:
        """The metrics of row ``index``."""
        if self.rows is not None:
            return self.rows[index]
        assert self.columns is not None
        return {n: v[index] for n, v in self.columns.items()}

    def all_metrics(self) -> list[dict[str, Any]]:
        """Every row's metrics, in order."""
        if self.rows is not None:
            return self.rows
        assert self.columns is not None
        names = list(self.columns)
        return [dict(zip(names, values, strict=True))
                for values in zip(*self.columns.values(), strict=True)] if names \
            else [{} for _ in self.steps]

    def names(self) -> list[str]:
        """The metric names of the pack, in order of first appearance."""
        if self.columns is not None:
            return list(self.columns)
        assert self.rows is not None
        return list(dict.fromkeys(n for r in self.rows for n in r))

    def values(self, name: str) -> list[Any] | None:
        """Each row's value of ``name`` (None where a row lacks it); None when no row has it."""
        if self.columns is not None:
            return self.columns.get(name)
        assert self.rows is not None
        if not any(name in r for r in self.rows):
            return None
        return [r.get(name) for r in self.rows]

    def row_ids(self, chunk_id: int) -> Sequence[int]:
        """The ids of the pack's rows, stored as chunk ``chunk_id``."""
        return self.ids if self.ids is not None else chunk_row_ids(chunk_id, len(self.steps))

    def report_times(self, chunk_time: dt.datetime) -> list[dt.datetime]:
        """Each row's report time: its own when it gave one, else the chunk's."""
        if self.times is None:
            return [chunk_time] * len(self.steps)
        return [_time(t) for t in self.times]

    def part(self, start: int, stop: int) -> Pack:
        """Rows ``start`` to ``stop`` (the whole pack when that is all of it)."""
        if start == 0 and stop >= len(self.steps):
            return self
        cut = slice(start, stop)
        return Pack(
            self.steps[cut],
            columns=None if self.columns is None
            else {n: v[cut] for n, v in self.columns.items()},
            rows=None if self.rows is None else self.rows[cut],
            times=None if self.times is None else self.times[cut],
            ids=None if self.ids is None else self.ids[cut],
        )

    def select(self, keep: Iterable[int], chunk_id: int) -> Pack:
        """The rows at indices ``keep``, with the ids they had in chunk ``chunk_id``."""
        indices = list(keep)
        ids = self.row_ids(chunk_id)
        return Pack(
            [self.steps[i] for i in indices],
            columns=None if self.columns is None
            else {n: [v[i] for i in indices] for n, v in self.columns.items()},
            rows=None if self.rows is None else [self.rows[i] for i in indices],
            times=None if self.times is None else [self.times[i] for i in indices],
            ids=[ids[i] for i in indices],
        )

    def metric_rows(self, chunk_id: int, trial_id: int, group: str, chunk_time: dt.datetime,
                    trial_run: int) -> Iterator[MetricRow]:
        """The pack's rows as :class:`MetricRow`, stored as chunk ``chunk_id``."""
        return map(MetricRow, self.row_ids(chunk_id), [trial_id] * len(self.steps),
                   [group] * len(self.steps), self.steps, self.report_times(chunk_time),
                   self.all_metrics(), [trial_run] * len(self.steps))

    # -- bytes -----------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The pack as its chunk's ``payload``: compact JSON (whole numbers past 64 bits,
        which orjson does not write, through :mod:`json`)."""
        doc: dict[str, Any] = {"s": self.steps}
        if self.columns is not None:
            doc["c"] = self.columns
        else:
            doc["r"] = self.rows
        if self.times is not None:
            doc["t"] = self.times
        if self.ids is not None:
            doc["i"] = self.ids
        try:
            return orjson.dumps(doc)
        except orjson.JSONEncodeError:
            return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes) -> Pack:
        """The inverse of :meth:`encode`."""
        doc = nonfinite.fast_loads(payload)
        return cls(doc["s"], columns=doc.get("c"), rows=doc.get("r"), times=doc.get("t"),
                   ids=doc.get("i"))


@dataclass(slots=True)
class MetricColumns:
    """A group's rows as columns (see :meth:`Store.get_metric_columns`)."""

    ids: list[int]
    steps: list[int]
    #: Each metric's values, one per row; None where a row lacks the metric.
    metrics: dict[str, list[Any]]

    @classmethod
    def join(cls, packs: Iterable[tuple[int, Pack]], names: list[str] | None,
             after: int | None) -> MetricColumns:
        """The rows of chunks ``(chunk id, pack)`` of one group, ascending by step then id,
        with the metrics ``names`` (all when None), past step ``after`` when given."""
        ordered = sorted(packs, key=lambda p: (min(p[1].steps), p[0]))
        if names is None:
            names = list(dict.fromkeys(n for _, pack in ordered for n in pack.names()))
        ids: list[int] = []
        steps: list[int] = []
        metrics: dict[str, list[Any]] = {n: [] for n in names}
        for chunk_id, pack in ordered:
            if after is not None and min(pack.steps) <= after:
                pack = pack.select((i for i, s in enumerate(pack.steps) if s > after), chunk_id)
            ids.extend(pack.row_ids(chunk_id))
            steps.extend(pack.steps)
            for name, column in metrics.items():
                values = pack.values(name)
                column.extend(values if values is not None else [None] * len(pack))
        keys = list(zip(steps, ids, strict=True))
        if not all(map(operator.le, keys, keys[1:])):
            # Chunks whose steps overlap or run backwards: put the rows in order.
            order = sorted(range(len(keys)), key=keys.__getitem__)
            ids, steps = [ids[i] for i in order], [steps[i] for i in order]
            metrics = {n: [v[i] for i in order] for n, v in metrics.items()}
        return cls(ids, steps, metrics)

    def json(self) -> dict[str, Any]:
        return {"ids": self.ids, "steps": self.steps, "metrics": self.metrics}


class StoredChunk(Protocol):
    """What :func:`chunk_rows` reads of a ``metric_chunks`` row."""

    id: int
    trial_id: int
    group: str
    trial_run: int
    report_time: dt.datetime
    payload: bytes


def chunk_rows(chunk: StoredChunk, keep: Callable[[int], bool] | None = None, *,
               ids: Collection[int] | None = None) -> list[MetricRow]:
    """A stored chunk's rows, in the order reported: all of them, or those whose step
    ``keep`` accepts and whose id is in ``ids``. Only the rows answered are made: a chart of
    a long curve reads a few rows out of each of many chunks."""
    return _rows_of(chunk, Pack.decode(chunk.payload), keep, ids)


def _rows_of(chunk: StoredChunk, pack: Pack, keep: Callable[[int], bool] | None = None,
             ids: Collection[int] | None = None) -> list[MetricRow]:
    """:func:`chunk_rows` of a chunk whose payload is already unpacked (``pack``)."""
    if keep is not None or ids is not None:
        at: Iterable[int] = range(len(pack.steps))
        if ids is not None and pack.ids is None:
            # The chunk's own ids: a row's index is its id's offset from the chunk's first.
            first = chunk.id << ROW_BITS
            at = sorted(row_id - first for row_id in ids if first <= row_id < first + len(pack))
        elif ids is not None:
            at = [i for i, row_id in enumerate(pack.ids or ()) if row_id in ids]
        if keep is not None:
            steps = pack.steps
            at = [i for i in at if keep(steps[i])]
        pack = pack.select(at, chunk.id)
    return list(pack.metric_rows(chunk.id, chunk.trial_id, chunk.group, chunk.report_time,
                                 chunk.trial_run))


def by_step(rows: list[MetricRow]) -> list[MetricRow]:
    """``rows`` sorted in place ascending by step, then id; returned."""
    rows.sort(key=lambda r: (r.steps_completed, r.id))
    return rows


def thin(rows: Sequence[MetricRow], max_points: int) -> list[MetricRow]:
    """Every k-th of a group's ascending rows, ``k = ceil(n / max_points)``, and the last."""
    if len(rows) <= max_points:
        return list(rows)
    k = -(-len(rows) // max_points)
    kept = list(rows[::k])
    if (len(rows) - 1) % k:
        kept.append(rows[-1])
    return kept


def thin_chunks(chunks: Iterable[StoredChunk], max_points: int,
                after: int | None = None) -> list[MetricRow]:
    """:func:`thin` of the rows of a group's chunks (past step ``after``), ascending by step
    then id. Where each chunk's rows ascend and the chunks follow one another (a trial
    reporting as it trains), the rows kept are found from the steps alone and only they are
    made: a million rows are thinned in a fraction of the time of making them all."""
    packs = sorted(((c, Pack.decode(c.payload)) for c in chunks),
                   key=lambda cp: (min(cp[1].steps, default=0), cp[0].id))
    spans: list[tuple[StoredChunk, Pack, int]] = []  # a chunk, its rows, its first row past after
    previous: tuple[int, int] | None = None
    for chunk, pack in packs:
        steps, ids = pack.steps, pack.row_ids(chunk.id)
        start = 0 if after is None else bisect.bisect_right(steps, after)
        if start == len(steps):
            continue
        if not (ascending(steps) and (pack.ids is None or ascending(pack.ids))) or (
                previous is not None and previous >= (steps[start], ids[start])):
            return thin(by_step([r for c, p in packs for r in _rows_of(
                c, p, None if after is None else lambda step: step > after)]), max_points)
        spans.append((chunk, pack, start))
        previous = (steps[-1], ids[-1])
    total = sum(len(pack) - start for _, pack, start in spans)
    k = max(1, -(-total // max_points))
    wanted = sorted(set(range(0, total, k)) | ({total - 1} if total else set()))
    rows: list[MetricRow] = []
    offset, j = 0, 0  # the rows before this chunk's, and the next of ``wanted``
    for chunk, pack, start in spans:
        end = offset + len(pack) - start
        at = []
        while j < len(wanted) and wanted[j] < end:
            at.append(start + wanted[j] - offset)
            j += 1
        rows.extend(pack.select(at, chunk.id).metric_rows(
            chunk.id, chunk.trial_id, chunk.group, chunk.report_time, chunk.trial_run))
        offset = end
    return rows


def ascending(values: Sequence[int]) -> bool:
    """Whether ``values`` never go down."""
    return all(map(operator.le, values, values[1:]))


__all__ = [
    "MAX_CHUNK_ROWS",
    "ROW_BITS",
    "MetricColumns",
    "MetricRow",
    "Pack",
    "StoredChunk",
    "ascending",
    "by_step",
    "chunk_of",
    "chunk_row_ids",
    "chunk_rows",
    "plain_numbers",
    "thin",
    "thin_chunks",
    "to_micros",
]
