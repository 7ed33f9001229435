"""``type: directory`` storage: the shared_fs layout at a path mounted by other means."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from det_hub.config import parse_experiment_config
from det_hub.storage import DirectoryStorage, build_storage, tensorboard_dir


def test_directory_storage_stores_restores_and_deletes(tmp_path: Path) -> None:
    storage = build_storage({"type": "directory", "container_path": str(tmp_path / "ckpts")})
    assert isinstance(storage, DirectoryStorage)
    ckpt = str(uuid.uuid4())
    with storage.store_path(ckpt) as path:
        (path / "model.bin").write_bytes(b"\0" * 100)
        (path / "sub").mkdir()
        (path / "sub" / "opt.bin").write_bytes(b"x" * 7)
    assert storage.resources(ckpt) == {"model.bin": 100, "sub/opt.bin": 7}
    with storage.restore_path(ckpt) as restored:
        assert (restored / "sub" / "opt.bin").read_bytes() == b"x" * 7
    assert tensorboard_dir(4, {"type": "directory", "container_path": str(tmp_path / "ckpts")}
                           ) == tmp_path / "ckpts" / "tensorboard" / "experiment" / "4"
    storage.delete(ckpt)
    assert not (tmp_path / "ckpts" / ckpt).exists()


def test_a_path_not_mounted_here_is_left_alone_with_a_reason(tmp_path: Path) -> None:
    storage = build_storage({"type": "directory",
                             "container_path": str(tmp_path / "only-in-containers")})
    ckpt = str(uuid.uuid4())
    with pytest.raises(FileNotFoundError, match="is not mounted here: the files of checkpoint"):
        storage.delete(ckpt)
    assert not (tmp_path / "only-in-containers").exists()


def test_directory_config_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match="checkpoint_storage.container_path: required"):
        build_storage({"type": "directory"})
    config = parse_experiment_config({
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "checkpoint_storage": {"type": "directory", "container_path": "/mnt/ckpts",
                               "save_trial_best": 2}})
    assert config.checkpoint_storage is not None
    assert config.checkpoint_storage.type == "directory"
