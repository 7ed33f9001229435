"""S3Storage against a real S3 server (SeaweedFS): transfers, integrity checks, deletes,
credentials, TensorBoard files, and the ``checkpoint_storage`` config of type s3."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from det_hub.config import ConfigError, parse_experiment_config
from det_hub.storage import (
    CheckpointIntegrityError,
    S3Storage,
    build_storage,
    remote_tensorboard,
    tensorboard_dir,
)
from det_hub.testing_s3 import SeaweedS3

MiB = 1024 * 1024
# Small parts, so that a 20 MiB file goes up and down in four parallel parts.
SMALL_PARTS = {"multipart_threshold": 5 * MiB, "multipart_chunksize": 5 * MiB}


def storage(server: SeaweedS3, bucket: str, prefix: str | None = "ckpts",
            **kwargs: Any) -> S3Storage:
    return S3Storage(bucket, prefix, endpoint_url=server.endpoint_url,
                     access_key=server.access_key, secret_key=server.secret_key, **kwargs)


def keys(server: SeaweedS3, bucket: str, prefix: str = "") -> list[str]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                       Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_tree(root: Path) -> dict[str, int]:
    """A checkpoint-like tree: nested small files and one 20 MiB file."""
    (root / "model").mkdir(parents=True, exist_ok=True)
    (root / "model" / "layers" / "deep").mkdir(parents=True, exist_ok=True)
    (root / "model" / "weights.bin").write_bytes(os.urandom(20 * MiB + 123))
    (root / "model" / "layers" / "deep" / "a.txt").write_text("a" * 10)
    (root / "optimizer.pt").write_bytes(os.urandom(4096))
    (root / "empty.txt").write_bytes(b"")
    return {"empty.txt": 0, "model/layers/deep/a.txt": 10,
            "model/weights.bin": 20 * MiB + 123, "optimizer.pt": 4096}


def test_a_tree_round_trips_with_its_large_file_in_parts(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket, transfer_config=SMALL_PARTS)
    sid = str(uuid.uuid4())
    with store.store_path(sid) as path:
        expected = write_tree(path)
        sums = {name: digest(path / name) for name in expected}
    assert not path.exists()  # the local staging directory is gone
    assert keys(s3_server, s3_bucket) == sorted(f"ckpts/{sid}/{name}" for name in expected)
    assert store.resources(sid) == expected
    # S3 marks an object uploaded in parts with "-<parts>" in its ETag.
    head = s3_server.client().head_object(Bucket=s3_bucket, Key=f"ckpts/{sid}/model/weights.bin")
    assert head["ETag"].strip('"').endswith("-5")

    store.download(sid, tmp_path / "copy", resources=expected)
    assert {name: digest(tmp_path / "copy" / name) for name in expected} == sums
    with store.restore_path(sid, resources=expected) as restored:
        assert {name: digest(restored / name) for name in expected} == sums
    assert not restored.exists()


def test_upload_and_a_failed_body(s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket, prefix=None)
    src = tmp_path / "src"
    expected = write_tree(src)
    sid = str(uuid.uuid4())
    store.upload(src, sid)
    assert store.resources(sid) == expected
    assert keys(s3_server, s3_bucket) == sorted(f"{sid}/{name}" for name in expected)

    other = str(uuid.uuid4())
    with pytest.raises(RuntimeError, match="boom"), store.store_path(other) as path:
        (path / "half.bin").write_bytes(b"x" * 100)
        raise RuntimeError("boom")
    assert not path.exists()
    assert keys(s3_server, s3_bucket, other) == []


def test_a_failed_upload_leaves_no_objects(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket, transfer_config=SMALL_PARTS)

    def refuse_part(params: dict[str, Any], **kwargs: Any) -> None:
        # A fault the server cannot be made to produce on cue: part 3 of the large file fails.
        if str(params.get("query_string", {}).get("partNumber")) == "3":
            raise ConnectionError("the network went away")

    store.client.meta.events.register("before-call.s3.UploadPart", refuse_part)
    sid = str(uuid.uuid4())
    with pytest.raises(OSError, match=r"uploading model/weights.bin .* failed"), \
            store.store_path(sid) as path:
        write_tree(path)
    assert keys(s3_server, s3_bucket, f"ckpts/{sid}") == []
    uploads = s3_server.client().list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert [u for u in uploads if sid in u["Key"]] == []


def test_a_damaged_checkpoint_is_refused_before_any_download(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket)
    sid = str(uuid.uuid4())
    with store.store_path(sid) as path:
        expected = write_tree(path)
    client = s3_server.client()
    # Truncated: the object is replaced by a shorter one.
    client.put_object(Bucket=s3_bucket, Key=f"ckpts/{sid}/optimizer.pt", Body=b"short")
    with pytest.raises(CheckpointIntegrityError,
                       match="optimizer.pt is 5 bytes, but was saved with 4096 bytes"):
        store.download(sid, tmp_path / "copy", resources=expected)
    assert not any(p.is_file() for p in (tmp_path / "copy").rglob("*"))
    with pytest.raises(CheckpointIntegrityError, match="optimizer.pt"), \
            store.restore_path(sid, resources=expected):
        pass
    # Missing: the object is gone.
    client.delete_object(Bucket=s3_bucket, Key=f"ckpts/{sid}/model/layers/deep/a.txt")
    with pytest.raises(CheckpointIntegrityError) as err:
        store.download(sid, tmp_path / "copy2", resources=expected)
    assert "model/layers/deep/a.txt is missing (saved with 10 bytes)" in str(err.value)
    assert "optimizer.pt is 5 bytes" in str(err.value)
    # Without the record of what was saved, what is there is what comes back.
    store.download(sid, tmp_path / "copy3")
    assert (tmp_path / "copy3" / "optimizer.pt").read_bytes() == b"short"


def test_missing_checkpoints_and_buckets(s3_server: SeaweedS3, s3_bucket: str,
                                         tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket)
    sid = str(uuid.uuid4())
    with pytest.raises(FileNotFoundError, match=f"checkpoint {sid} not found in s3://"):
        store.download(sid, tmp_path / "x")
    with pytest.raises(FileNotFoundError), store.restore_path(sid):
        pass
    with pytest.raises(FileNotFoundError):
        store.resources(sid)
    store.delete(sid)  # deleting what is not there is no error
    nowhere = storage(s3_server, "no-such-bucket-here")
    with pytest.raises(FileNotFoundError, match="bucket 'no-such-bucket-here' does not exist"):
        nowhere.resources(sid)
    with pytest.raises(ValueError, match="not a plain uuid"):
        store.delete("../escape")


def test_delete_removes_every_object_of_the_checkpoint_only(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket)
    src = tmp_path / "many"
    src.mkdir()
    # More objects than one delete request takes (1000).
    for i in range(1010):
        (src / f"shard-{i:04d}.bin").write_bytes(b"%d" % i)
    doomed, kept = str(uuid.uuid4()), str(uuid.uuid4())
    store.upload(src, doomed)
    with store.store_path(kept) as path:
        (path / "keep.bin").write_bytes(b"k")
    assert len(keys(s3_server, s3_bucket, f"ckpts/{doomed}/")) == 1010

    store.delete(doomed)
    assert keys(s3_server, s3_bucket) == [f"ckpts/{kept}/keep.bin"]
    store.delete(doomed)


def test_prefixes_keep_storages_apart(s3_server: SeaweedS3, s3_bucket: str) -> None:
    a = storage(s3_server, s3_bucket, prefix="/team-a//ckpts/")
    b = storage(s3_server, s3_bucket, prefix="team-b")
    sid = str(uuid.uuid4())
    with a.store_path(sid) as path:
        (path / "f").write_text("a")
    assert keys(s3_server, s3_bucket) == [f"team-a/ckpts/{sid}/f"]
    with pytest.raises(FileNotFoundError):
        b.resources(sid)
    with pytest.raises(ValueError, match="must not contain"):
        storage(s3_server, s3_bucket, prefix="a/../b")


def test_credentials_come_from_the_environment(
        s3_server: SeaweedS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    store = build_storage({"type": "s3", "bucket": s3_bucket, "endpoint_url": s3_server.endpoint_url})
    sid = str(uuid.uuid4())
    with store.store_path(sid) as path:
        (path / "f.txt").write_text("from env")
    assert keys(s3_server, s3_bucket) == [f"{sid}/f.txt"]

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        build_storage({"type": "s3", "bucket": s3_bucket,
                       "endpoint_url": s3_server.endpoint_url}).resources(sid)
    # Keys in the config win over the environment.
    configured = build_storage(s3_server.storage_config(s3_bucket))
    assert configured.resources(sid) == {"f.txt": 8}


def test_tensorboard_files_are_uploaded_as_they_grow_and_fetched_by_appending(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = storage(s3_server, s3_bucket)
    assert store.remote_tensorboard and store.tensorboard_path(3, 4) is None
    local = tmp_path / "trial"
    local.mkdir()
    events = local / "events.out.tfevents.1.host.1.0"
    events.write_bytes(b"first")
    assert store.upload_tensorboard(local, 3, 4) == 1
    assert store.upload_tensorboard(local, 3, 4) == 0  # nothing changed
    assert keys(s3_server, s3_bucket) == [
        "ckpts/tensorboard/experiment/3/trial/4/events.out.tfevents.1.host.1.0"]

    copy = tmp_path / "copy"
    assert store.download_tensorboard(3, copy) == 1
    fetched = copy / "trial/4" / events.name
    assert fetched.read_bytes() == b"first"
    inode = fetched.stat().st_ino
    with open(fetched, "rb") as reader:  # as TensorBoard holds it
        assert reader.read() == b"first"
        with open(events, "ab") as f:
            f.write(b"+second")
        assert store.upload_tensorboard(local, 3, 4) == 1
        assert store.download_tensorboard(3, copy) == 1
        assert store.download_tensorboard(3, copy) == 0
        assert reader.read() == b"+second"  # the same file grew
    assert fetched.stat().st_ino == inode


def test_config_of_type_s3(s3_server: SeaweedS3) -> None:
    built = build_storage({"type": "s3", "bucket": "my-bucket", "prefix": "/a//b/",
                           "endpoint_url": s3_server.endpoint_url, "save_trial_best": 2})
    assert isinstance(built, S3Storage)
    assert (built.bucket, built.prefix, built.endpoint_url) == (
        "my-bucket", "a/b", s3_server.endpoint_url)
    config = {"type": "s3", "bucket": "my-bucket"}
    assert tensorboard_dir(3, config) is None and remote_tensorboard(config)
    assert not remote_tensorboard({"type": "shared_fs", "host_path": "/x"})
    assert not remote_tensorboard({"type": "s3"})


@pytest.mark.parametrize(("section", "message"), [
    ({"type": "s3"}, "checkpoint_storage.bucket: required"),
    ({"type": "s3", "bucket": ""}, "checkpoint_storage.bucket: must not be empty"),
    ({"type": "s3", "bucket": "has space"}, "checkpoint_storage.bucket: 'has space' is not a "
                                            "valid bucket name"),
    ({"type": "s3", "bucket": "ok-bucket", "prefix": "a/../b"},
     "checkpoint_storage.prefix: must not contain '.' or '..' parts"),
    ({"type": "s3", "bucket": "ok-bucket", "endpoint_url": "127.0.0.1:9000"},
     "checkpoint_storage.endpoint_url: must be an http:// or https:// URL"),
    ({"type": "s3", "bucket": "ok-bucket", "access_key": "k"},
     "checkpoint_storage.secret_key: required when access_key is set"),
    ({"type": "s3", "bucket": "ok-bucket", "secret_key": "s"},
     "checkpoint_storage.access_key: required when secret_key is set"),
    ({"type": "s3", "bucket": "ok-bucket", "endpoint": "http://x"},
     "checkpoint_storage.endpoint: unknown key; did you mean 'endpoint_url'?"),
    ({"type": "s3", "bucket": 5}, "checkpoint_storage.bucket:"),
])
def test_config_errors_name_the_setting(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as built:
        build_storage(section)
    assert message in str(built.value)
    experiment = {"entrypoint": "python3 train.py", "checkpoint_storage": section,
                  "searcher": {"name": "single", "metric": "loss",
                               "max_length": {"batches": 1}}}
    with pytest.raises(ConfigError) as parsed:
        parse_experiment_config(experiment)
    assert message in str(parsed.value)
