"""The interface every checkpoint storage backend implements."""

from __future__ import annotations

import abc
import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
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


class CheckpointIntegrityError(OSError):
    """A stored checkpoint's files are not those it was saved with: one is missing, or its
    size differs from the size recorded when it was saved."""


def verify_resources(
    storage_id: str, found: Mapping[str, int], expected: Mapping[str, int] | None
) -> None:
    """Check that every file of ``expected`` (relative path to size, as the checkpoint was
    saved) is in ``found`` with the same size; no check when ``expected`` is None.

    Raises:
        CheckpointIntegrityError: Naming every file that is missing or of another size.
    """
    if expected is None:
        return
    problems = []
    for name, size in sorted(expected.items()):
        have = found.get(name)
        if have is None:
            problems.append(f"{name} is missing (saved with {size} bytes)")
        elif have != size:
            problems.append(f"{name} is {have} bytes, but was saved with {size} bytes")
    if problems:
        raise CheckpointIntegrityError(
            f"checkpoint {storage_id} is damaged: " + "; ".join(problems)
        )


def select_files(
    storage_id: str,
    found: Mapping[str, int],
    expected: Mapping[str, int] | None,
    selector: Callable[[str], bool] | None,
) -> dict[str, int]:
    """The files of ``found`` (relative path to size) that ``selector`` accepts, all of them
    when it is None, after checking them as :func:`verify_resources` does against the files of
    ``expected`` that ``selector`` accepts. ``selector`` is asked once about each name.

    Raises:
        CheckpointIntegrityError: A selected file of ``expected`` is missing from ``found``, or
            of another size.
    """
    if selector is None:
        verify_resources(storage_id, found, expected)
        return dict(found)
    answers: dict[str, bool] = {}

    def accepts(name: str) -> bool:
        if name not in answers:
            answers[name] = bool(selector(name))
        return answers[name]

    chosen = {name: size for name, size in found.items() if accepts(name)}
    if expected is not None:
        verify_resources(
            storage_id, chosen, {name: size for name, size in expected.items() if accepts(name)}
        )
    return chosen


class StorageManager(abc.ABC):
    """Where checkpoints live. Every checkpoint is a directory of files named by a uuid."""

    #: Whether :meth:`restore_path` without a ``selector`` gives the stored directory itself,
    #: which outlives the ``with`` body (a shared file system); otherwise it gives a temporary
    #: copy.
    restores_in_place: bool = False

    #: Whether TensorBoard files live away from the local file system (an object store).
    #: :meth:`tensorboard_path` is then None: writers keep their event files in a local
    #: directory that :meth:`upload_tensorboard` copies in, and readers fetch them with
    #: :meth:`download_tensorboard`.
    remote_tensorboard: bool = False

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

    def upload_tensorboard(
        self, src_dir: str | os.PathLike[str], experiment_id: int, trial_id: int
    ) -> int:
        """Copy the event files of ``src_dir`` that storage lacks, or holds at another size,
        into the trial's TensorBoard directory in storage (same layout as
        :meth:`tensorboard_path`). Only for backends with :attr:`remote_tensorboard`.

        Returns:
            How many files were copied.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps TensorBoard files in place")

    def download_tensorboard(self, experiment_id: int, dst_dir: str | os.PathLike[str]) -> int:
        """Bring ``dst_dir`` up to date with the experiment's TensorBoard files in storage
        (``trial/<trial_id>/events.out.tfevents.*``). Files that grew in storage are extended
        in place, so that a TensorBoard reading them goes on from where it was. Only for
        backends with :attr:`remote_tensorboard`.

        Returns:
            How many files changed.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps TensorBoard files in place")

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
    def download(
        self,
        storage_id: str,
        dst_dir: str | os.PathLike[str],
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> None:
        """Copy checkpoint ``storage_id`` into ``dst_dir`` (created when missing).

        Args:
            resources: The sizes its files were saved with (the master's record), to check
                the copy against; None checks only that every file arrived whole.
            selector: Given each file's path relative to the checkpoint (POSIX, such as
                ``model/weights.bin``), whether to copy it; None copies every file. Files
                keep their place in the directory tree, and only the selected files of
                ``resources`` are checked.

        Raises:
            FileNotFoundError: No such checkpoint.
            CheckpointIntegrityError: A (selected) file is missing or not the size given in
                ``resources``.
        """

    @abc.abstractmethod
    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> Iterator[Path]:
        """A local directory holding checkpoint ``storage_id``, to read from in the body.

        Args:
            resources: As for :meth:`download`.
            selector: As for :meth:`download`: the directory holds only the files it
                accepts. With a selector the directory is always a temporary copy, removed
                after the body.

        Raises:
            FileNotFoundError: No such checkpoint.
            CheckpointIntegrityError: As for :meth:`download`.
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
