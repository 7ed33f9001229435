"""SharedFSStorage on a real directory, and build_storage."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from det_hub.storage import SharedFSStorage, build_storage, check_uuid

BAD_IDS = [
    "../escape",
    "..",
    "/etc/passwd",
    "a/b",
    "",
    str(uuid.uuid4()) + "/..",
    "../" + str(uuid.uuid4()),
    str(uuid.uuid4()) + "\n",
    str(uuid.uuid4()).replace("-", ""),
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_path_tricks_are_refused(tmp_path: Path, bad: str) -> None:
    storage = SharedFSStorage(tmp_path / "base")
    with pytest.raises(ValueError, match="not a plain uuid"), storage.store_path(bad):
        pass
    for call in (storage.delete, storage.resources, lambda s: storage.upload(tmp_path, s)):
        with pytest.raises(ValueError, match="not a plain uuid"):
            call(bad)
    with pytest.raises(ValueError, match="not a plain uuid"):
        storage.download(bad, tmp_path / "out")
    assert not (tmp_path / "base").exists() or list((tmp_path / "base").iterdir()) == []


def test_storage_path_must_stay_inside_host_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside host_path"):
        SharedFSStorage(tmp_path, "../elsewhere")
    with pytest.raises(ValueError, match="outside host_path"):
        SharedFSStorage(tmp_path / "a", str(tmp_path / "b"))
    assert SharedFSStorage(tmp_path, "sub").base_path == tmp_path / "sub"
    assert SharedFSStorage(tmp_path, str(tmp_path / "abs")).base_path == tmp_path / "abs"


def test_round_trip(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path, "ckpts")
    sid = str(uuid.uuid4())
    with storage.store_path(sid) as path:
        assert path == tmp_path / "ckpts" / sid
        (path / "w.bin").write_bytes(b"1" * 100)
        (path / "d").mkdir()
        (path / "d" / "x.txt").write_text("abc")
    assert storage.resources(sid) == {"d/x.txt": 3, "w.bin": 100}
    with storage.restore_path(sid) as restored:
        assert (restored / "w.bin").stat().st_size == 100
    storage.download(sid, tmp_path / "dl")
    assert (tmp_path / "dl" / "d" / "x.txt").read_text() == "abc"

    other = str(uuid.uuid4())
    storage.upload(tmp_path / "dl", other)
    assert storage.resources(other) == storage.resources(sid)

    storage.delete(sid)
    storage.delete(sid)  # already gone: fine
    with pytest.raises(FileNotFoundError):
        storage.resources(sid)
    with pytest.raises(FileNotFoundError), storage.restore_path(sid):
        pass


def test_failed_write_is_removed(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path)
    sid = str(uuid.uuid4())
    with pytest.raises(KeyError), storage.store_path(sid) as path:
        (path / "half").write_text("x")
        raise KeyError("boom")
    assert not (tmp_path / sid).exists()


def test_build_storage(tmp_path: Path) -> None:
    built = build_storage({"type": "shared_fs", "host_path": str(tmp_path), "storage_path": None})
    assert isinstance(built, SharedFSStorage) and built.base_path == tmp_path
    with pytest.raises(ValueError, match=r"checkpoint_storage.type: 'gcs' is not supported"):
        build_storage({"type": "gcs", "bucket": "b"})
    with pytest.raises(ValueError, match="host_path: required"):
        build_storage({"type": "shared_fs"})


def test_check_uuid_accepts_uuids() -> None:
    sid = str(uuid.uuid4())
    assert check_uuid(sid) == sid
    assert check_uuid(sid.upper()) == sid.upper()
