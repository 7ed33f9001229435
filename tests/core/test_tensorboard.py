"""TensorBoard event files: the writer read back by TensorBoard's own reader, and the Core API
writing reported metrics into the checkpoint storage."""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import EXPERIMENT_ID, TRIAL_ID, FakeMaster
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

import det_hub.core as core
from det_hub.core._tensorboard import EventWriter, crc32c, masked_crc32c, scalar_value
from det_hub.storage import SharedFSStorage, tensorboard_dir

NAME_RE = re.compile(r"events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+")


def _scalars(logdir: Path, tag: str) -> list[tuple[float, int, float]]:
    return [
        (e.wall_time, e.step, e.value) for e in EventAccumulator(str(logdir)).Reload().Scalars(tag)
    ]


def _tags(logdir: Path) -> list[str]:
    return sorted(EventAccumulator(str(logdir)).Reload().Tags()["scalars"])


def _f32(value: float) -> float:
    """``value`` rounded to float32, as TensorBoard stores it (too large: infinite)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"123456789", 0xE3069283),
        # RFC 3720 (iSCSI), appendix B.4
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_crc32c_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def test_masked_crc_rotates_and_offsets() -> None:
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_scalars_read_back_exactly(tmp_path: Path) -> None:
    logdir = tmp_path / "new" / "run"
    written = [
        (1_700_000_000.125, 0, {"training/loss": 2.5, "training/lr": 0.1}),
        (1_700_000_001.5, 10, {"training/loss": np.float32(1.25), "training/lr": 0.05}),
        (1_700_000_002.75, 20, {"training/loss": torch.tensor(0.3333), "training/lr": 7}),
        (1_700_000_003.0, 2**40, {"training/loss": math.nan, "training/lr": -math.inf}),
        (1_700_000_004.0, 2**40 + 1, {"training/loss": 1e39, "training/lr": np.int64(-3)}),
    ]
    with EventWriter(logdir) as writer:
        for wall_time, step, values in written:
            assert writer.add_scalars(step, values, wall_time=wall_time) == 2
    [path] = logdir.iterdir()
    assert path == writer.path and NAME_RE.fullmatch(path.name), path.name

    for tag in ("training/loss", "training/lr"):
        got = _scalars(logdir, tag)
        assert [(w, s) for w, s, _ in got] == [(w, s) for w, s, _ in written]
        expected = [_f32(float(v[tag])) for _, _, v in written]
        # NaN is the one value not equal to itself: compare it by kind.
        assert [("nan" if math.isnan(v) else v) for _, _, v in got] == [
            ("nan" if math.isnan(v) else v) for v in expected
        ]
    assert _scalars(logdir, "training/loss")[-1][2] == math.inf  # beyond float32: infinite

    events = list(LegacyEventFileLoader(str(path)).Load())
    assert events[0].file_version == "brain.Event:2" and not events[0].HasField("summary")
    assert len(events) == 1 + len(written)


def test_values_that_are_not_numbers_are_skipped(tmp_path: Path) -> None:
    with EventWriter(tmp_path) as writer:
        values: dict[str, Any] = {
            "kept/int": 3,
            "kept/numpy0d": np.array(1.5),
            "bool": True,
            "numpy_bool": np.bool_(False),
            "str": "0.5",
            "none": None,
            "list": [1.0],
            "dict": {"a": 1.0},
            "complex": 1j,
            "vector": np.arange(3.0),
            "tensor": torch.ones(2),
            "huge_int": 10**400,
        }
        assert writer.add_scalars(5, values, wall_time=100.0) == 2
        assert writer.add_scalars(6, {"only": "text"}) == 0
    assert _tags(tmp_path) == ["kept/int", "kept/numpy0d"]
    assert _scalars(tmp_path, "kept/numpy0d") == [(100.0, 5, 1.5)]
    # The event with nothing numeric was not written at all.
    [path] = tmp_path.iterdir()
    assert len(list(LegacyEventFileLoader(str(path)).Load())) == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [(2, 2.0), (np.float16(0.5), 0.5), (torch.tensor([4]), 4.0), (True, None), ("1", None)],
)
def test_scalar_value(value: Any, expected: float | None) -> None:
    assert scalar_value(value) == expected


def test_a_live_reader_sees_points_before_close(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path, flush_secs=0.1)
    try:
        header_only = writer.path.stat().st_size
        writer.add_scalars(1, {"loss": 0.5}, wall_time=10.0)
        deadline = time.monotonic() + 10.0
        while writer.path.stat().st_size == header_only:
            assert time.monotonic() < deadline, "the background flush never wrote the point"
            time.sleep(0.05)
        assert _scalars(tmp_path, "loss") == [(10.0, 1, 0.5)]
    finally:
        writer.close()
    writer.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalars(2, {"loss": 0.25})


def test_two_writers_in_one_second_get_their_own_files(tmp_path: Path) -> None:
    with EventWriter(tmp_path) as one, EventWriter(tmp_path) as two:
        one.add_scalars(1, {"a": 1.0})
        two.add_scalars(2, {"a": 2.0})
    assert one.path != two.path
    assert sorted(s for _, s, _ in _scalars(tmp_path, "a")) == [1, 2]


def _fill_disk(writer: EventWriter) -> None:
    """Point ``writer`` at /dev/full, where every flush fails with ENOSPC, for real."""
    with writer._lock:
        writer._file.close()
        writer._file = open("/dev/full", "wb")  # noqa: SIM115 - the writer closes it


def test_a_failing_background_flush_is_raised_by_the_next_call(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path, flush_secs=0.05)
    _fill_disk(writer)
    writer.add_scalars(1, {"loss": 1.0})
    writer._flusher.join(timeout=10.0)  # the flusher stops after its first failure
    assert not writer._flusher.is_alive()
    with pytest.raises(OSError, match="No space left"):
        writer.add_scalars(2, {"loss": 0.5})
    with pytest.raises(OSError, match="No space left"):
        writer.close()
    writer.close()


def test_shared_fs_tensorboard_layout(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path, "ckpts")
    experiment = tmp_path / "ckpts/tensorboard/experiment/3"
    assert storage.tensorboard_path(3) == experiment
    assert storage.tensorboard_path(3, 17) == experiment / "trial/17"
    config = {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"}
    assert tensorboard_dir(3, config) == experiment
    assert tensorboard_dir(3, None) is None
    assert tensorboard_dir(3, {"type": "s3", "bucket": "b"}) is None


# --- the Core API -------------------------------------------------------------------------


def _trial_logdir(tmp_path: Path) -> Path:
    return (
        tmp_path / "storage/tensorboard/experiment" / str(EXPERIMENT_ID) / "trial" / str(TRIAL_ID)
    )


def test_reported_metrics_become_scalars_in_the_storage(
    in_trial: FakeMaster, tmp_path: Path
) -> None:
    with core.init(metric_batch_interval=0.05) as ctx:
        for step in (5, 10, 15):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step, "note": "text"})
        ctx.train.report_validation_metrics(15, {"accuracy": torch.tensor(0.75)})
        ctx.train.report_metrics("custom", 15, {"lr": 0.01})
    logdir = _trial_logdir(tmp_path)
    [path] = logdir.iterdir()
    assert NAME_RE.fullmatch(path.name), path.name
    assert _tags(logdir) == ["custom/lr", "training/loss", "validation/accuracy"]
    loss = _scalars(logdir, "training/loss")
    assert [(s, v) for _, s, v in loss] == [(s, _f32(1.0 / s)) for s in (5, 10, 15)]
    assert [(s, v) for _, s, v in _scalars(logdir, "validation/accuracy")] == [(15, 0.75)]
    assert [(s, v) for _, s, v in _scalars(logdir, "custom/lr")] == [(15, _f32(0.01))]
    # The master got every row, the text value included.
    rows = [(g, r["steps_completed"], r["metrics"]) for g, r in in_trial.state.metric_rows]
    assert rows[0] == ("training", 5, {"loss": 0.2, "note": "text"}) and len(rows) == 5


def test_manual_tensorboard_mode_writes_nothing(in_trial: FakeMaster, tmp_path: Path) -> None:
    with core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
    assert not (tmp_path / "storage" / "tensorboard").exists()
    assert len(in_trial.state.metric_rows) == 1


class _NoCollectives:
    """Collectives for a rank whose peers this test never talks to."""

    def allgather(self, obj: Any) -> list[Any]:
        raise AssertionError("no collectives expected")

    gather = broadcast = allgather


def test_a_worker_rank_writes_no_events(in_trial: FakeMaster, tmp_path: Path) -> None:
    worker = core.DistributedContext(
        rank=1,
        size=2,
        local_rank=1,
        local_size=2,
        _global=_NoCollectives(),
        _local=_NoCollectives(),
    )
    with core.init(distributed=worker, preempt_mode=core.PreemptMode.WorkersAskMaster) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        ctx.train.report_validation_metrics(1, {"loss": 1.0})
    assert not (tmp_path / "storage" / "tensorboard").exists()
    assert in_trial.state.metric_rows == []


def test_an_unwritable_directory_is_warned_about_once(
    in_trial: FakeMaster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "storage" / "tensorboard").write_text("a file where the directory should be")
    caplog.set_level(logging.WARNING, logger="det_hub.core")
    with core.init(metric_batch_interval=0.05) as ctx:
        for step in range(1, 4):
            ctx.train.report_training_metrics(step, {"loss": float(step)})
        ctx.train.report_validation_metrics(3, {"validation_loss": 0.5})
    warnings = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(warnings) == 1 and str(_trial_logdir(tmp_path)) in warnings[0], warnings
    assert [r["steps_completed"] for _, r in in_trial.state.metric_rows] == [1, 2, 3, 3]


def test_a_write_failure_mid_training_stops_events_and_not_training(
    in_trial: FakeMaster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="det_hub.core")
    with core.init(metric_batch_interval=0.05) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        assert ctx.train._events is not None
        _fill_disk(ctx.train._events)
        for step in range(2, 6):
            ctx.train.report_training_metrics(step, {"loss": float(step)})
        ctx.train.flush(timeout=5)
        ctx.train.report_validation_metrics(5, {"validation_loss": 0.5})
    warnings = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0], warnings
    assert [r["steps_completed"] for _, r in in_trial.state.metric_rows] == [1, 2, 3, 4, 5, 5]
    # What reached the file before the failure is still readable.
    assert [s for _, s, _ in _scalars(_trial_logdir(tmp_path), "training/loss")] == [1]
