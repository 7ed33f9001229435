"""Saving and loading checkpoints, and telling the master about them."""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from det_hub.core._distributed import DistributedContext
from det_hub.core._http import MasterError, MasterSession
from det_hub.core._train import TrainContext, to_jsonable
from det_hub.storage import (
    CheckpointIntegrityError,
    StorageManager,
    check_uuid,
    directory_resources,
)

logger = logging.getLogger("det_hub.core")

METADATA_FILE = "metadata.json"


class DownloadMode(enum.Enum):
    """How the workers of one node fetch a checkpoint in :meth:`CheckpointContext.download`
    and :meth:`CheckpointContext.restore_path`.

    ``LocalWorkersShareDownload`` (the default): the workers of a node (the same
    ``cross_rank``) share one copy, fetched by the node's local chief; every local worker must
    make the call together. When every local worker gives a ``selector``, the copy holds the
    files any of them accepts.
    ``NoSharedDownload``: every worker fetches on its own, without waiting for the others.
    """

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


def _download_mode(mode: DownloadMode | str) -> DownloadMode:
    try:
        return DownloadMode(mode)
    except ValueError:
        choices = ", ".join(f"DownloadMode.{m.name} ({m.value!r})" for m in DownloadMode)
        raise ValueError(f"download_mode {mode!r} is not one of {choices}") from None


#: The exception classes a worker sharing a download raises again, by name, when the local
#: chief failed with one of them (or a subclass); any other failure becomes a RuntimeError.
_SHARED_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        CheckpointIntegrityError,
        FileNotFoundError,
        PermissionError,
        OSError,
        ValueError,
        TypeError,
    )
}


def _describe(exc: BaseException) -> tuple[str, str]:
    """The name of the class in :data:`_SHARED_ERRORS` that ``exc`` is an instance of
    (``RuntimeError`` for none) and its message, to send to the other local workers."""
    kind = next((c.__name__ for c in type(exc).__mro__ if c.__name__ in _SHARED_ERRORS
                 and _SHARED_ERRORS[c.__name__] is c), "RuntimeError")
    return kind, f"{type(exc).__name__}: {exc}"


class _Failure(Exception):
    """Why the local chief fetches nothing for the workers of its node; ``kind`` names the
    class (in :data:`_SHARED_ERRORS`, else RuntimeError) every local worker raises."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _clean_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"checkpoint metadata must be a dict, not {type(metadata).__name__}")
    return {str(k): to_jsonable(v, f"metadata.{k}") for k, v in metadata.items()}


def _write_metadata(path: Path, metadata: dict[str, Any]) -> None:
    (path / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True), "utf-8")


class CheckpointContext:
    """Stores checkpoints in the experiment's checkpoint storage and reports them.

    Each checkpoint is a directory named by a uuid (the ``storage_id``). Its metadata is
    written into it as ``metadata.json`` and, inside a cluster, sent to the master with the
    sizes of its files. Outside a cluster nothing is reported and :meth:`get_metadata` reads
    ``metadata.json``.
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        storage: StorageManager,
        session: MasterSession | None = None,
        trial_id: int | None = None,
        train: TrainContext | None = None,
    ) -> None:
        self._dist = distributed
        self._storage = storage
        self._session = session
        self._trial_id = trial_id
        #: Its queued metrics are sent before a checkpoint is reported (see _report).
        self._train = train

    @property
    def storage(self) -> StorageManager:
        """The storage backend checkpoints go to."""
        return self._storage

    @contextlib.contextmanager
    def store_path(
        self, metadata: Mapping[str, Any] | None = None, shard: bool = False
    ) -> Iterator[tuple[Path, str]]:
        """A directory to write a new checkpoint into, and the checkpoint's id.

        After the ``with`` body the directory's files are measured, ``metadata.json`` is
        written, the files are stored (uploaded, for object stores) and only then is the
        checkpoint reported to the master as COMPLETED: a checkpoint whose files did not all
        reach storage is never reported. With ``shard=True`` the chief reports it only once
        every rank has stored its part.

        Args:
            metadata: Free-form JSON metadata; ``steps_completed`` in it is the step the
                checkpoint belongs to.
            shard: True when every rank writes part of the checkpoint (all ranks must enter
                together); False when only the chief saves.

        Yields:
            ``(path, storage_id)``.

        Raises:
            RuntimeError: A worker other than the chief calls it with ``shard=False``, or
                (``shard=True``) another rank could not store its part.
            OSError: The files could not be stored.
        """
        meta = _clean_metadata(metadata)
        if not shard and not self._dist.is_chief:
            raise RuntimeError(
                "store_path(shard=False) may only be called on the chief; "
                "use shard=True when every rank writes part of the checkpoint"
            )
        storage_id = str(uuid.uuid4()) if self._dist.is_chief else ""
        if shard:
            storage_id = self._dist.broadcast(storage_id)
        measured = False
        failure: Exception | None = None
        try:
            with self._storage.store_path(storage_id) as path:
                yield path, storage_id
                own = directory_resources(path)
                parts = self._dist.gather(own) if shard else [own]
                if self._dist.is_chief:
                    assert parts is not None
                    if shard:
                        merged_meta: dict[str, Any] = {}
                        for m in self._dist.gather(meta) or []:
                            merged_meta.update(m)
                        meta = merged_meta
                    else:
                        meta = dict(meta)
                    _write_metadata(path, meta)
                    resources: dict[str, int] = {}
                    for part in parts:
                        resources.update(part)
                    resources[METADATA_FILE] = (path / METADATA_FILE).stat().st_size
                elif shard:
                    self._dist.gather(meta)
                measured = True
        except Exception as exc:
            # Storing failed after every rank measured its files (an upload at the end of the
            # body): the other ranks are about to wait in the allgather below for this one.
            if not (shard and measured):
                raise
            failure = exc
        if shard:
            # Every rank's files are in storage before the chief declares the checkpoint done.
            failures = self._dist.allgather(
                None if failure is None else f"rank {self._dist.rank}: {failure}"
            )
            if failure is not None:
                raise failure
            failed = [f for f in failures if f]
            if failed:
                if self._dist.is_chief:
                    self._discard(storage_id)
                raise RuntimeError(
                    f"checkpoint {storage_id} was not stored, so it is not reported: "
                    + "; ".join(failed)
                )
        if self._dist.is_chief:
            self._report(storage_id, dict(sorted(resources.items())), meta)

    def upload(
        self,
        ckpt_dir: str | os.PathLike[str] | None,
        metadata: Mapping[str, Any] | None = None,
        *,
        shard: bool = False,
    ) -> str:
        """Store the files of ``ckpt_dir`` as a new checkpoint and return its id.

        ``ckpt_dir`` itself is left unchanged; ``metadata.json`` is written into the stored
        copy. With ``shard=True`` every rank uploads its own ``ckpt_dir`` (None for none).

        Raises:
            RuntimeError: A worker other than the chief calls it with ``shard=False``.
        """
        with self.store_path(metadata, shard=shard) as (path, storage_id):
            if ckpt_dir is not None:
                shutil.copytree(ckpt_dir, path, dirs_exist_ok=True)
        return storage_id

    def _discard(self, storage_id: str) -> None:
        """Remove the parts of a checkpoint that will not be reported (best effort)."""
        try:
            self._storage.delete(storage_id)
        except Exception:
            logger.exception("could not remove the parts of unreported checkpoint %s",
                             storage_id)

    def _saved_resources(self, storage_id: str) -> dict[str, int] | None:
        """The sizes the checkpoint's files were saved with, as the master recorded them, to
        check a restore against; None outside a cluster, or when the master has no record
        this trial may read (a checkpoint of another experiment)."""
        if self._session is None:
            return None
        try:
            body = self._session.get(f"/checkpoints/{storage_id}")
        except MasterError as exc:
            if exc.status in (403, 404):
                return None
            raise
        found = body.get("checkpoint", {}).get("resources")
        return {str(k): int(v) for k, v in found.items()} if isinstance(found, Mapping) else None

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode | str = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Callable[[str], bool] | None = None,
    ) -> Iterator[Path]:
        """A local directory holding checkpoint ``storage_id``; read from it in the body only.

        Inside a cluster the files are checked against the sizes the master recorded (only
        the selected ones, with a ``selector``).

        With ``DownloadMode.LocalWorkersShareDownload`` (the default) and more than one worker
        on this node, every local worker must call it together: the local chief fetches the
        checkpoint once, every local worker reads the same directory, and the chief lets it go
        only after every local worker's body has ended.

        Args:
            storage_id: The checkpoint's id.
            download_mode: A :class:`DownloadMode`, or its value as a string.
            selector: Given each file's path relative to the checkpoint (POSIX, such as
                ``model/weights.bin``), whether the directory must hold it; None for every
                file. Workers sharing a download get the files any of their selectors accepts
                (every file, when one of them gives no selector).

        Raises:
            FileNotFoundError: No such checkpoint in storage.
            det_hub.storage.CheckpointIntegrityError: A file is missing or of another size.
            ValueError: ``storage_id`` is not a uuid, or ``download_mode`` is not a
                :class:`DownloadMode`.
            RuntimeError: Sharing a download, the local chief failed in some other way.
        """
        mode = _download_mode(download_mode)
        if mode is DownloadMode.NoSharedDownload or self._dist.get_local_size() == 1:
            check_uuid(storage_id)
            resources = self._saved_resources(storage_id)
            with self._storage.restore_path(
                storage_id, resources=resources, selector=selector
            ) as path:
                yield path
            return
        with self._shared_restore(storage_id, selector) as path:
            yield path

    def download(
        self,
        storage_id: str,
        ckpt_dir: str | os.PathLike[str],
        download_mode: DownloadMode | str = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Callable[[str], bool] | None = None,
    ) -> None:
        """Copy checkpoint ``storage_id`` into ``ckpt_dir`` (checked as :meth:`restore_path`
        checks).

        With ``DownloadMode.LocalWorkersShareDownload`` (the default) and more than one worker
        on this node, every local worker must call it together with the same ``ckpt_dir``:
        the local chief writes it once, and the call returns on every local worker when the
        chief has finished.

        Args:
            storage_id: The checkpoint's id.
            ckpt_dir: The directory to copy into (created when missing).
            download_mode: As for :meth:`restore_path`.
            selector: As for :meth:`restore_path`: only the files it accepts are copied.

        Raises:
            As :meth:`restore_path`; also ValueError when workers sharing a download give
            different ``ckpt_dir``.
        """
        mode = _download_mode(download_mode)
        if mode is DownloadMode.NoSharedDownload or self._dist.get_local_size() == 1:
            check_uuid(storage_id)
            resources = self._saved_resources(storage_id)
            self._storage.download(storage_id, ckpt_dir, resources=resources, selector=selector)
            return
        target = os.path.abspath(os.fspath(ckpt_dir))
        if not self._dist.is_local_chief:
            self._agree_selection(storage_id, selector, target)
            outcome = self._dist.broadcast_local(None)
            if outcome is not None:
                raise self._worker_error(storage_id, "downloaded", outcome)
            return
        try:
            resources, chosen = self._agree_selection(storage_id, selector, target)
            self._storage.download(storage_id, target, resources=resources, selector=chosen)
        except _Failure as exc:
            self._dist.broadcast_local((exc.kind, str(exc)))
            raise self._worker_error(storage_id, "downloaded", (exc.kind, str(exc))) from None
        except Exception as exc:
            self._dist.broadcast_local(_describe(exc))
            raise
        self._dist.broadcast_local(None)

    def _agree_selection(
        self, storage_id: str, selector: Callable[[str], bool] | None, target: str | None
    ) -> tuple[dict[str, int] | None, Callable[[str], bool] | None]:
        """Agree with the other local workers on what the local chief fetches.

        Every local worker calls it together; no worker raises before the others have
        answered, so that none is left waiting. The local chief lists the checkpoint's files
        (only when it has a selector itself: otherwise every file is wanted anyway) and
        sends the names to the others; each answers which its selector accepts (None for
        all), and the chief takes the union. Workers also check that they ask for what the
        chief asks for (``storage_id``, and ``target``, the directory to download into).

        Returns:
            On the local chief, the master's record of the files' sizes (None without one)
            and the selector to fetch with (None for every file); ``(None, None)`` on the
            other workers.

        Raises:
            _Failure: On the local chief only, after every local worker has answered: the
                files could not be listed, or a worker's selector or arguments failed.
        """
        listing: dict[str, Any] = {"storage_id": storage_id, "target": target}
        resources: dict[str, int] | None = None
        if self._dist.is_local_chief:
            try:
                resources = self._saved_resources(check_uuid(storage_id))
                if selector is not None:
                    names = resources if resources is not None else self._storage.resources(
                        storage_id
                    )
                    listing["names"] = sorted(names)
            except Exception as exc:
                listing["error"] = _describe(exc)
        listing = self._dist.broadcast_local(listing)
        answer: dict[str, Any] = {"rank": self._dist.get_rank()}
        try:
            check_uuid(storage_id)
            if "error" in listing:
                pass
            elif listing["storage_id"] != storage_id:
                raise ValueError(
                    f"it asked for checkpoint {storage_id}, the local chief for "
                    f"{listing['storage_id']}; local workers sharing a download must ask for "
                    "the same checkpoint"
                )
            elif listing["target"] != target:
                raise ValueError(
                    f"it downloads into {target}, the local chief into {listing['target']}; "
                    "local workers sharing a download must give the same ckpt_dir (or use "
                    "DownloadMode.NoSharedDownload)"
                )
            elif selector is not None and "names" in listing:
                answer["names"] = [name for name in listing["names"] if selector(name)]
        except Exception as exc:
            answer["error"] = _describe(exc)
        answers = self._dist.gather_local(answer)
        if not self._dist.is_local_chief:
            return None, None
        assert answers is not None
        problems: list[tuple[str, str]] = []
        if "error" in listing:
            kind, message = listing["error"]
            problems.append((kind, f"its files could not be listed: {message}"))
        for a in answers:
            if "error" in a:
                kind, message = a["error"]
                problems.append((kind, f"rank {a['rank']}: {message}"))
        if problems:
            raise _Failure(
                problems[0][0],
                f"checkpoint {storage_id} was not fetched for the workers of this node: "
                + "; ".join(message for _kind, message in problems),
            )
        if any("names" not in a for a in answers):
            return resources, None  # some worker wants every file
        union = frozenset(name for a in answers for name in a["names"])
        return resources, union.__contains__

    @contextlib.contextmanager
    def _shared_restore(
        self, storage_id: str, selector: Callable[[str], bool] | None
    ) -> Iterator[Path]:
        """:meth:`restore_path` for the local workers of a node sharing one fetch."""
        if not self._dist.is_local_chief:
            self._agree_selection(storage_id, selector, None)
            outcome = self._dist.broadcast_local(None)
            if outcome[0] == "error":
                raise self._worker_error(storage_id, "restored", outcome[1])
            try:
                yield Path(outcome[1])
            finally:
                self._dist.allgather_local(None)  # the chief keeps the directory until here
            return
        with contextlib.ExitStack() as stack:
            try:
                resources, chosen = self._agree_selection(storage_id, selector, None)
                path = stack.enter_context(
                    self._storage.restore_path(storage_id, resources=resources, selector=chosen)
                )
            except _Failure as exc:
                self._dist.broadcast_local(("error", (exc.kind, str(exc))))
                raise self._worker_error(
                    storage_id, "restored", (exc.kind, str(exc))
                ) from None
            except Exception as exc:
                self._dist.broadcast_local(("error", _describe(exc)))
                raise
            self._dist.broadcast_local(("path", str(path)))
            try:
                yield path
            finally:
                self._dist.allgather_local(None)  # every local worker's body has ended

    @staticmethod
    def _worker_error(storage_id: str, done: str, outcome: tuple[str, str]) -> Exception:
        """The error a local worker raises when the local chief could not fetch the
        checkpoint for it (``outcome``: the error's class name and message)."""
        kind, message = outcome
        cls = _SHARED_ERRORS.get(kind, RuntimeError)
        if message.startswith(f"checkpoint {storage_id} "):
            return cls(message)
        return cls(
            f"checkpoint {storage_id} could not be {done} by the local chief for the workers "
            f"of this node: {message}"
        )

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The metadata stored with checkpoint ``storage_id``.

        Inside a cluster the master's record is read; outside, the checkpoint's
        ``metadata.json``.
        """
        check_uuid(storage_id)
        if self._session is not None:
            body = self._session.get(f"/checkpoints/{storage_id}")
            return dict(body["checkpoint"].get("metadata") or {})
        with self._storage.restore_path(storage_id) as path:
            meta_file = path / METADATA_FILE
            if not meta_file.exists():
                return {}
            loaded = json.loads(meta_file.read_text("utf-8"))
            return dict(loaded) if isinstance(loaded, dict) else {}

    def delete(self, storage_id: str) -> None:
        """Remove checkpoint ``storage_id``'s files from storage (chief only).

        The master's record is not changed: the trial-side API has no call for that, and the
        master's own checkpoint GC marks records whose files are gone.
        """
        check_uuid(storage_id)
        if not self._dist.is_chief:
            raise RuntimeError("delete() may only be called on the chief")
        self._storage.delete(storage_id)

    def _report(self, storage_id: str, resources: dict[str, int], metadata: dict[str, Any]) -> None:
        steps = metadata.get("steps_completed")
        steps_completed = steps if isinstance(steps, int) and not isinstance(steps, bool) else 0
        if self._session is None:
            logger.info(
                "checkpoint %s saved in %s (%d files, %d bytes)",
                storage_id,
                self._storage,
                len(resources),
                sum(resources.values()),
            )
            return
        if self._train is not None:
            # The metrics reported before the checkpoint are stored before it is: a trial that
            # dies right after checkpointing loses none of them, and a restart from this
            # checkpoint finds every row up to it.
            self._train.flush()
        body = {
            "uuid": storage_id,
            "trial_id": self._trial_id,
            "steps_completed": steps_completed,
            "resources": resources,
            "metadata": metadata,
            "state": "COMPLETED",
        }
        # Safe to repeat: the uuid names the checkpoint, so a retried POST cannot make two. A
        # 409 after a retry means the first attempt got through; the record then exists.
        try:
            self._session.post("/checkpoints", body, retry=True)
        except MasterError as exc:
            if exc.status != 409:
                raise
            existing = self._session.get(f"/checkpoints/{storage_id}")["checkpoint"]
            if existing.get("trial_id") != self._trial_id:
                raise
