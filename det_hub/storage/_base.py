"""The interface every checkpoint storage backend implements."""

from __future__ import annotations

import abc
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def check_uuid(storage_id: str) -> str:
    """Return ``storage_id`` if it is a plain uuid string (``8-4-4-4-12`` hex digits).

    Checkpoint ids become directory and object names, so anything else (``..``, slashes,
    absolute paths) is refused before it reaches the file system.

    Raises:
        ValueError: It is not a plain uuid.
    """
    if not isinstance(storage_id, str) or not _UUID_RE.fullmatch(storage_id):
        raise ValueError(f"checkpoint id {storage_id!r} is not a plain uuid string")
    return storage_id


def directory_resources(path: str | os.PathLike[str]) -> dict[str, int]:
    """The files under ``path``: relative POSIX path to size in bytes, sorted by path."""
    root = Path(path)
    found: dict[str, int] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            full = Path(dirpath, name)
            found[full.relative_to(root).as_posix()] = full.stat().st_size
    return dict(sorted(found.items()))


class StorageManager(abc.ABC):
    """Where checkpoints live. Every checkpoint is a directory of files named by a uuid."""

    def tensorboard_path(self, experiment_id: int, trial_id: int | None = None) -> Path | None:
        """The local directory of a trial's TensorBoard event files (of the experiment's, when
        ``trial_id`` is None), or None when this storage keeps none (the default).

        Backends that keep them use one layout under their root::

            tensorboard/experiment/<experiment_id>/trial/<trial_id>/events.out.tfevents.*

        so that a TensorBoard started on ``tensorboard/experiment/<experiment_id>/`` shows each
        trial of the experiment as a run named ``trial/<trial_id>``.
        """
        del experiment_id, trial_id
        return None

    @abc.abstractmethod
    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[Path]:
        """A local directory to write checkpoint ``storage_id`` into.

        When the ``with`` body ends normally the checkpoint is in storage. Backends that
        cannot write in place (object stores) upload the directory at that point.
        """

    @abc.abstractmethod
    def upload(self, src_dir: str | os.PathLike[str], storage_id: str) -> None:
        """Copy the files of ``src_dir`` into checkpoint ``storage_id``."""

    @abc.abstractmethod
    def download(self, storage_id: str, dst_dir: str | os.PathLike[str]) -> None:
        """Copy checkpoint ``storage_id`` into ``dst_dir`` (created when missing).

        Raises:
            FileNotFoundError: No such checkpoint.
        """

    @abc.abstractmethod
    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        """A local directory holding checkpoint ``storage_id``, to read from in the body.

        Raises:
            FileNotFoundError: No such checkpoint.
        """

    @abc.abstractmethod
    def delete(self, storage_id: str) -> None:
        """Remove checkpoint ``storage_id``; removing one that is gone is not an error."""

    @abc.abstractmethod
    def resources(self, storage_id: str) -> dict[str, int]:
        """The checkpoint's files: relative POSIX path to size in bytes.

        Raises:
            FileNotFoundError: No such checkpoint.
        """
