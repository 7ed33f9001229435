"""Searcher operations from the stand-in master."""

from __future__ import annotations

import pytest
from conftest import TRIAL_ID, FakeMaster, reported_rows

import det_hub.core as core

COMPLETED_PATH = f"/trials/{TRIAL_ID}/searcher/completed_operation"


def test_operations_until_completed(in_trial: FakeMaster) -> None:
    state = in_trial.state
    state.ops = [100, 200]
    seen = []
    with core.init(metric_batch_interval=60.0) as ctx:
        for op in ctx.searcher.operations():
            seen.append(op.length)
            op.report_progress(op.length / 2)
            ctx.train.report_training_metrics(op.length, {"loss": 1.0})
            ctx.train.report_validation_metrics(op.length, {"validation_loss": 0.1 * op.length})
            op.report_completed(0.1 * op.length)
    assert seen == [100, 200]
    assert state.completed_ops == [
        {"length": 100, "searcher_metric": 10.0},
        {"length": 200, "searcher_metric": 20.0},
    ]
    # Each completion reached the master after the validation it is about.
    paths = state.paths()
    first_completed = paths.index(f"POST {COMPLETED_PATH}")
    rows_before = [r for r in state.requests[:first_completed] if r["path"].endswith("/metrics")]
    groups = [row for r in rows_before for row in reported_rows(r["body"])]
    assert {"validation_loss": 10.0} in [g["metrics"] for g in groups]


def test_null_operation_yields_nothing(in_trial: FakeMaster) -> None:
    in_trial.state.null_op = True
    with core.init() as ctx:
        assert list(ctx.searcher.operations()) == []


def test_uncompleted_operation_is_an_error(in_trial: FakeMaster) -> None:
    in_trial.state.ops = [10]
    with core.init() as ctx:
        ops = ctx.searcher.operations()
        next(ops)
        with pytest.raises(RuntimeError, match="report_completed"):
            next(ops)


def test_bad_searcher_metric(in_trial: FakeMaster) -> None:
    in_trial.state.ops = [10]
    with core.init() as ctx:
        op = next(iter(ctx.searcher.operations()))
        with pytest.raises(ValueError, match="must be a number"):
            op.report_completed("not a number")
    assert in_trial.state.completed_ops == []


def test_a_nan_searcher_metric_is_reported_as_determined_reports_it(
        in_trial: FakeMaster) -> None:
    in_trial.state.ops = [10]
    with core.init() as ctx:
        op = next(iter(ctx.searcher.operations()))
        op.report_completed(float("nan"))
    assert in_trial.state.completed_ops == [{"length": 10, "searcher_metric": "NaN"}]


def test_the_configured_unit_is_read_from_the_legacy_length_as_determined_reads_it() -> None:
    from det_hub.core import Unit
    from det_hub.core._searcher import parse_searcher_units

    def units(length: object) -> object:
        return parse_searcher_units({"searcher": {"name": "single", "max_length": length}})

    assert units({"batches": 100}) is Unit.BATCHES
    assert units({"epochs": 2}) is Unit.EPOCHS
    assert units({"records": 6400}) is Unit.RECORDS
    # Determined's current configs have no length: it comes from Trainer.fit.
    assert parse_searcher_units({"searcher": {"name": "single"}}) is None
    assert units(100) is None and units({"steps": 3}) is None
    assert units({"batches": 1, "epochs": 1}) is None
    assert parse_searcher_units({}) is None
