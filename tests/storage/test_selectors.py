"""Fetching only some files of a checkpoint: ``selector`` on the storage backends' download()
and restore_path(), with the saved sizes checked for the selected files only."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest

from det_hub.storage import (
    CheckpointIntegrityError,
    DirectoryStorage,
    S3Storage,
    SharedFSStorage,
    StorageManager,
)
from det_hub.storage._base import select_files
from det_hub.testing_s3 import SeaweedS3

FILES = {"a.bin": 3, "c.txt": 2, "sub/b.bin": 5, "sub/deep/d.txt": 4}


def is_bin(name: str) -> bool:
    return name.endswith(".bin")


def save(storage: StorageManager) -> str:
    sid = str(uuid.uuid4())
    with storage.store_path(sid) as path:
        for name, size in FILES.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(name[0].encode() * size)
    return sid


def files_under(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_select_files_asks_once_per_name_and_checks_only_the_selected() -> None:
    asked: list[str] = []

    def selector(name: str) -> bool:
        asked.append(name)
        return name != "b"

    found = {"a": 1, "b": 2}
    assert select_files("x", found, {"a": 1, "b": 99}, selector) == {"a": 1}
    assert sorted(asked) == ["a", "b"]
    assert select_files("x", found, None, None) == found
    with pytest.raises(CheckpointIntegrityError, match="c is missing"):
        select_files("x", found, {"a": 1, "c": 3}, selector)
    with pytest.raises(CheckpointIntegrityError, match="b is 2 bytes, but was saved with 99"):
        select_files("x", found, {"a": 1, "b": 99}, None)


@pytest.mark.parametrize("kind", ["shared_fs", "directory"])
def test_shared_fs_download_copies_the_selected_files_in_their_directories(
        tmp_path: Path, kind: str) -> None:
    storage = (SharedFSStorage(tmp_path / "store") if kind == "shared_fs"
               else DirectoryStorage(tmp_path / "store"))
    sid = save(storage)
    storage.download(sid, tmp_path / "dl", selector=is_bin)
    assert files_under(tmp_path / "dl") == {"a.bin": 3, "sub/b.bin": 5}
    assert (tmp_path / "dl" / "sub" / "b.bin").read_bytes() == b"sssss"
    # Nothing selected: an empty directory.
    storage.download(sid, tmp_path / "none", selector=lambda name: False)
    assert (tmp_path / "none").is_dir() and files_under(tmp_path / "none") == {}
    # Without a selector, everything, as before.
    storage.download(sid, tmp_path / "all")
    assert files_under(tmp_path / "all") == FILES


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory temporary directories are made in, for this test."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_shared_fs_restore_path_with_a_selector_is_a_temporary_copy(
        tmp_path: Path, temp_root: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    sid = save(storage)
    with storage.restore_path(sid, selector=lambda name: name.startswith("sub/")) as path:
        assert path.parent == temp_root
        assert files_under(path) == {"sub/b.bin": 5, "sub/deep/d.txt": 4}
    assert not path.exists() and list(temp_root.iterdir()) == []
    assert files_under(tmp_path / "store" / sid) == FILES  # the checkpoint is untouched
    with storage.restore_path(sid) as stored:
        assert stored == tmp_path / "store" / sid
    assert stored.exists()


def test_shared_fs_checks_the_saved_sizes_of_the_selected_files_only(
        tmp_path: Path, temp_root: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    sid = save(storage)
    saved = dict(FILES)
    (tmp_path / "store" / sid / "c.txt").write_bytes(b"longer than saved")
    (tmp_path / "store" / sid / "sub" / "deep" / "d.txt").unlink()
    # The damaged files are not selected: no complaint.
    storage.download(sid, tmp_path / "dl", resources=saved, selector=is_bin)
    assert files_under(tmp_path / "dl") == {"a.bin": 3, "sub/b.bin": 5}
    with storage.restore_path(sid, resources=saved, selector=is_bin) as path:
        assert files_under(path) == {"a.bin": 3, "sub/b.bin": 5}
    # Selected, they are refused before anything is copied.
    with pytest.raises(CheckpointIntegrityError) as err:
        storage.download(sid, tmp_path / "bad", resources=saved,
                         selector=lambda name: name.endswith(".txt"))
    assert "c.txt is 17 bytes, but was saved with 2 bytes" in str(err.value)
    assert "sub/deep/d.txt is missing (saved with 4 bytes)" in str(err.value)
    assert not (tmp_path / "bad").exists() or files_under(tmp_path / "bad") == {}
    with pytest.raises(CheckpointIntegrityError, match=f"checkpoint {sid} is damaged: c.txt"), \
            storage.restore_path(sid, resources=saved, selector=lambda name: name == "c.txt"):
        pass
    assert list(temp_root.iterdir()) == []  # the failed restore's directory is gone
    with pytest.raises(FileNotFoundError), \
            storage.restore_path(str(uuid.uuid4()), selector=is_bin):
        pass


def test_s3_downloads_only_the_selected_objects(
        s3_server: SeaweedS3, s3_bucket: str, tmp_path: Path) -> None:
    store = S3Storage(s3_bucket, "ckpts", endpoint_url=s3_server.endpoint_url,
                      access_key=s3_server.access_key, secret_key=s3_server.secret_key)
    sid = save(store)
    fetched: list[str] = []

    def count_gets(params: dict[str, object], **kwargs: object) -> None:
        fetched.append(str(params["url_path"]).rsplit(f"/{sid}/", 1)[1])

    store.client.meta.events.register("before-call.s3.GetObject", count_gets)
    store.download(sid, tmp_path / "dl", resources=FILES, selector=is_bin)
    assert files_under(tmp_path / "dl") == {"a.bin": 3, "sub/b.bin": 5}
    assert sorted(fetched) == ["a.bin", "sub/b.bin"]

    fetched.clear()
    with store.restore_path(sid, resources=FILES, selector=lambda n: n == "c.txt") as path:
        assert files_under(path) == {"c.txt": 2}
    assert not path.exists()
    assert fetched == ["c.txt"]

    # An object that is not selected may be damaged; a selected one may not.
    s3_server.client().put_object(Bucket=s3_bucket, Key=f"ckpts/{sid}/c.txt", Body=b"much longer")
    fetched.clear()
    store.download(sid, tmp_path / "dl2", resources=FILES, selector=is_bin)
    assert files_under(tmp_path / "dl2") == {"a.bin": 3, "sub/b.bin": 5}
    with pytest.raises(CheckpointIntegrityError, match="c.txt is 11 bytes, but was saved with 2"):
        store.download(sid, tmp_path / "dl3", resources=FILES, selector=lambda n: n == "c.txt")
    assert not (tmp_path / "dl3").exists() or files_under(tmp_path / "dl3") == {}
    with pytest.raises(FileNotFoundError, match="not found"):
        store.download(str(uuid.uuid4()), tmp_path / "dl4", selector=is_bin)
