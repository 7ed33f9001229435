"""Packing a model-definition directory (the experiment's *context*) into a .tar.gz.

The archive is built in memory: contexts are small by rule (:data:`MAX_CONTEXT_BYTES`), and the
master wants the whole archive in one JSON body anyway.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ._errors import ContextError, ContextTooLarge

#: The largest total size of the files in a context, before compression; the master refuses
#: bigger ones with 413, so the SDK checks first and sends nothing.
MAX_CONTEXT_BYTES = 96 * 1024 * 1024

#: Directories never worth shipping to a trial.
ALWAYS_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints"})

DETIGNORE = ".detignore"


@dataclass(frozen=True)
class _Entry:
    """One path to put in the archive."""

    path: Path  # absolute path on disk
    arcname: str  # path inside the archive, with "/" separators
    kind: str  # "dir", "file" or "symlink"
    size: int = 0
    link_target: str = ""  # for symlinks: a target relative to the link's own directory


def _load_ignore(root: Path) -> pathspec.GitIgnoreSpec:
    ignore_file = root / DETIGNORE
    lines: list[str] = []
    if ignore_file.is_file():
        lines = ignore_file.read_text(encoding="utf-8").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _symlink_target(root: Path, link: Path, arcname: str) -> str:
    """The link's target relative to its own directory, or an error if it leaves the context."""
    raw_target = os.readlink(link)
    # Resolve lexically first so that a link to a missing file inside the context is still
    # judged by where it points, then follow real links to catch chains that escape.
    resolved = Path(os.path.normpath(link.parent / raw_target)).resolve()
    root_resolved = root.resolve()
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise ContextError(
            f"{arcname} is a symbolic link to {raw_target}, which is outside the context "
            f"directory {root}; copy the file in, or list the link in {DETIGNORE}"
        )
    return os.path.relpath(resolved, link.parent.resolve())


def _walk(root: Path) -> Iterator[_Entry]:
    """Yields the context's entries in a stable order, honouring .detignore and the skip list."""
    spec = _load_ignore(root)
    for dirpath, dirnames, filenames in os.walk(root):
        current = Path(dirpath)
        rel_dir = current.relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept_dirs = []
        for name in sorted(dirnames):
            full = current / name
            arcname = prefix + name
            if name in ALWAYS_SKIPPED_DIRS or spec.match_file(arcname + "/"):
                continue
            if full.is_symlink():
                # os.walk does not descend into directory links; keep the link itself.
                target = _symlink_target(root, full, arcname)
                yield _Entry(full, arcname, "symlink", link_target=target)
                continue
            kept_dirs.append(name)
            yield _Entry(full, arcname, "dir")
        # Pruning dirnames in place stops os.walk from descending into skipped directories.
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            full = current / name
            arcname = prefix + name
            if spec.match_file(arcname):
                continue
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = _symlink_target(root, full, arcname)
                yield _Entry(full, arcname, "symlink", link_target=target)
            elif stat.S_ISREG(st.st_mode):
                yield _Entry(full, arcname, "file", size=st.st_size)
            # Sockets, fifos and devices have no place in a model definition; leave them out.


def context_size(context_dir: str | Path) -> int:
    """Returns the total size in bytes of the files that :func:`pack_context` would pack."""
    root = _check_root(context_dir)
    return sum(entry.size for entry in _walk(root))


def _check_root(context_dir: str | Path) -> Path:
    root = Path(context_dir).expanduser()
    if not root.exists():
        raise ContextError(f"context directory {root} does not exist")
    if not root.is_dir():
        raise ContextError(f"context {root} is not a directory")
    return root


def _tarinfo(entry: _Entry, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.arcname)
    info.mtime = int(st.st_mtime)
    # Owners on the submitting machine mean nothing on the agent; keep only the mode bits.
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
        info.mode = stat.S_IMODE(st.st_mode) | 0o700
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link_target
        info.mode = 0o777
    else:
        info.type = tarfile.REGTYPE
        info.mode = stat.S_IMODE(st.st_mode) | 0o600
        info.size = entry.size
    return info


def pack_context(context_dir: str | Path, *, limit: int = MAX_CONTEXT_BYTES) -> bytes:
    """Packs a model-definition directory into an in-memory .tar.gz.

    Paths in the archive are relative to ``context_dir``. A ``.detignore`` file at its top
    excludes paths with gitignore patterns; ``__pycache__``, ``.git`` and
    ``.ipynb_checkpoints`` directories are always left out. Symbolic links that point inside
    the directory are kept as (relative) links; ones pointing outside are refused.

    Args:
        context_dir: The directory to pack.
        limit: The largest total file size, in bytes, before compression.

    Returns:
        The gzip-compressed tar archive.

    Raises:
        ContextError: The directory is missing, or holds a link leading out of it.
        ContextTooLarge: The files add up to more than ``limit``; raised before any file is
            read.
    """
    root = _check_root(context_dir)
    entries = list(_walk(root))
    total = sum(entry.size for entry in entries)
    if total > limit:
        raise ContextTooLarge(total, limit)

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for entry in entries:
            st = entry.path.lstat()
            info = _tarinfo(entry, st)
            if entry.kind == "file":
                with entry.path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


__all__ = ["ALWAYS_SKIPPED_DIRS", "MAX_CONTEXT_BYTES", "context_size", "pack_context"]
