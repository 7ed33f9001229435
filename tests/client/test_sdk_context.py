from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from fake_master import FakeMaster

from det_hub.client import (
    MAX_CONTEXT_BYTES,
    Client,
    ContextError,
    ContextTooLarge,
    context_size,
    pack_context,
)


def _write(root: Path, rel: str, content: bytes = b"x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _members(archive: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def _contents(archive: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                out[member.name] = handle.read()
    return out


def test_round_trip_is_exact(tmp_path: Path) -> None:
    files = {
        "model_def.py": b"class Trial: pass\n",
        "const.yaml": b"name: mnist\n",
        "data/loader.py": b"\x00\x01binary\xff" * 100,
        "data/sub/deep.txt": b"deep",
        "empty.txt": b"",
    }
    for rel, content in files.items():
        _write(tmp_path, rel, content)
    script = _write(tmp_path, "run.sh", b"#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (tmp_path / "empty_dir").mkdir()

    archive = pack_context(tmp_path)

    assert _contents(archive) == {**files, "run.sh": b"#!/bin/sh\necho hi\n"}
    members = _members(archive)
    assert set(members) == {*files, "run.sh", "data", "data/sub", "empty_dir"}
    assert members["data"].isdir() and members["empty_dir"].isdir()
    assert members["run.sh"].mode & 0o111 == 0o111
    # Paths are relative: nothing absolute, nothing climbing out.
    assert all(not name.startswith(("/", "..")) for name in members)


def test_always_skipped_directories(tmp_path: Path) -> None:
    _write(tmp_path, "train.py")
    _write(tmp_path, "__pycache__/train.cpython-311.pyc")
    _write(tmp_path, "pkg/__pycache__/mod.pyc")
    _write(tmp_path, "pkg/mod.py")
    _write(tmp_path, ".git/HEAD")
    _write(tmp_path, ".ipynb_checkpoints/nb-checkpoint.ipynb")
    _write(tmp_path, "pkg/.ipynb_checkpoints/x.ipynb")
    _write(tmp_path, ".gitignore")  # a file, not the .git directory: kept

    assert set(_contents(pack_context(tmp_path))) == {"train.py", "pkg/mod.py", ".gitignore"}


def test_detignore_globs(tmp_path: Path) -> None:
    (tmp_path / ".detignore").write_text(
        "# data sets stay on the shared disk\n"
        "\n"
        "*.ckpt\n"
        "!keep.ckpt\n"
        "datasets/\n"
        "/top_only.txt\n"
        "logs/**/*.log\n"
    )
    for rel in (
        "train.py",
        "model.ckpt",
        "sub/old.ckpt",
        "keep.ckpt",
        "datasets/big.bin",
        "sub/datasets/nested.bin",
        "top_only.txt",
        "sub/top_only.txt",
        "logs/a/b/run.log",
        "logs/readme.md",
    ):
        _write(tmp_path, rel)

    packed = set(_contents(pack_context(tmp_path)))

    assert packed == {  # the .detignore itself stays behind, as with Determined's CLI
        "train.py",
        "keep.ckpt",
        "sub/top_only.txt",  # "/top_only.txt" is anchored at the top
        "logs/readme.md",
    }
    assert not any(name.startswith(("datasets", "sub/datasets")) for name in _members(pack_context(tmp_path)))


def test_symlinks_are_followed_and_their_files_packed(tmp_path: Path) -> None:
    """As Determined's CLI does: a context may be a directory of links (its own mnist
    fixture is), and the archive holds the files they lead to."""
    _write(tmp_path, "context/data/real.txt", b"real")
    _write(tmp_path, "elsewhere/model_def.py", b"class Trial: ...\n")
    _write(tmp_path, "elsewhere/pkg/util.py", b"X = 1\n")
    context = tmp_path / "context"
    os.symlink(context / "data" / "real.txt", context / "alias.txt")  # inside, absolute
    os.symlink("data", context / "data_link")  # a directory inside
    os.symlink(tmp_path / "elsewhere" / "model_def.py", context / "model_def.py")  # outside
    os.symlink("../elsewhere/pkg", context / "pkg")  # a directory outside, relative

    archive = pack_context(context)

    assert _contents(archive) == {
        "alias.txt": b"real", "data/real.txt": b"real", "data_link/real.txt": b"real",
        "model_def.py": b"class Trial: ...\n", "pkg/util.py": b"X = 1\n"}
    members = _members(archive)
    assert not any(m.issym() or m.islnk() for m in members.values())
    assert members["pkg"].isdir() and members["data_link"].isdir()


def test_a_broken_symlink_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "train.py")
    os.symlink("gone.txt", tmp_path / "dangling")
    with pytest.raises(ContextError, match="dangling is a symbolic link to gone.txt"):
        pack_context(tmp_path)


def test_a_symlink_loop_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "sub/train.py")
    os.symlink("..", tmp_path / "sub" / "up")
    with pytest.raises(ContextError, match="sub/up is a symbolic link to a directory that holds"):
        pack_context(tmp_path)


def test_ignored_symlinks_are_not_followed(tmp_path: Path) -> None:
    context = tmp_path / "context"
    _write(context, "train.py")
    (context / ".detignore").write_text("shared_data\nbroken\n")
    os.symlink(tmp_path, context / "shared_data")  # would hold the context itself
    os.symlink("nowhere", context / "broken")

    assert set(_contents(pack_context(context))) == {"train.py"}


def test_determineds_default_ignores(tmp_path: Path) -> None:
    for rel in ("train.py", "m.pyc", "sub/m.pyo", ".vscode/settings.json", ".idea/x.xml",
                ".mypy_cache/x.json", "terraform.tfstate", "shared_fs/x", "sub/shared_fs/y"):
        _write(tmp_path, rel)
    # "/shared_fs" is anchored: only the top one is Determined's mount point.
    assert set(_contents(pack_context(tmp_path))) == {"train.py", "sub/shared_fs/y"}


def test_too_large_names_size_and_limit(tmp_path: Path) -> None:
    _write(tmp_path, "train.py")
    big = tmp_path / "weights.bin"
    with big.open("wb") as handle:  # sparse: takes no disk space, and is never read
        handle.truncate(MAX_CONTEXT_BYTES + 1024 * 1024)

    assert context_size(tmp_path) == MAX_CONTEXT_BYTES + 1024 * 1024 + 1
    with pytest.raises(ContextTooLarge) as info:
        pack_context(tmp_path)
    assert info.value.size == MAX_CONTEXT_BYTES + 1024 * 1024 + 1
    assert info.value.limit == MAX_CONTEXT_BYTES
    assert "97.0 MiB" in str(info.value) and "96.0 MiB" in str(info.value)


def test_exactly_at_limit_is_accepted(tmp_path: Path) -> None:
    _write(tmp_path, "a.bin", b"a" * 600)
    _write(tmp_path, "b.bin", b"b" * 400)
    assert set(_contents(pack_context(tmp_path, limit=1000))) == {"a.bin", "b.bin"}
    with pytest.raises(ContextTooLarge):
        pack_context(tmp_path, limit=999)


def test_ignored_large_file_does_not_count(tmp_path: Path) -> None:
    _write(tmp_path, "train.py")
    (tmp_path / ".detignore").write_text("*.bin\n")
    with (tmp_path / "huge.bin").open("wb") as handle:
        handle.truncate(MAX_CONTEXT_BYTES * 2)
    assert set(_contents(pack_context(tmp_path))) == {"train.py"}


def test_too_large_context_sends_nothing(tmp_path: Path, fake_master: FakeMaster) -> None:
    fake_master.json("POST", "/experiments", {"experiment": {"id": 1}}, status=201)
    with (tmp_path / "huge.bin").open("wb") as handle:
        handle.truncate(MAX_CONTEXT_BYTES + 1)

    with pytest.raises(ContextTooLarge):
        Client(fake_master.url, "t").create_experiment("name: x\n", tmp_path)
    assert fake_master.requests == []


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ContextError, match="does not exist"):
        pack_context(tmp_path / "nope")
    _write(tmp_path, "file.txt")
    with pytest.raises(ContextError, match="not a directory"):
        pack_context(tmp_path / "file.txt")
