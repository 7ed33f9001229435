"""A metrics report as training code sends it (``POST /trials/{id}/metrics``), read and
checked into the :class:`~det_hub.store.packing.Pack` the store keeps: shared by the master's
handler and its ingest workers (:mod:`det_hub.service.ingest_worker`), which must answer the
same body the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from det_hub.service import wire
from det_hub.service.errors import BadRequest
from det_hub.store.packing import Pack, plain_numbers


def read_report(data: dict[str, Any]) -> wire.MetricBatch | wire.MetricColumns:
    """A report's JSON body checked: as columns when its ``metrics`` is an object (one list
    per metric), else as rows.

    Raises:
        BadRequest: A field that is wrong, named in the error and its details.
    """
    # The rows stay dicts, checked in one pass (bench/wire_validation.py times it).
    model = wire.MetricColumns if isinstance(data.get("metrics"), dict) else wire.MetricBatch
    return wire.parse(model, data)


#: How deep a metric's value may nest lists and objects: every row is read back, charted and
#: streamed, which a value nested hundreds deep would break.
MAX_METRIC_DEPTH = 32


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``depth`` levels deep."""
    children = (value.values() if isinstance(value, dict)
                else value if isinstance(value, list) else None)
    if children is None:
        return False
    return depth == 0 or any(_deeper_than(v, depth - 1) for v in children)


def pack_report(batch: wire.MetricBatch | wire.MetricColumns) -> Pack:
    """A reported batch packed as the store keeps it, its values checked (see
    :func:`_metric_row`)."""
    if not isinstance(batch, wire.MetricColumns):
        return Pack.of_rows([_metric_row(i, r) for i, r in enumerate(batch.metrics)])
    for name, values in batch.metrics.items():
        if plain_numbers(values):
            continue  # no list or object among them: the common column, checked in C
        for i, value in enumerate(values):
            if isinstance(value, (dict, list)) and _deeper_than(value, MAX_METRIC_DEPTH - 1):
                raise BadRequest(f"metrics.{name}[{i}]: nested deeper than {MAX_METRIC_DEPTH} "
                                 "levels")
    pack = Pack.of_columns(batch.steps, batch.metrics)
    if batch.report_times is not None:
        pack.times = [round(t * 1_000_000) for t in batch.report_times]
    return pack


def _metric_row(index: int, row: wire.ReportedMetrics) -> dict[str, Any]:
    """A reported row as the store takes it: its metrics as they came (NaN and infinities as
    Determined's strings, which is how the store keeps them), and the report time, when
    given, as a time."""
    if _deeper_than(row["metrics"], MAX_METRIC_DEPTH):
        raise BadRequest(f"metrics[{index}].metrics: nested deeper than {MAX_METRIC_DEPTH} "
                         "levels")
    out: dict[str, Any] = {"steps_completed": row["steps_completed"],
                           "metrics": row["metrics"]}
    if row.get("report_time"):
        try:
            out["report_time"] = datetime.fromisoformat(str(row["report_time"]).replace(
                "Z", "+00:00"))
        except ValueError:
            raise BadRequest(f"metrics[{index}].report_time: not an ISO 8601 time") from None
    return out
