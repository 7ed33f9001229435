"""Metric reporting against the stand-in master, including a master restart."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch
from conftest import TOKEN, TRIAL_ID, FakeMaster, reported_rows

import det_hub.core as core


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_rows_are_batched_and_carry_the_token(in_trial: FakeMaster) -> None:
    state = in_trial.state
    with core.init(metric_batch_interval=0.5) as ctx:
        for step in range(1, 51):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step, "acc": torch.tensor(0.5)})
    rows = [(g, r["steps_completed"], r["metrics"]) for g, r in state.metric_rows]
    assert rows == [("training", s, {"loss": 1.0 / s, "acc": 0.5}) for s in range(1, 51)]
    posts = [r for r in state.requests if r["path"] == f"/trials/{TRIAL_ID}/metrics"]
    # 50 rows reported in well under the batch interval travel in very few requests.
    assert 1 <= len(posts) <= 3
    assert all(r["auth"] == f"Bearer {TOKEN}" for r in state.requests)
    assert all("report_time" in r for _, r in state.metric_rows)


def test_validation_metrics_are_sent_without_waiting(in_trial: FakeMaster) -> None:
    state = in_trial.state
    with core.init(metric_batch_interval=60.0) as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.3})
        ctx.train.report_validation_metrics(10, {"validation_loss": 0.25})
        # The batch interval is a minute: only the validation report can have pushed them out.
        assert _wait_for(lambda: len(state.metric_rows) == 2, timeout=3.0)
        assert [g for g, _ in state.metric_rows] == ["training", "validation"]
        assert state.metric_rows[1][1]["metrics"] == {"validation_loss": 0.25}


def test_master_restart_loses_and_duplicates_nothing(
    in_trial: FakeMaster, caplog: pytest.LogCaptureFixture
) -> None:
    state = in_trial.state
    caplog.set_level(logging.WARNING, logger="det_hub.core")
    with core.init(metric_batch_interval=0.05) as ctx:
        for step in range(1, 11):
            ctx.train.report_training_metrics(step, {"loss": float(step)})
        ctx.train.flush(timeout=5)
        assert len(state.metric_rows) == 10

        in_trial.stop()  # the master goes away
        for step in range(11, 21):
            ctx.train.report_training_metrics(step, {"loss": float(step)})
        ctx.train.report_metrics("custom", 19, {"lr": 0.01})
        time.sleep(1.5)  # several attempts fail meanwhile
        assert len(state.metric_rows) == 10
        assert "retrying" in caplog.text

        # A validation report is delivered before it returns: it waits out the outage.
        threading.Timer(1.0, in_trial.start).start()  # back on the same address
        began = time.monotonic()
        ctx.train.report_validation_metrics(20, {"validation_loss": 0.5})
        assert time.monotonic() - began >= 0.9
        assert len(state.metric_rows) == 22 and state.metric_rows[-1][0] == "validation"
    # Closing the context delivered the rest: each row exactly once, in order.
    got = [(g, r["steps_completed"], r["metrics"]) for g, r in state.metric_rows]
    expected = [("training", s, {"loss": float(s)}) for s in range(1, 21)]
    expected += [("custom", 19, {"lr": 0.01}), ("validation", 20, {"validation_loss": 0.5})]
    assert got == expected


def test_a_batch_whose_answer_was_lost_is_sent_again_with_its_key(
    in_trial: FakeMaster,
) -> None:
    state = in_trial.state
    state.lose_metric_answers = 1
    with core.init(metric_batch_interval=0.05) as ctx:
        for step in range(1, 4):
            ctx.train.report_training_metrics(step, {"loss": float(step)})
        ctx.train.flush(timeout=10)
        ctx.train.report_training_metrics(4, {"loss": 4.0})
    posts = [r["body"] for r in state.requests if r["path"] == f"/trials/{TRIAL_ID}/metrics"]
    # The first batch arrived twice, under one key the master uses to store it once; the next
    # batch has a key of its own.
    assert len(posts) == 3
    assert posts[0] == posts[1]
    assert [len(reported_rows(p)) for p in posts] == [3, 3, 1]
    assert posts[2]["key"] != posts[0]["key"]
    assert posts[2]["key"].split(":")[0] == posts[0]["key"].split(":")[0]


def test_progress_and_early_exit(in_trial: FakeMaster) -> None:
    state = in_trial.state
    with core.init() as ctx:
        ctx.train.report_progress(0.25)
        ctx.train.report_early_exit(core.EarlyExitReason.INVALID_HP)
        ctx.train.flush(timeout=5)
    progress = [r["body"] for r in state.requests if r["path"] == f"/trials/{TRIAL_ID}/progress"]
    assert progress == [{"progress": 0.25}]
    exits = [r["body"] for r in state.requests if r["path"] == f"/trials/{TRIAL_ID}/early_exit"]
    assert exits == [{"reason": "INVALID_HP"}]
    with pytest.raises(ValueError, match="progress"):
        core.init().train.report_progress(1.5)


def test_nan_and_infinite_metrics_travel_as_determined_strings(in_trial: FakeMaster) -> None:
    state = in_trial.state
    with core.init(metric_batch_interval=0.05) as ctx:
        ctx.train.report_training_metrics(1, {"loss": float("nan"), "grad": float("-inf")})
        ctx.train.report_validation_metrics(
            1, {"acc": torch.tensor(float("inf")), "nested": {"x": [float("nan"), 1.0]}})
        ctx.train.flush(timeout=5)
    assert [(g, r["metrics"]) for g, r in state.metric_rows] == [
        ("training", {"loss": "NaN", "grad": "-Infinity"}),
        ("validation", {"acc": "Infinity", "nested": {"x": ["NaN", 1.0]}}),
    ]


def test_bad_values_are_refused_by_name(in_trial: FakeMaster) -> None:
    with core.init() as ctx:
        with pytest.raises(TypeError, match="'weights'"):
            ctx.train.report_training_metrics(1, {"weights": torch.ones(3)})
        with pytest.raises(ValueError, match="steps_completed"):
            ctx.train.report_training_metrics(-1, {"loss": 1.0})
    assert in_trial.state.metric_rows == []


def test_local_mode_logs_metrics(
    monkeypatch: pytest.MonkeyPatch, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DET_HUB_CLUSTER_INFO", raising=False)
    caplog.set_level(logging.INFO, logger="det_hub.core")
    with core.init(checkpoint_storage=tmp_path) as ctx:
        assert ctx.info is None and core.get_cluster_info() is None
        ctx.train.report_training_metrics(3, {"loss": 0.5})
        assert ctx.preempt.should_preempt() is False
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            op.report_completed(0.5)
        assert lengths == [1]
    assert "training metrics at step 3: {'loss': 0.5}" in caplog.text


def test_a_batch_goes_as_columns_when_its_rows_have_the_same_metrics() -> None:
    from det_hub.core._metric_sender import batch_body

    rows = [{"steps_completed": s, "metrics": {"loss": 1.0 / s, "lr": "NaN"},
             "report_time": f"2026-01-01T00:00:0{s}.250000Z"} for s in (1, 2)]
    assert batch_body("training", rows, "k:1") == {
        "group": "training", "key": "k:1", "steps": [1, 2],
        "metrics": {"loss": [1.0, 0.5], "lr": ["NaN", "NaN"]},
        "report_times": [1767225601.25, 1767225602.25]}
    rows[1]["metrics"] = {"loss": 0.5}
    assert batch_body("training", rows, "k:2") == {
        "group": "training", "metrics": rows, "key": "k:2"}
