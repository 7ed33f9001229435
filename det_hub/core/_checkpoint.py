"""Saving and loading checkpoints, and telling the master about them."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from det_hub.core._distributed import DistributedContext
from det_hub.core._http import MasterError, MasterSession
from det_hub.core._train import to_jsonable
from det_hub.storage import StorageManager, check_uuid, directory_resources

logger = logging.getLogger("det_hub.core")

METADATA_FILE = "metadata.json"


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
    ) -> None:
        self._dist = distributed
        self._storage = storage
        self._session = session
        self._trial_id = trial_id

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
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        """A local directory holding checkpoint ``storage_id``; read from it in the body only.

        Inside a cluster the files are checked against the sizes the master recorded.

        Raises:
            FileNotFoundError: No such checkpoint in storage.
            det_hub.storage.CheckpointIntegrityError: A file is missing or of another size.
            ValueError: ``storage_id`` is not a uuid.
        """
        check_uuid(storage_id)
        resources = self._saved_resources(storage_id)
        with self._storage.restore_path(storage_id, resources=resources) as path:
            yield path

    def download(self, storage_id: str, ckpt_dir: str | os.PathLike[str]) -> None:
        """Copy checkpoint ``storage_id`` into ``ckpt_dir`` (checked as :meth:`restore_path`
        checks)."""
        check_uuid(storage_id)
        resources = self._saved_resources(storage_id)
        self._storage.download(storage_id, ckpt_dir, resources=resources)

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
