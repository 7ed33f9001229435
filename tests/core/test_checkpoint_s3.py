"""The Core API with checkpoints in S3 (a real SeaweedFS server): a checkpoint is reported
only once all its files are uploaded, restores are checked against what the master recorded,
and reported metrics reach the bucket as TensorBoard event files."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import EXPERIMENT_ID, TOKEN, TRIAL_ID, FakeMaster
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import det_hub.core as core
from det_hub.core._checkpoint import CheckpointContext
from det_hub.core._http import MasterSession
from det_hub.storage import CheckpointIntegrityError, S3Storage
from det_hub.testing_s3 import SeaweedS3


def s3_storage(server: SeaweedS3, bucket: str, **kwargs: Any) -> S3Storage:
    return S3Storage(bucket, "exp", endpoint_url=server.endpoint_url,
                     access_key=server.access_key, secret_key=server.secret_key, **kwargs)


def objects(server: SeaweedS3, bucket: str, prefix: str = "") -> dict[str, int]:
    listing = server.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for o in listing.get("Contents", [])}


def test_a_checkpoint_is_reported_after_its_upload_and_restored_checked(
        in_trial: FakeMaster, s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = s3_storage(s3_server, s3_bucket)
    with core.init(checkpoint_storage=store) as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 8}) as (path, sid):
            (path / "model.pt").write_bytes(b"m" * 5000)
            (path / "sub").mkdir()
            (path / "sub" / "opt.bin").write_bytes(b"o" * 7)
            # Nothing is in the bucket, nor reported, while the body writes.
            assert objects(s3_server, s3_bucket) == {}
            assert in_trial.state.checkpoints == {}
        body = in_trial.state.checkpoints[sid]
        assert body["resources"] == {"metadata.json": body["resources"]["metadata.json"],
                                     "model.pt": 5000, "sub/opt.bin": 7}
        assert objects(s3_server, s3_bucket, f"exp/{sid}/") == {
            f"exp/{sid}/{name}": size for name, size in body["resources"].items()}

        with ctx.checkpoint.restore_path(sid) as restored:
            assert (restored / "model.pt").read_bytes() == b"m" * 5000
            assert json.loads((restored / "metadata.json").read_text()) == {"steps_completed": 8}
        ctx.checkpoint.download(sid, tmp_path / "copy")
        assert (tmp_path / "copy" / "sub" / "opt.bin").read_bytes() == b"o" * 7

        # The bucket changes behind the master's back: a restore refuses it.
        s3_server.client().put_object(Bucket=s3_bucket, Key=f"exp/{sid}/model.pt", Body=b"m")
        with pytest.raises(CheckpointIntegrityError,
                           match="model.pt is 1 bytes, but was saved with 5000 bytes"), \
                ctx.checkpoint.restore_path(sid):
            pass


def test_a_failed_upload_is_never_reported(
        in_trial: FakeMaster, s3_server: SeaweedS3, s3_bucket: str) -> None:
    store = s3_storage(s3_server, s3_bucket)

    def refuse(params: dict[str, Any], **kwargs: Any) -> None:
        # The last file fails to upload after the others went up.
        if params["url_path"].endswith("/z-last.bin"):
            raise ConnectionError("the network went away")

    store.client.meta.events.register("before-call.s3.PutObject", refuse)
    with (
        core.init(checkpoint_storage=store) as ctx,
        pytest.raises(OSError, match="uploading z-last.bin"),
        ctx.checkpoint.store_path({"steps_completed": 1}) as (path, sid),
    ):
        for i in range(20):
            (path / f"part-{i}.bin").write_bytes(b"p" * 100)
        (path / "z-last.bin").write_bytes(b"z")
    assert in_trial.state.checkpoints == {}
    assert in_trial.state.count("POST", "/checkpoints") == 0
    assert objects(s3_server, s3_bucket, f"exp/{sid}/") == {}


def test_reported_metrics_reach_the_bucket_as_event_files(
        in_trial: FakeMaster, s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = s3_storage(s3_server, s3_bucket)
    with core.init(checkpoint_storage=store) as ctx:
        local = ctx.train._tensorboard_dir
        assert local is not None and local.is_dir()
        for step in (1, 2, 3):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(3, {"accuracy": 0.75})
    assert not local.exists()  # uploaded, then removed
    trial_dir = f"exp/tensorboard/experiment/{EXPERIMENT_ID}/trial/{TRIAL_ID}/"
    [name] = objects(s3_server, s3_bucket, trial_dir)
    assert name.startswith(trial_dir + "events.out.tfevents.")

    store.download_tensorboard(EXPERIMENT_ID, tmp_path / "tb")
    events = EventAccumulator(str(tmp_path / "tb" / "trial" / str(TRIAL_ID)))
    events.Reload()
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("training/loss")] == [
        (1, 1.0), (2, 0.5), (3, 0.3333)]
    assert [(e.step, e.value) for e in events.Scalars("validation/accuracy")] == [(3, 0.75)]


def test_no_local_directory_is_left_for_a_manual_tensorboard(
        in_trial: FakeMaster, s3_server: SeaweedS3, s3_bucket: str) -> None:
    store = s3_storage(s3_server, s3_bucket)
    with core.init(checkpoint_storage=store,
                   tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        assert ctx.train._tensorboard_dir is None
        ctx.train.report_training_metrics(1, {"loss": 1.0})
    assert objects(s3_server, s3_bucket) == {}


class ThreadRank:
    """One of several ranks played by threads of this process: the collectives that
    CheckpointContext uses, over a barrier."""

    def __init__(self, rank: int, slots: list[Any], barrier: threading.Barrier) -> None:
        self.rank, self._slots, self._barrier = rank, slots, barrier
        self.is_chief = rank == 0

    def allgather(self, obj: Any) -> list[Any]:
        self._slots[self.rank] = obj
        self._barrier.wait()
        out = list(self._slots)
        self._barrier.wait()
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        out = self.allgather(obj)
        return out if self.is_chief else None

    def broadcast(self, obj: Any) -> Any:
        return self.allgather(obj)[0]


def test_a_sharded_checkpoint_is_reported_only_when_every_rank_uploaded(
        in_trial: FakeMaster, s3_server: SeaweedS3, s3_bucket: str) -> None:
    slots: list[Any] = [None, None]
    barrier = threading.Barrier(2, timeout=60)
    outcome: dict[int, Any] = {}

    def rank(r: int, fail: bool) -> None:
        store = s3_storage(s3_server, s3_bucket)
        if fail:
            def refuse(params: dict[str, Any], **kwargs: Any) -> None:
                raise ConnectionError("the network went away")
            store.client.meta.events.register("before-call.s3.PutObject", refuse)
        session = MasterSession(in_trial.url, TOKEN)
        ckpt = CheckpointContext(distributed=ThreadRank(r, slots, barrier),  # type: ignore[arg-type]
                                 storage=store, session=session, trial_id=TRIAL_ID)
        try:
            with ckpt.store_path({"steps_completed": 3}, shard=True) as (path, sid):
                (path / f"rank{r}.bin").write_bytes(b"x" * (r + 1))
            outcome[r] = sid
        except Exception as exc:
            outcome[r] = exc
        finally:
            session.close()

    def run(fail_rank: int | None) -> dict[int, Any]:
        outcome.clear()
        threads = [threading.Thread(target=rank, args=(r, r == fail_rank)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return dict(outcome)

    ok = run(None)
    assert ok[0] == ok[1] and isinstance(ok[0], str)
    assert sorted(in_trial.state.checkpoints[ok[0]]["resources"]) == [
        "metadata.json", "rank0.bin", "rank1.bin"]

    failed = run(fail_rank=1)
    assert isinstance(failed[1], OSError) and "uploading rank1.bin" in str(failed[1])
    assert isinstance(failed[0], RuntimeError)
    assert "was not stored, so it is not reported: rank 1: uploading rank1.bin" in str(failed[0])
    assert list(in_trial.state.checkpoints) == [ok[0]]
    # The chief removed the parts that did reach the bucket.
    assert [k for k in objects(s3_server, s3_bucket, "exp/")
            if not k.startswith(f"exp/{ok[0]}/")] == []
