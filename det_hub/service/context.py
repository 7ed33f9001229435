"""Checks on uploaded context archives.

A context is a gzipped tar of the user's model directory. It is checked member by member when
the experiment is created, so a bad archive is refused with the member's name before anything
is stored; the agent unpacks it later with tarfile's ``data`` filter as a second line of defence.
"""

from __future__ import annotations

import io
import posixpath
import tarfile

MAX_CONTEXT_BYTES = 96 * 1024 * 1024


class ContextError(ValueError):
    """The archive is unsafe or malformed. ``too_large`` tells the size limit apart."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def _inside(name: str) -> bool:
    """Whether a relative member path stays inside the extraction directory."""
    norm = posixpath.normpath(name)
    return not (norm == ".." or norm.startswith("../") or posixpath.isabs(name))


def check_context(archive: bytes, *, limit: int = MAX_CONTEXT_BYTES) -> int:
    """Validate a context archive and return its unpacked size in bytes.

    Refused: absolute paths, paths that climb out with ``..``, symbolic or hard links whose
    target leaves the directory, device files and FIFOs, and archives whose files add up to
    more than ``limit`` bytes.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ContextError(f"the context is not a readable tar archive: {e}") from None
    total = 0
    for m in members:
        name = m.name
        if posixpath.isabs(name) or name.startswith("\\"):
            raise ContextError(f"context member {name!r} has an absolute path")
        if not _inside(name):
            raise ContextError(f"context member {name!r} points outside the context")
        if m.issym():
            target = posixpath.join(posixpath.dirname(name), m.linkname)
            if posixpath.isabs(m.linkname) or not _inside(target):
                raise ContextError(
                    f"context member {name!r} links to {m.linkname!r}, outside the context")
        elif m.islnk():
            if posixpath.isabs(m.linkname) or not _inside(m.linkname):
                raise ContextError(
                    f"context member {name!r} links to {m.linkname!r}, outside the context")
        elif not (m.isfile() or m.isdir()):
            raise ContextError(f"context member {name!r} is not a regular file or directory")
        total += max(m.size, 0)
        if total > limit:
            raise ContextError(
                f"the context is larger than {limit // (1024 * 1024)} MiB unpacked",
                too_large=True)
    return total
