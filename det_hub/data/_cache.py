"""One local copy of each remote dataset file per host, shared by every process on it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from det_hub.data._sources import DataSource, Progress
from det_hub.env_names import DATA_CACHE_ENV

#: The variable that says where the cache lives (:data:`det_hub.env_names.DATA_CACHE_ENV`).
CACHE_ENV = DATA_CACHE_ENV


def default_cache_dir() -> Path:
    """``$DET_HUB_DATA_CACHE``, else ``~/.cache/det_hub/data``."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/det_hub/data").expanduser()


class HostCache:
    """Local copies of remote files, fetched once per host whatever the number of ranks.

    Each (url, version) pair gets a folder named by its hash. The first process to want a file
    takes that folder's lock and downloads; the others wait on the lock and then find the
    file. A download goes to a partial file that is renamed into place only once its size is
    checked, so an interrupted one leaves nothing that a later process would trust. A new
    version of a file (a new ETag or modification time) is a new entry.

    Args:
        root: The cache folder; :func:`default_cache_dir` by default. Put it on local disk.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def path_for(self, source: DataSource, version: str) -> Path:
        """Where the copy of ``source`` at ``version`` is kept."""
        digest = hashlib.sha256(f"{source.url}\0{version}".encode()).hexdigest()[:32]
        name = Path(source.url.rstrip("/").rsplit("/", 1)[-1]).name or "data"
        return self.root / digest / name

    def fetch(self, source: DataSource, progress: Progress | None = None) -> Path:
        """The local copy of ``source``, downloaded first unless this host has it.

        Raises:
            FileNotFoundError: the source does not exist.
            OSError: the download came out with another size than the source has.
        """
        size, version = source.stat()
        target = self.path_for(source, version)
        if _has(target, size):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent / ".lock"):
            if _has(target, size):  # another process fetched it while this one waited
                return target
            partial = target.with_name(f".{target.name}.{os.getpid()}.part")
            try:
                source.download(partial, None if progress is None
                                else lambda done: progress(done, size))
                got = partial.stat().st_size
                if got != size:
                    raise OSError(f"{source.url}: fetched {got} bytes, the source has {size}")
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        return target

    def clear(self) -> int:
        """Remove every cached file not being fetched right now; answers how many folders
        went."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for entry in self.root.iterdir():
            if not entry.is_dir():
                continue
            with _locked(entry / ".lock", wait=False) as held:
                if held:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
        return removed


def _has(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """An exclusive lock on ``path`` between processes; yields whether it was taken (always
    when ``wait``). The lock goes with the process, so a killed fetch never wedges the
    cache."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


__all__ = ["CACHE_ENV", "HostCache", "default_cache_dir"]
