"""Where a dataset file lives: a shared filesystem, or an object in S3-compatible storage."""

from __future__ import annotations

import abc
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from det_hub.storage.s3 import S3Storage

#: Called with (bytes done, bytes in all) while a file is fetched.
Progress = Callable[[int, int], None]

#: Called by :meth:`DataSource.download` with the bytes done so far.
Fetched = Callable[[int], None]


class DataSource(abc.ABC):
    """One remote file, which a :class:`~det_hub.data.HostCache` copies to local disk."""

    #: Where the file is, for messages and as part of its cache key.
    url: str

    @abc.abstractmethod
    def stat(self) -> tuple[int, str]:
        """The file's size in bytes and a version string that changes when its content does
        (modification time, or the object's ETag).

        Raises:
            FileNotFoundError: there is no such file.
        """

    @abc.abstractmethod
    def download(self, dst: Path, fetched: Fetched | None = None) -> None:
        """Copy the file to ``dst``, a path on local disk that does not exist yet, telling
        ``fetched`` the bytes done as they grow (the size is known from :meth:`stat`)."""


class FileSource(DataSource):
    """A file on a filesystem this host mounts (NFS, a bind mount, a local path)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser().resolve()
        self.url = self.path.as_uri()

    def stat(self) -> tuple[int, str]:
        st = self.path.stat()
        return st.st_size, f"{st.st_mtime_ns}"

    def download(self, dst: Path, fetched: Fetched | None = None) -> None:
        done = 0
        with open(self.path, "rb") as src, open(dst, "wb") as out:
            while chunk := src.read(8 << 20):
                out.write(chunk)
                done += len(chunk)
                if fetched is not None:
                    fetched(done)
        shutil.copystat(self.path, dst)


class S3Source(DataSource):
    """An object in S3-compatible storage, fetched with boto3's parallel ranged transfer.

    Args:
        storage: The bucket, the prefix, the endpoint and the credentials: the same
            :class:`~det_hub.storage.s3.S3Storage` checkpoints use.
        key: The object's key below the storage's prefix.
    """

    def __init__(self, storage: S3Storage, key: str) -> None:
        self.storage = storage
        self.key = "/".join(p for p in (storage.prefix, key.strip("/")) if p)
        self.url = f"s3://{storage.bucket}/{self.key}"

    def stat(self) -> tuple[int, str]:
        from botocore.exceptions import ClientError

        try:
            head = self.storage.client.head_object(Bucket=self.storage.bucket, Key=self.key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.url}: no such object") from None
            raise
        return int(head["ContentLength"]), str(head.get("ETag", "")).strip('"')

    def download(self, dst: Path, fetched: Fetched | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        done = 0

        def callback(n: int) -> None:
            nonlocal done
            done += n
            if fetched is not None:
                fetched(done)

        self.storage.client.download_file(
            self.storage.bucket, self.key, str(dst),
            Config=TransferConfig(**self.storage.transfer_settings), Callback=callback)


def source_for(location: str | os.PathLike[str] | DataSource,
               s3: Mapping[str, Any] | None = None) -> DataSource:
    """The source of ``location``: ``s3://bucket/key`` or a path (or a ``file://`` URL).

    Args:
        s3: For ``s3://`` locations, :class:`~det_hub.storage.s3.S3Storage` settings other
            than the bucket: ``endpoint_url``, ``access_key``, ``secret_key``, ... Without
            credentials boto3 finds its own (``AWS_ACCESS_KEY_ID``, ...).

    Raises:
        ValueError: an unknown URL scheme.
    """
    if isinstance(location, DataSource):
        return location
    text = os.fspath(location)
    parsed = urlparse(text)
    if parsed.scheme == "s3":
        if not parsed.netloc or not parsed.path.strip("/"):
            raise ValueError(f"{text!r}: an S3 location is s3://BUCKET/KEY")
        return S3Source(S3Storage(parsed.netloc, **dict(s3 or {})), parsed.path)
    if parsed.scheme == "file":
        return FileSource(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive
        raise ValueError(f"{text!r}: det_hub.data reads s3:// URLs and paths, not {parsed.scheme}://")
    return FileSource(text)


__all__ = ["DataSource", "Fetched", "FileSource", "Progress", "S3Source", "source_for"]
