"""Checkpoints as objects in an S3 bucket (AWS, or any S3-compatible server), with boto3."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from det_hub.storage._base import (
    StorageManager,
    check_uuid,
    directory_resources,
    select_files,
    verify_resources,
)

logger = logging.getLogger("det_hub.storage")

MiB = 1024 * 1024

#: boto3 ``TransferConfig`` settings used unless the caller overrides them. Files from the
#: threshold up go up and down in parallel parts of ``multipart_chunksize``; up to
#: ``max_concurrency`` parts, and as many small files, are in flight at once. Chosen with
#: bench/s3_throughput.py: over boto3's defaults (8 MiB, 10 threads), fewer requests per large
#: file and more of them in flight, which matters most where each request waits on a network
#: round trip; settings cannot be told apart where the server's own CPU is the limit.
DEFAULT_TRANSFER_CONFIG: dict[str, Any] = {
    "multipart_threshold": 16 * MiB,
    "multipart_chunksize": 16 * MiB,
    "max_concurrency": 16,
    "io_chunksize": 1 * MiB,
}

#: S3 deletes at most this many keys per request.
_DELETE_BATCH = 1000
#: Tries of a small file's download whose stream broke off.
_GET_ATTEMPTS = 3


class _TransferError(Exception):
    """One file's transfer failed (``cause``); the caller words the error."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(name)
        self.name = name
        self.cause = cause


def _import_boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise ImportError(
            "checkpoint_storage type s3 needs boto3 where it is used: pip install 'det_hub[s3]'"
        ) from None
    return boto3


def _known_size_subscriber(size: int) -> Any:
    """An s3transfer subscriber that tells a download its object's size, which spares it a
    HEAD request per file (the size comes from the listing)."""
    from s3transfer.subscribers import BaseSubscriber

    class KnownSize(BaseSubscriber):
        def on_queued(self, future: Any, **kwargs: Any) -> None:
            future.meta.provide_transfer_size(size)

    return KnownSize()


def _relative_name(key: str, key_prefix: str) -> str:
    """The file name an object stands for under ``key_prefix`` (which ends with ``/``).

    Raises:
        ValueError: The name could escape the directory it is downloaded into.
    """
    rel = key[len(key_prefix):]
    if not rel or rel.startswith("/") or any(p in (".", "..") for p in rel.split("/")):
        raise ValueError(f"object {key!r} has a name that is not a plain relative path")
    return rel


class S3Storage(StorageManager):
    """Checkpoints as objects ``<prefix>/<uuid>/<file>`` in an S3 bucket, and TensorBoard event
    files as ``<prefix>/tensorboard/experiment/<id>/trial/<id>/<file>``.

    Writes go to a local temporary directory that is uploaded when the ``with`` body of
    :meth:`store_path` ends; restores download into one. Uploads and downloads run the files
    of a checkpoint in parallel, large files split into parallel parts (boto3's managed
    transfers), and check sizes. boto3 is imported on first use, so building this object
    needs none.

    Args:
        bucket: The bucket (it must exist).
        prefix: A key prefix, such as ``team/checkpoints``; slashes around it are dropped.
        endpoint_url: The server, for servers other than AWS (``http://127.0.0.1:8333``).
        access_key: With ``secret_key``, the credentials; without them boto3 finds its own
            (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` and the rest of its chain).
        secret_key: See ``access_key``.
        transfer_config: boto3 ``TransferConfig`` settings over :data:`DEFAULT_TRANSFER_CONFIG`.
        client_config: botocore ``Config`` settings, passed through (retries, timeouts,
            ``s3={"addressing_style": "path"}``).

    Raises:
        ValueError: ``prefix`` has ``.`` or ``..`` parts, or only one of the keys is given.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str | None = None,
        *,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        transfer_config: Mapping[str, Any] | None = None,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        parts = [p for p in (prefix or "").split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(
                f"checkpoint_storage.prefix: {prefix!r} must not contain '.' or '..' parts"
            )
        if (access_key is None) != (secret_key is None):
            raise ValueError(
                "checkpoint_storage.access_key and secret_key: give both, or neither"
            )
        self.bucket = bucket
        self.prefix = "/".join(parts)
        self.endpoint_url = endpoint_url
        self._access_key = access_key
        self._secret_key = secret_key
        self.transfer_settings = {**DEFAULT_TRANSFER_CONFIG, **(transfer_config or {})}
        self._client_settings = dict(client_config or {})
        self._client_lock = threading.Lock()
        self._client_obj: Any = None

    # --- boto3 ------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The boto3 S3 client (made on first use; boto3 clients are thread-safe)."""
        with self._client_lock:
            if self._client_obj is None:
                boto3 = _import_boto3()
                from botocore.config import Config

                # Every transfer thread (boto3's, and ours for small files) needs a connection
                # of its own, or they queue for one.
                settings: dict[str, Any] = {
                    "max_pool_connections": 2 * int(self.transfer_settings["max_concurrency"]),
                    "retries": {"max_attempts": 5, "mode": "standard"},
                }
                settings.update(self._client_settings)
                # A session of its own: boto3's default session is not thread-safe.
                session = boto3.session.Session(
                    aws_access_key_id=self._access_key, aws_secret_access_key=self._secret_key
                )
                self._client_obj = session.client(
                    "s3", endpoint_url=self.endpoint_url, config=Config(**settings)
                )
            return self._client_obj

    def _transfer_manager(self) -> Any:
        client = self.client  # imports boto3, or says how to install it
        from boto3.s3.transfer import TransferConfig, create_transfer_manager

        return create_transfer_manager(client, TransferConfig(**self.transfer_settings))

    def _key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def _url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    def _list(self, key_prefix: str) -> dict[str, int]:
        """The objects under ``key_prefix`` (ending with ``/``): relative name to size.

        Raises:
            FileNotFoundError: The bucket does not exist.
        """
        from botocore.exceptions import ClientError

        found: dict[str, int] = {}
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=key_prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    if obj["Key"].endswith("/"):
                        continue  # a "folder" marker some tools write
                    found[_relative_name(obj["Key"], key_prefix)] = int(obj["Size"])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise FileNotFoundError(f"bucket {self.bucket!r} does not exist") from exc
            raise
        return dict(sorted(found.items()))

    def _objects(self, storage_id: str) -> dict[str, int]:
        found = self._list(self._key(check_uuid(storage_id)) + "/")
        if not found:
            raise FileNotFoundError(
                f"checkpoint {storage_id} not found in {self._url(self._key(storage_id))}/"
            )
        return found

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = keys[start:start + _DELETE_BATCH]
            answer = self.client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(
                    f"could not delete {len(errors)} object(s) from {self._url()}, e.g. "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )

    # --- transfers --------------------------------------------------------------------------
    def _small(self, size: int) -> bool:
        return size < int(self.transfer_settings["multipart_threshold"])

    def _put_file(self, path: Path, key: str) -> None:
        with open(path, "rb") as body:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)

    def _get_file(self, key: str, target: Path) -> None:
        """Download one object into a temporary name beside ``target``, then rename it, so
        that a failure leaves no partial file under the real name. Streaming errors are
        retried, as boto3's managed downloads retry them."""
        from s3transfer.utils import S3_RETRYABLE_DOWNLOAD_ERRORS

        partial = target.with_name(f"{target.name}.det_hub-partial")
        try:
            for attempt in range(_GET_ATTEMPTS):
                try:
                    body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
                    with open(partial, "wb") as f:
                        for chunk in body.iter_chunks(int(self.transfer_settings["io_chunksize"])):
                            f.write(chunk)
                    break
                except S3_RETRYABLE_DOWNLOAD_ERRORS:
                    if attempt == _GET_ATTEMPTS - 1:
                        raise
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)

    def _transfer_all(self, files: Mapping[str, int], large: Callable[[Any, str, int], Any],
                      small: Callable[[str, int], None]) -> None:
        """Transfer every file (name to size) at once: ``large(manager, name, size)`` on a
        boto3 transfer manager for files from the multipart threshold up (split into parallel
        parts), ``small(name, size)`` on a thread pool for the rest.

        Small files skip boto3's managed transfers because those cost about twice the CPU per
        file of a plain GetObject / PutObject (measured: 2000 files of 7 kB), which is what
        limits a checkpoint of many small files.

        Raises:
            OSError: Naming the first file that failed; transfers still running are cancelled.
        """
        workers = int(self.transfer_settings["max_concurrency"])
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="det_hub-s3")
        try:
            with self._transfer_manager() as manager:
                futures: list[tuple[str, Future[Any] | Any]] = [
                    (name, large(manager, name, size))
                    for name, size in files.items() if not self._small(size)
                ]
                futures += [(name, pool.submit(small, name, size))
                            for name, size in files.items() if self._small(size)]
                for name, future in futures:
                    try:
                        future.result()
                    except Exception as exc:
                        raise _TransferError(name, exc) from exc
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _upload_files(self, root: Path, files: Mapping[str, int], key_prefix: str) -> None:
        """Upload ``root/<name>`` to ``key_prefix/<name>`` for every file, all at once.

        On a failure the transfers still running are cancelled, the objects this call may
        have written are deleted again (best effort), and an OSError naming the file is
        raised: a checkpoint is never left half-written under its own name by this call.
        """
        try:
            self._transfer_all(
                files,
                lambda manager, name, _size: manager.upload(
                    str(root / name), self.bucket, f"{key_prefix}/{name}"),
                lambda name, _size: self._put_file(root / name, f"{key_prefix}/{name}"),
            )
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self._delete_keys([f"{key_prefix}/{name}" for name in files])
            if isinstance(exc, _TransferError):
                raise OSError(f"uploading {exc.name} to {self._url(key_prefix)}/ failed: "
                              f"{exc.cause}") from exc.cause
            raise

    def _download_files(self, objects: Mapping[str, int], key_prefix: str, dst: Path) -> None:
        """Download ``key_prefix/<name>`` to ``dst/<name>`` for every object, all at once, and
        check each arrived with the size the listing gave."""
        for name in objects:
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._transfer_all(
                objects,
                lambda manager, name, size: manager.download(
                    self.bucket, f"{key_prefix}/{name}", str(dst / name),
                    subscribers=[_known_size_subscriber(size)]),
                lambda name, _size: self._get_file(f"{key_prefix}/{name}", dst / name),
            )
        except _TransferError as exc:
            raise OSError(f"downloading {self._url(key_prefix)}/{exc.name} failed: "
                          f"{exc.cause}") from exc.cause
        arrived = {name: (dst / name).stat().st_size for name in objects}
        verify_resources(PurePosixPath(key_prefix).name, arrived, objects)

    # --- StorageManager ---------------------------------------------------------------------
    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[Path]:
        """A new local temporary directory; its files are uploaded when the body ends
        normally, and it is removed either way (nothing is uploaded if the body raises).

        Several workers may each write part of one checkpoint (sharded saves).

        Raises:
            OSError: The upload failed (what it wrote is deleted again).
        """
        check_uuid(storage_id)
        tmp = Path(tempfile.mkdtemp(prefix=f"det_hub_ckpt_{storage_id}_"))
        try:
            yield tmp
            self.upload(tmp, storage_id)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def upload(self, src_dir: str | os.PathLike[str], storage_id: str) -> None:
        """Upload every file under ``src_dir`` (empty directories have no object to keep).

        Raises:
            OSError: A file could not be uploaded; what this call wrote is deleted again.
        """
        check_uuid(storage_id)
        files = directory_resources(src_dir)
        self._upload_files(Path(src_dir), files, self._key(storage_id))
        logger.debug("uploaded %d files (%d bytes) to %s", len(files), sum(files.values()),
                     self._url(self._key(storage_id)))

    def download(
        self,
        storage_id: str,
        dst_dir: str | os.PathLike[str],
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> None:
        """Download the checkpoint's files, or with ``selector`` only those it accepts, into
        ``dst_dir``.

        With ``resources`` the stored objects (the selected ones) are checked against it
        before anything is downloaded, and every file is checked again once it has arrived.
        """
        objects = select_files(storage_id, self._objects(storage_id), resources, selector)
        dst = Path(dst_dir)
        dst.mkdir(parents=True, exist_ok=True)
        self._download_files(objects, self._key(storage_id), dst)

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        *,
        resources: Mapping[str, int] | None = None,
        selector: Callable[[str], bool] | None = None,
    ) -> Iterator[Path]:
        """A temporary local copy of the checkpoint (of the files ``selector`` accepts),
        removed after the body."""
        check_uuid(storage_id)
        tmp = Path(tempfile.mkdtemp(prefix=f"det_hub_restore_{storage_id}_"))
        try:
            self.download(storage_id, tmp, resources=resources, selector=selector)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete(self, storage_id: str) -> None:
        """Delete every object under the checkpoint's prefix."""
        key_prefix = self._key(check_uuid(storage_id)) + "/"
        try:
            names = self._list(key_prefix)
        except FileNotFoundError:
            return
        self._delete_keys([key_prefix + name for name in names])

    def resources(self, storage_id: str) -> dict[str, int]:
        return self._objects(storage_id)

    # --- TensorBoard ------------------------------------------------------------------------
    remote_tensorboard = True

    def _tensorboard_key(self, experiment_id: int, trial_id: int | None = None) -> str:
        parts = ["tensorboard", "experiment", str(int(experiment_id))]
        if trial_id is not None:
            parts += ["trial", str(int(trial_id))]
        return self._key(*parts)

    def upload_tensorboard(
        self, src_dir: str | os.PathLike[str], experiment_id: int, trial_id: int
    ) -> int:
        """Upload the files of ``src_dir`` whose size differs from their object's, whole.

        Event files only grow, so a size that differs means new records; each upload is a
        prefix of the file as it is being written.
        """
        key_prefix = self._tensorboard_key(experiment_id, trial_id)
        stored = self._list(key_prefix + "/")
        copied = 0
        for name, size in directory_resources(src_dir).items():
            if stored.get(name) == size:
                continue
            data = (Path(src_dir) / name).read_bytes()
            self.client.put_object(Bucket=self.bucket, Key=f"{key_prefix}/{name}", Body=data)
            copied += 1
        return copied

    def download_tensorboard(self, experiment_id: int, dst_dir: str | os.PathLike[str]) -> int:
        key_prefix = self._tensorboard_key(experiment_id) + "/"
        dst = Path(dst_dir)
        changed = 0
        for name, size in self._list(key_prefix).items():
            local = dst / name
            have = local.stat().st_size if local.exists() else 0
            if have == size and local.exists():
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            if 0 < have < size:
                # Only the new records, appended: a TensorBoard holding the file open reads on.
                body = self.client.get_object(
                    Bucket=self.bucket, Key=key_prefix + name, Range=f"bytes={have}-{size - 1}"
                )["Body"].read()
                with open(local, "ab") as f:
                    f.write(body)
            else:
                body = self.client.get_object(Bucket=self.bucket, Key=key_prefix + name)[
                    "Body"
                ].read()
                with open(local, "wb") as f:
                    f.write(body)
            changed += 1
        return changed

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3Storage({self._url(self.prefix)!r}{where})"
