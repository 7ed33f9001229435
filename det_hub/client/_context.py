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

#: Directories never worth shipping to a trial, whatever ``.detignore`` says.
ALWAYS_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints"})

DETIGNORE = ".detignore"

#: What Determined's CLI leaves out of every context before a ``.detignore`` is read: compiled
#: Python, version control and editor folders, Terraform state, and the ``shared_fs`` mount
#: point. A ``.detignore`` adds to these (and can bring one back with ``!pattern``).
DEFAULT_DETIGNORE = (
    "__pycache__/", "*.py[co]", "*$py.class", "terraform", "terraform_data",
    "terraform.tfstate*", "terraform.tfvars*", ".terraform*", ".git/", ".vscode/", ".idea/",
    ".mypy_cache/", "/shared_fs",
)


@dataclass(frozen=True)
class _Entry:
    """One path to put in the archive."""

    path: Path  # the path on disk; for a link followed, the link itself
    arcname: str  # path inside the archive, with "/" separators
    kind: str  # "dir" or "file"
    size: int = 0


def _load_ignore(root: Path) -> pathspec.PathSpec:
    """Determined's rules: its default patterns, then the lines of ``root/.detignore``, read
    as git wildmatch patterns in order (a later ``!pattern`` brings a path back)."""
    lines = list(DEFAULT_DETIGNORE)
    ignore_file = root / DETIGNORE
    if ignore_file.is_file():
        lines += ignore_file.read_text(encoding="utf-8").splitlines()
    return pathspec.PathSpec.from_lines(pathspec.patterns.GitWildMatchPattern, lines)


def _walk(root: Path) -> Iterator[_Entry]:
    """Yields the context's entries in a stable order, honouring .detignore and the skip list.

    Symbolic links are followed, as Determined's CLI follows them: a linked file is packed
    with its content, a linked directory with what it holds, wherever they point (the context
    is the user's own files, read on their own machine). A link that leads nowhere, or into a
    directory it is already inside, is an error that names it.
    """
    spec = _load_ignore(root)
    seen_dirs = {root.resolve()}

    def walk(directory: Path, prefix: str) -> Iterator[_Entry]:
        try:
            names = sorted(os.listdir(directory))
        except OSError as e:
            raise ContextError(f"cannot read {prefix or directory}: {e.strerror}") from None
        for name in names:
            full = directory / name
            arcname = prefix + name
            if (not prefix and name == DETIGNORE) or spec.match_file(arcname):
                continue  # left out before any link is followed
            try:
                st = full.stat()  # follows links
            except OSError as e:
                if full.is_symlink():
                    raise ContextError(
                        f"{arcname} is a symbolic link to {os.readlink(full)}, which does not "
                        f"exist; fix it, or list it in {DETIGNORE}") from None
                raise ContextError(f"cannot read {arcname}: {e.strerror}") from None
            if stat.S_ISDIR(st.st_mode):
                if name in ALWAYS_SKIPPED_DIRS or spec.match_file(arcname + "/"):
                    continue
                real = full.resolve()
                if real in seen_dirs:  # the directories being walked, from the top down
                    raise ContextError(f"{arcname} is a symbolic link to a directory that "
                                       f"holds it ({real}); list it in {DETIGNORE}")
                seen_dirs.add(real)
                yield _Entry(full, arcname, "dir")
                yield from walk(full, arcname + "/")
                seen_dirs.discard(real)
            elif stat.S_ISREG(st.st_mode):
                yield _Entry(full, arcname, "file", size=st.st_size)
            # Sockets, fifos and devices have no place in a model definition; leave them out.

    yield from walk(root, "")


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
    else:
        info.type = tarfile.REGTYPE
        info.mode = stat.S_IMODE(st.st_mode) | 0o600
        info.size = entry.size
    return info


def pack_context(context_dir: str | Path, *, limit: int = MAX_CONTEXT_BYTES) -> bytes:
    """Packs a model-definition directory into an in-memory .tar.gz.

    Paths in the archive are relative to ``context_dir``. A ``.detignore`` file at its top
    excludes paths with git wildmatch patterns, after Determined's defaults
    (:data:`DEFAULT_DETIGNORE`); ``__pycache__``, ``.git`` and ``.ipynb_checkpoints``
    directories are always left out, and so is the ``.detignore`` itself. Symbolic links are
    followed, as Determined's CLI follows them: the archive holds the files they lead to.

    Args:
        context_dir: The directory to pack.
        limit: The largest total file size, in bytes, before compression.

    Returns:
        The gzip-compressed tar archive.

    Raises:
        ContextError: The directory is missing, or holds a broken link or a link into a
            directory that holds it.
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
            st = entry.path.stat()
            info = _tarinfo(entry, st)
            if entry.kind == "file":
                with entry.path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


__all__ = ["ALWAYS_SKIPPED_DIRS", "DEFAULT_DETIGNORE", "MAX_CONTEXT_BYTES", "context_size",
           "pack_context"]
