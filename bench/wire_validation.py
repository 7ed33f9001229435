"""What reading a metric batch through its wire model costs, per row.

``POST /trials/{id}/metrics`` takes up to hundreds of rows a call; the handler reads the body
through ``wire.MetricBatch``, whose rows are checked as dicts (``wire.ReportedMetrics``).
Printed in microseconds per row, next to parsing the JSON, and to building a pydantic object
per row as the alternative the model's design avoids.

    python bench/wire_validation.py [--rows 500] [--metrics 5] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import timeit
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from det_hub.service import wire


class RowObject(BaseModel):
    """A row as a model of its own: what the TypedDict rows are measured against."""

    model_config = ConfigDict(strict=True)

    steps_completed: Annotated[int, Field(ge=0)]
    metrics: dict[str, SkipValidation[wire.MetricValue]]
    report_time: wire.Time | None = None


class BatchOfObjects(BaseModel):
    model_config = ConfigDict(strict=True)

    group: str
    metrics: list[RowObject]
    key: str | None = None


def per_row(seconds: float, repeat: int, rows: int) -> float:
    return seconds / repeat / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--metrics", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    body = {"group": "training", "key": "run-a:1", "metrics": [
        {"steps_completed": i, "report_time": "2026-11-22T10:00:00.123456Z",
         "metrics": {f"m{j}": 1.0 / (i + j + 1) for j in range(args.metrics)} | {"nan": "NaN"}}
        for i in range(args.rows)]}
    raw = json.dumps(body).encode()
    data = json.loads(raw)
    cases = {
        "json.loads of the body": lambda: json.loads(raw),
        "wire.MetricBatch (rows as dicts)": lambda: wire.parse(wire.MetricBatch, data),
        "a pydantic object per row": lambda: BatchOfObjects.model_validate(data),
    }
    print(f"{args.rows} rows of {args.metrics + 1} metrics, best of 5 x {args.repeat}:")
    for label, run in cases.items():
        best = min(timeit.repeat(run, number=args.repeat, repeat=5))
        print(f"  {label + ':':36} {per_row(best, args.repeat, args.rows):6.2f} µs per row")
    assert wire.parse(wire.MetricBatch, data).metrics == data["metrics"]


if __name__ == "__main__":
    main()
