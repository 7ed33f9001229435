"""Context archives: the one check, run at upload, and the one extraction, run inside the task.

A context is a tar archive (usually gzipped) of the user's model directory. The master runs
:func:`check_archive` when the context is uploaded, so a bad archive is refused with the name of
the offending member before anything is stored; the task runs :func:`extract_archive`, which
checks again and then writes the tree without ever following a symbolic link.

Both walk the members in archive order and keep a model of the tree built so far. The rules:

* names are relative, and never climb above the top with ``..``;
* no member is placed under a symbolic link (or a file) that an earlier member made, so a name
  means the same path to the checker and to the filesystem;
* a symbolic link's target, resolved against the tree so far, stays inside; a ``..`` in a
  target may only step out of a directory the archive already made, so later members cannot
  change where an accepted link leads;
* a hard link points at an earlier regular file;
* only regular files, directories, symbolic links and hard links; nothing replaces an earlier
  member, except a directory repeated;
* bounds on the number of members, the resolved path length and depth, the unpacked size, and
  the bytes inflated from the compressed stream (so a decompression bomb is cut short).

Written by hand rather than with tarfile's ``data`` filter: that filter relies on
``os.path.realpath``, which gives up silently past ``PATH_MAX`` (CVE-2025-4517), and it judges
each member alone rather than against the tree the earlier members built. tarfile is still used
to read the headers.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import io
import lzma
import math
import os
import tarfile
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Protocol

__all__ = ["ContextError", "ContextLimits", "check_archive", "extract_archive", "read_file"]

_MiB = 1024 * 1024

#: Inflated bytes allowed beyond the members' data: tarfile reads ahead a record (10 KiB) at a
#: time, and the archive ends with zero blocks.
_BASE_ALLOWANCE = 64 * 1024
#: Inflated bytes allowed per member for its headers, besides its name and link target (each
#: at most ``max_path_bytes``): the 512-byte header, a pax header's own header and the rest
#: of its records (times, sizes), and block padding.
_HEADER_OVERHEAD = 2048
#: Symbolic links followed when resolving one target, as Linux's own limit.
_MAX_HOPS = 40
#: The longest name of one path component (NAME_MAX).
_NAME_MAX = 255
_COPY_CHUNK = _MiB
#: Directory descriptors the extraction keeps open at most.
_OPEN_DIRS = 64

_DIR, _FILE, _SYMLINK, _HARDLINK = "directory", "file", "symbolic link", "hard link"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ContextLimits:
    """Bounds on a context archive.

    Attributes:
        max_bytes: The largest total size of the files once unpacked.
        max_members: The most members (files, directories and links) in the archive.
        max_path_bytes: The longest path of a member (and of a link target), in bytes, once
            ``.`` and ``..`` are resolved. Kept well below PATH_MAX (4096).
        max_depth: The most directory levels a member's path may have.
        settings: For each limit's name (``"max_members"``, ...), the setting that changes
            it, named in refusals (``"MasterApp.context_max_members"``); may be empty.
    """

    max_bytes: int = 96 * _MiB
    max_members: int = 100_000
    max_path_bytes: int = 1024
    max_depth: int = 64
    settings: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_members", "max_path_bytes", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ContextLimits.{name} must be a positive integer, not {value!r}")

    def setting(self, name: str) -> str:
        """``" (MasterApp.context_max_members)"``: the setting of a limit, for a refusal;
        ``""`` when none is named."""
        setting = self.settings.get(name)
        return f" ({setting})" if setting else ""


class ContextError(ValueError):
    """The archive is unsafe, malformed or over a limit.

    Attributes:
        member: The name of the member at fault, as written in the archive, or None when the
            fault is the archive's as a whole (unreadable, say).
        too_large: Whether a size bound was passed (unpacked size, member count, inflated
            bytes), as opposed to a member being unsafe or malformed.
    """

    def __init__(self, message: str, *, member: str | None = None,
                 too_large: bool = False) -> None:
        super().__init__(message)
        self.member = member
        self.too_large = too_large


def _size_text(n: int) -> str:
    return f"{n // _MiB} MiB" if n % _MiB == 0 else f"{n} bytes"


def _refuse(name: str, what: str) -> ContextError:
    return ContextError(f"context member {name!r} {what}", member=name)


@dataclass(frozen=True)
class _Entry:
    """A member as admitted: its kind and resolved path (components from the top)."""

    kind: str  # _DIR, _FILE, _SYMLINK or _HARDLINK
    parts: tuple[str, ...]
    link_target: str = ""  # a symbolic link's target, as written
    link_parts: tuple[str, ...] = ()  # a hard link's target, resolved


class _Tree:
    """The tree the members so far build, and the rules a next member must follow."""

    def __init__(self, limits: ContextLimits) -> None:
        self.limits = limits
        #: "a/b" -> (kind, symlink target); the top itself is "" and always a directory.
        self.nodes: dict[str, tuple[str, str]] = {"": (_DIR, "")}
        self.members = 0
        self.total = 0  # bytes of file data
        self.padded = 0  # the same, rounded up to tar blocks as it sits in the stream

    def admit(self, info: tarfile.TarInfo) -> _Entry:
        """Check the next member against the tree and the limits, then add it to the tree."""
        name = info.name
        self.members += 1
        if self.members > self.limits.max_members:
            raise ContextError(
                f"the context has more than {self.limits.max_members} members"
                f"{self.limits.setting('max_members')}; refused at member {name!r}",
                member=name, too_large=True)
        parts = self._place(name, name)
        key = "/".join(parts)
        if info.isdir():
            entry = _Entry(_DIR, parts)
        elif info.issparse():
            raise _refuse(name, "is a sparse file, which contexts may not hold")
        elif info.isreg():
            if info.size < 0:
                raise _refuse(name, "has a negative size")
            self.total += info.size
            self.padded += -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
            if self.total > self.limits.max_bytes:
                raise ContextError(
                    f"the context is larger than {_size_text(self.limits.max_bytes)} unpacked"
                    f"{self.limits.setting('max_bytes')} (at member {name!r})", member=name,
                    too_large=True)
            entry = _Entry(_FILE, parts)
        elif info.issym():
            self._check_symlink(name, parts, info.linkname)
            entry = _Entry(_SYMLINK, parts, link_target=info.linkname)
        elif info.islnk():
            target = self._place(name, info.linkname, link=True)
            if self.nodes.get("/".join(target), ("", ""))[0] != _FILE:
                raise _refuse(name, f"is a hard link to {info.linkname!r}, which is not an "
                                    "earlier regular file in the context")
            entry = _Entry(_HARDLINK, parts, link_parts=target)
        else:
            raise _refuse(name, f"is {_type_text(info)}, not a regular file, directory, "
                                "symbolic link or hard link")
        if not parts:
            if entry.kind != _DIR:
                raise _refuse(name, "names the top of the context itself")
            return entry
        kind = _FILE if entry.kind == _HARDLINK else entry.kind
        earlier = self.nodes.get(key)
        if earlier is not None:
            if earlier[0] == kind == _DIR:
                return entry
            if earlier[0] == kind:
                raise _refuse(name, "appears twice in the archive")
            raise _refuse(name, f"is a {kind} replacing an earlier {earlier[0]} of that name")
        self.nodes[key] = (kind, info.linkname if kind == _SYMLINK else "")
        return entry

    def _place(self, member: str, path: str, *, link: bool = False) -> tuple[str, ...]:
        """Resolve a path written in the archive, a member's name or (``link``) a hard link's
        target, to its components, checking every directory on the way. For a name, the
        missing directories on the way join the tree (extraction makes them)."""
        limits = self.limits

        def bad(problem: str) -> ContextError:
            if link:
                return _refuse(member, f"is a hard link to {path!r}, which {problem}")
            return _refuse(member, problem)

        if len(os.fsencode(path)) > limits.max_path_bytes:
            raise bad(f"is longer than the limit of {limits.max_path_bytes} bytes"
                      f"{limits.setting('max_path_bytes')}")
        if path.startswith("/"):
            raise bad("is an absolute path, outside the context" if link
                      else "has an absolute path")
        parts: list[str] = []
        raw = [c for c in path.split("/") if c not in ("", ".")]
        for i, comp in enumerate(raw):
            if comp == "..":
                if not parts:
                    raise bad("points outside the context")
                parts.pop()
                continue
            parts.append(comp)
            if len(os.fsencode(comp)) > _NAME_MAX:
                raise bad(f"has a component longer than {_NAME_MAX} bytes")
            if i == len(raw) - 1:
                break
            kind = self.nodes.get("/".join(parts), ("", ""))[0]
            if kind == _SYMLINK:
                raise bad(f"passes through {'/'.join(parts)!r}, a symbolic link earlier in the "
                          "archive; no member may be placed under a symbolic link")
            if kind == _FILE:
                raise bad(f"passes through {'/'.join(parts)!r}, a file earlier in the archive")
        if len(parts) > limits.max_depth:
            raise bad(f"is {len(parts)} levels deep, deeper than the limit of "
                      f"{limits.max_depth}")
        if len(os.fsencode("/".join(parts))) > limits.max_path_bytes:
            raise bad(f"resolves to a path longer than the limit of {limits.max_path_bytes} "
                      f"bytes{limits.setting('max_path_bytes')}")
        if not link:
            for depth in range(1, len(parts)):
                self.nodes.setdefault("/".join(parts[:depth]), (_DIR, ""))
        return tuple(parts)

    def _check_symlink(self, name: str, parts: tuple[str, ...], target: str) -> None:
        """Resolve a symbolic link's target against the tree so far; it must stay inside."""
        if not target:
            raise _refuse(name, "is a symbolic link with an empty target")
        if len(os.fsencode(target)) > self.limits.max_path_bytes:
            raise _refuse(name, f"links to a path longer than {self.limits.max_path_bytes} "
                                f"bytes{self.limits.setting('max_path_bytes')}")
        if target.startswith("/"):
            raise _refuse(name, f"links to {target!r}, an absolute path outside the context")
        where = list(parts[:-1])  # where the walk is: a link is resolved from its directory
        todo = [c for c in target.split("/") if c not in ("", ".")]
        todo.reverse()  # a stack: the next component last
        hops = 0
        while todo:
            comp = todo.pop()
            if comp == "..":
                if not where:
                    raise _refuse(name, f"links to {target!r}, outside the context")
                # Stepping out of anything but a directory already made could land elsewhere
                # once later members exist (a name made a link to "." later, say).
                if self.nodes.get("/".join(where), ("", ""))[0] != _DIR:
                    raise _refuse(name, f"links to {target!r}, whose '..' steps out of "
                                        f"{'/'.join(where)!r}, which is not a directory "
                                        "earlier in the archive")
                where.pop()
                continue
            where.append(comp)
            kind, further = self.nodes.get("/".join(where), ("", ""))
            if kind == _SYMLINK:
                hops += 1
                if hops > _MAX_HOPS:
                    raise _refuse(name, f"links to {target!r} through more than {_MAX_HOPS} "
                                        "symbolic links")
                where.pop()
                todo.extend(reversed([c for c in further.split("/") if c not in ("", ".")]))


def _type_text(info: tarfile.TarInfo) -> str:
    names = {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
             tarfile.FIFOTYPE: "a FIFO"}
    return names.get(info.type, f"of tar type {info.type!r}")


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Inflated:
    """The decompressed stream, refusing to give more bytes than the archive may hold.

    ``allowed`` grows as members are admitted (their data, plus room for the next headers), so
    a header that claims a gigabyte (a pax record, a GNU long name) is cut short after a few
    KiB, and the whole archive never inflates far past ``max_bytes``.
    """

    def __init__(self, raw: _Readable, allowed: int) -> None:
        self.raw = raw
        self.read_bytes = 0
        self.allowed = allowed

    def read(self, size: int = -1) -> bytes:
        room = self.allowed - self.read_bytes
        want = room + 1 if size is None or size < 0 else min(size, room + 1)
        data = self.raw.read(want)
        self.read_bytes += len(data)
        if self.read_bytes > self.allowed:
            raise ContextError("the context inflates to more than its members account for "
                               "(a decompression bomb?)", too_large=True)
        return data


def _decompressed(raw: IO[bytes]) -> _Readable:
    """The archive's tar stream: gzip, bzip2 and xz are unwrapped, plain tar is kept."""
    head = raw.read(6)
    raw.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


#: What a damaged or foreign archive raises while it is read.
_UNREADABLE = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, UnicodeError)


def _scan(raw: IO[bytes], limits: ContextLimits
          ) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, _Entry]]:
    """Yield each member, admitted into the tree, in archive order; the member's data can be
    read from the tar file before the next one is asked for."""
    tree = _Tree(limits)
    per_member = _HEADER_OVERHEAD + 2 * limits.max_path_bytes
    stream = _Inflated(_decompressed(raw), _BASE_ALLOWANCE + per_member)
    last: str | None = None
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
            while True:
                info = tar.next()
                if info is None:
                    return
                # Stream mode keeps every header it has read; the tree is all we need.
                del tar.members[:]
                entry = tree.admit(info)
                last = info.name
                stream.allowed = (_BASE_ALLOWANCE + tree.padded
                                  + (tree.members + 1) * per_member)
                yield tar, info, entry
    except ContextError as e:
        if e.member is None and last is not None:
            raise ContextError(f"{e} (after member {last!r})", member=last,
                               too_large=e.too_large) from None
        raise
    except _UNREADABLE as e:
        where = f" (after member {last!r})" if last is not None else ""
        raise ContextError(f"the context is not a readable tar archive{where}: {e}",
                           member=last) from None


@contextlib.contextmanager
def _source(source: bytes | os.PathLike[str] | str) -> Iterator[IO[bytes]]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        yield io.BytesIO(bytes(source))
    else:
        with open(source, "rb") as f:
            yield f


def read_file(source: bytes | os.PathLike[str] | str, path: str, limit: int,
              limits: ContextLimits = ContextLimits()) -> bytes | None:
    """The first ``limit`` bytes of the regular file at ``path`` (``/``-separated, from the
    context's top) in a context archive, read without unpacking it; None where there is no
    such file (a link to one is not followed).

    Raises:
        ContextError: The archive breaks a rule (as :func:`check_archive` says) before that
            file.
    """
    wanted = tuple(part for part in path.split("/") if part not in ("", "."))
    with _source(source) as raw:
        for tar, info, entry in _scan(raw, limits):
            if entry.kind == _FILE and entry.parts == wanted:
                member = tar.extractfile(info)
                return member.read(limit) if member is not None else None
    return None


def check_archive(data: bytes, limits: ContextLimits = ContextLimits()) -> int:
    """Check a context archive completely, without writing anything.

    Args:
        data: The archive: a tar file, plain or compressed with gzip, bzip2 or xz.
        limits: The bounds it must keep.

    Returns:
        The total size in bytes of its files once unpacked.

    Raises:
        ContextError: The archive is unreadable, holds an unsafe member, or passes a bound;
            the message names the member and what is wrong with it.
    """
    total = 0
    with _source(data) as raw:
        for _, info, entry in _scan(raw, limits):
            if entry.kind == _FILE:
                total += info.size  # the data is skipped, not inflated into memory
    return total


def extract_archive(source: bytes | os.PathLike[str] | str, dest: os.PathLike[str] | str,
                    limits: ContextLimits = ContextLimits()) -> int:
    """Check a context archive and unpack it into ``dest``; the one way a context is unpacked.

    The archive is checked whole first (as :func:`check_archive`), so a refused archive writes
    nothing. It is then read again, each member checked once more against the tree so far,
    and written relative to directory descriptors: every directory on the way is opened with
    ``O_NOFOLLOW | O_DIRECTORY``, files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``,
    symbolic links are made only once their target is known to stay inside, and hard links
    never follow a link. So nothing is written outside ``dest``, whatever is already there.

    Files keep their owner's read/write and everyone's execute bits, never setuid, setgid or
    sticky bits, nor write access for group and others (``0o644``/``0o755``-style, less the
    process umask); directories are made ``0o755`` less the umask. Modification times are
    kept; owners are not (everything belongs to the process's user).

    Args:
        source: The archive, as bytes or the path of a file.
        dest: The directory to unpack into. It must be empty, or not exist yet (its parent
            must), and must not itself be a symbolic link.
        limits: The bounds the archive must keep.

    Returns:
        The number of bytes of file data written.

    Raises:
        ContextError: The archive is unreadable, holds an unsafe member, or passes a bound
            (nothing is written then).
        FileExistsError: ``dest`` is not an empty directory.
        OSError: Writing failed (a full disk, say); what was written so far stays.
    """
    path = os.fspath(dest)
    _check_dest_empty(path)
    with _source(source) as raw:
        for _ in _scan(raw, limits):
            pass
        raw.seek(0)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o755)
        root = os.open(path, _DIR_FLAGS)
        try:
            if os.listdir(root):
                raise FileExistsError(errno.EEXIST, "the directory to unpack into is not empty",
                                      path)
            writer = _Writer(root)
            try:
                for tar, info, entry in _scan(raw, limits):
                    writer.write(tar, info, entry)
                writer.finish()
            finally:
                writer.close()
        finally:
            os.close(root)
    return writer.written


def _check_dest_empty(path: str) -> None:
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        if os.listdir(fd):
            raise FileExistsError(errno.EEXIST, "the directory to unpack into is not empty",
                                  path)
    finally:
        os.close(fd)


class _Writer:
    """Writes admitted members below a directory descriptor, never following a link."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.written = 0
        self._dir_times: list[tuple[tuple[str, ...], float]] = []
        #: Directories opened lately, most recent last (archives seldom keep to one
        #: directory at a time, and reopening a path costs a syscall per component).
        self._open: OrderedDict[tuple[str, ...], int] = OrderedDict()
        self._made: set[tuple[str, ...]] = set()

    def _dir(self, parts: tuple[str, ...], *, create: bool = True) -> int:
        """A descriptor of the directory at ``parts``, made if missing and ``create``; it
        stays open (cached) until :meth:`close`."""
        if not parts:
            return self.root
        fd = self._open.get(parts)
        if fd is not None:
            self._open.move_to_end(parts)
            return fd
        parent = self._dir(parts[:-1], create=create)
        if create and parts not in self._made:
            with contextlib.suppress(FileExistsError):
                os.mkdir(parts[-1], 0o755, dir_fd=parent)
            self._made.add(parts)
        fd = os.open(parts[-1], _DIR_FLAGS, dir_fd=parent)  # a link here fails: ELOOP
        self._open[parts] = fd
        if len(self._open) > _OPEN_DIRS:
            os.close(self._open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])

    def write(self, tar: tarfile.TarFile, info: tarfile.TarInfo, entry: _Entry) -> None:
        parts = entry.parts
        if entry.kind == _DIR:
            if parts:
                self._dir(parts)
                self._dir_times.append((parts, info.mtime))
            return
        parent = self._dir(parts[:-1])
        name = parts[-1]
        if entry.kind == _FILE:
            self._write_file(tar, info, parent, name)
        elif entry.kind == _SYMLINK:
            os.symlink(entry.link_target, name, dir_fd=parent)
            _set_mtime(name, info.mtime, dir_fd=parent)
        else:
            source_dir = self._dir(entry.link_parts[:-1], create=False)
            parent = self._dir(parts[:-1])  # still open: the cache outlasts two lookups
            os.link(entry.link_parts[-1], name, src_dir_fd=source_dir, dst_dir_fd=parent,
                    follow_symlinks=False)

    def _write_file(self, tar: tarfile.TarFile, info: tarfile.TarInfo, parent: int,
                    name: str) -> None:
        # Owner read/write always; execute bits as given; no setuid/setgid/sticky, no write
        # for group and others. os.open takes the umask off.
        mode = (info.mode & 0o755) | 0o600
        fd = os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=parent)
        with open(fd, "wb", closefd=True) as out:
            data = tar.extractfile(info)
            assert data is not None  # a regular file always has data
            done = 0
            while True:
                try:
                    chunk = data.read(_COPY_CHUNK)
                except ContextError as e:
                    raise ContextError(f"{e} (in member {info.name!r})", member=info.name,
                                       too_large=e.too_large) from None
                except _UNREADABLE as e:
                    raise _refuse(info.name, f"cannot be read: {e}") from None
                if not chunk:
                    break
                out.write(chunk)
                done += len(chunk)
            if done != info.size:
                raise _refuse(info.name, f"holds {done} bytes where its header says "
                                         f"{info.size}")
            out.flush()
            _set_mtime(out.fileno(), info.mtime)
        self.written += done

    def finish(self) -> None:
        """Set the directories' times, deepest first (writing into one changes its time)."""
        for parts, mtime in sorted(self._dir_times, key=lambda d: -len(d[0])):
            _set_mtime(parts[-1], mtime, dir_fd=self._dir(parts[:-1], create=False))


def _set_mtime(target: str | int, mtime: float, *, dir_fd: int | None = None) -> None:
    """Set a modification (and access) time, never through a link; a time the system cannot
    store is left as it is."""
    if not math.isfinite(mtime) or mtime < 0:
        return
    with contextlib.suppress(OverflowError, ValueError, OSError):
        if isinstance(target, int):
            os.utime(target, (mtime, mtime))
        else:
            os.utime(target, (mtime, mtime), dir_fd=dir_fd, follow_symlinks=False)
