"""Checkpoints in a directory every agent mounts (a local disk on a single host)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from det_hub.storage._base import (
    StorageManager,
    check_uuid,
    directory_resources,
    select_files,
    verify_resources,
)


class SharedFSStorage(StorageManager):
    """Checkpoints as directories ``host_path/storage_path/<uuid>``, and TensorBoard event
    files under ``host_path/storage_path/tensorboard/``.

    Writes go straight into the final directory, and restores read from it, with no copy
    (restores of selected files only copy those into a temporary directory).

    Args:
        host_path: The shared directory.
        storage_path: A sub-directory of ``host_path`` (relative, or absolute inside it).

    Raises:
        ValueError: ``storage_path`` points outside ``host_path``.
    """

    restores_in_place = True

    def __init__(self, host_path: str | os.PathLike[str], storage_path: str | None = None) -> None:
        self.host_path = Path(host_path).expanduser().absolute()
        base = self.host_path
        if storage_path:
            base = Path(os.path.normpath(self.host_path / storage_path))
            if base != self.host_path and self.host_path not in base.parents:
                raise ValueError(
                    f"checkpoint_storage.storage_path {storage_path!r} is outside host_path "
                    f"{str(self.host_path)!r}"
                )
        self.base_path = base

    def _dir(self, storage_id: str) -> Path:
        return self.base_path / check_uuid(storage_id)

    def _existing(self, storage_id: str) -> Path:
        path = self._dir(storage_id)
        if not path.is_dir():
            raise FileNotFoundError(f"checkpoint {storage_id} not found in {self.base_path}")
        return path

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[Path]:
        """The checkpoint's final directory, created for the body to write into.

        If the body raises, a directory created here is removed again so that no half-written
        checkpoint is left behind. Several workers may share one directory (sharded saves).
        """
        path = self._dir(storage_id)
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        try:
            yield path
        except BaseException:
            if created:
                shutil.rmtree(path, ignore_errors=True)
            raise

    def upload(self, src_dir: str | os.PathLike[str], storage_id: str) -> None:
        dst = self._dir(storage_id)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src_dir, dst, dirs_exist_ok=True)

    def download(
        self,
        storage_id: str,
        dst_dir: str | os.PathLike[str],
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> None:
        """Copy the checkpoint's directory, or with ``selector`` only the files it accepts
        (in their sub-directories), into ``dst_dir``."""
        src = self._existing(storage_id)
        files = select_files(storage_id, directory_resources(src), resources, selector)
        if selector is None:
            shutil.copytree(src, dst_dir, dirs_exist_ok=True)
            return
        dst = Path(dst_dir)
        dst.mkdir(parents=True, exist_ok=True)
        for name in files:
            target = dst / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, target)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> Iterator[Path]:
        """The checkpoint's stored directory itself; with ``selector``, a temporary directory
        holding copies of only the files it accepts, removed after the body."""
        path = self._existing(storage_id)
        if selector is None:
            verify_resources(storage_id, directory_resources(path), resources)
            yield path
            return
        tmp = Path(tempfile.mkdtemp(prefix=f"det_hub_restore_{storage_id}_"))
        try:
            self.download(storage_id, tmp, resources=resources, selector=selector)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete(self, storage_id: str) -> None:
        shutil.rmtree(self._dir(storage_id), ignore_errors=True)

    def resources(self, storage_id: str) -> dict[str, int]:
        return directory_resources(self._existing(storage_id))

    def tensorboard_path(self, experiment_id: int, trial_id: int | None = None) -> Path:
        """``base_path/tensorboard/experiment/<experiment_id>[/trial/<trial_id>]``, next to the
        checkpoints (see :meth:`StorageManager.tensorboard_path`)."""
        path = self.base_path.joinpath("tensorboard", "experiment", str(int(experiment_id)))
        return path if trial_id is None else path.joinpath("trial", str(int(trial_id)))

    def __repr__(self) -> str:
        return f"SharedFSStorage({str(self.base_path)!r})"
