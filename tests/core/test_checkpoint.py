"""Checkpoints: files measured, metadata written and reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TRIAL_ID, FakeMaster

import det_hub.core as core
from det_hub.storage import SharedFSStorage


def test_store_path_reports_sizes_and_writes_metadata(in_trial: FakeMaster, tmp_path: Path) -> None:
    state = in_trial.state
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 40, "note": "x"}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"m" * 1234)
            (path / "sub").mkdir()
            (path / "sub" / "opt.bin").write_bytes(b"o" * 7)
        assert path == tmp_path / "storage" / storage_id
        meta_file = path / "metadata.json"
        assert json.loads(meta_file.read_text()) == {"steps_completed": 40, "note": "x"}
        body = state.checkpoints[storage_id]
        assert body == {
            "uuid": storage_id,
            "trial_id": TRIAL_ID,
            "steps_completed": 40,
            "resources": {
                "metadata.json": meta_file.stat().st_size,
                "model.pt": 1234,
                "sub/opt.bin": 7,
            },
            "metadata": {"steps_completed": 40, "note": "x"},
            "state": "COMPLETED",
        }
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 40, "note": "x"}
        with ctx.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "model.pt").read_bytes() == b"m" * 1234
        ctx.checkpoint.download(storage_id, tmp_path / "copy")
        assert (tmp_path / "copy" / "sub" / "opt.bin").read_bytes() == b"o" * 7


def test_failed_body_leaves_nothing(in_trial: FakeMaster, tmp_path: Path) -> None:
    with (
        core.init() as ctx,
        pytest.raises(RuntimeError, match="boom"),
        ctx.checkpoint.store_path({"steps_completed": 1}) as (path, _),
    ):
        (path / "half").write_bytes(b"x")
        raise RuntimeError("boom")
    assert list((tmp_path / "storage").iterdir()) == []
    assert in_trial.state.checkpoints == {}


def test_upload_copies_and_leaves_source_alone(in_trial: FakeMaster, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"w" * 10)
    with core.init() as ctx:
        storage_id = ctx.checkpoint.upload(src, {"steps_completed": 3})
    assert sorted(p.name for p in src.iterdir()) == ["w.bin"]
    body = in_trial.state.checkpoints[storage_id]
    assert body["resources"]["w.bin"] == 10 and body["steps_completed"] == 3
    assert (tmp_path / "storage" / storage_id / "w.bin").read_bytes() == b"w" * 10


def test_local_checkpoints(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DET_HUB_CLUSTER_INFO", raising=False)
    monkeypatch.chdir(tmp_path)
    with core.init() as ctx:
        assert isinstance(ctx.checkpoint.storage, SharedFSStorage)
        with ctx.checkpoint.store_path({"steps_completed": 5}) as (path, storage_id):
            (path / "a").write_text("hello")
        assert path == tmp_path / "checkpoints" / storage_id
        assert ctx.checkpoint.get_metadata(storage_id) == {"steps_completed": 5}
        ctx.checkpoint.delete(storage_id)
        assert not path.exists()
        with pytest.raises(ValueError, match="not a plain uuid"):
            ctx.checkpoint.get_metadata("../etc")


def test_metrics_reported_before_a_checkpoint_are_stored_before_it(
        in_trial: FakeMaster, tmp_path: Path) -> None:
    state = in_trial.state
    # A long batch interval: without the flush the rows would still be queued.
    with core.init(metric_batch_interval=60.0) as ctx:
        for step in range(1, 10):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        with ctx.checkpoint.store_path({"steps_completed": 9}) as (path, storage_id):
            (path / "w.bin").write_bytes(b"w")
        posts = [r["path"] for r in state.requests if r["method"] == "POST"]
        assert posts.index("/checkpoints") > posts.index(f"/trials/{TRIAL_ID}/metrics")
        assert [row["steps_completed"] for _, row in state.metric_rows] == list(range(1, 10))
