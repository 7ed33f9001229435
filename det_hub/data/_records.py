"""A record file: many byte strings in one file, any of which is read in O(1).

Layout (integers are little-endian unsigned 64-bit)::

    MAGIC | record 0 | record 1 | ... | padding to 8 bytes | offsets[0..n] | n | index_at | MAGIC

``offsets[i]`` is where record ``i`` starts and ``offsets[n]`` where the last one ends, so
record ``i`` is ``file[offsets[i]:offsets[i + 1]]``. The index sits at the end so that a writer
streams records without knowing how many will come; the magic at both ends tells a truncated
or foreign file from a record file.

A plain format of our own rather than LMDB, TFRecord or Arrow: it needs no compiled
dependency, a reader maps it into memory and slices it, and one file is one object to cache.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

MAGIC = b"DHREC01\n"
_FOOTER = struct.Struct("<QQ8s")

# The index is read and written as native unsigned 64-bit integers (array "Q", memoryview
# "Q"), which is the file's little-endian layout on every host this runs on.
if sys.byteorder != "little" or array("Q").itemsize != 8:  # pragma: no cover
    raise ImportError("det_hub.data needs a little-endian host with 64-bit array('Q')")


class RecordFormatError(ValueError):
    """A file that is not a complete record file."""


class RecordWriter:
    """Writes a record file; the file appears, complete, only when the writer closes.

    Use as a context manager: records go to ``<path>.part`` and are renamed into place on a
    clean exit; on an exception the partial file is removed and ``path`` is left as it was.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._partial = self.path.with_name(self.path.name + ".part")
        self._file = open(self._partial, "wb")  # noqa: SIM115 - closed by close() or __exit__
        self._file.write(MAGIC)
        self._offsets = array("Q", [len(MAGIC)])

    def write(self, record: bytes | bytearray | memoryview) -> int:
        """Append one record; answers its index."""
        self._file.write(record)
        self._offsets.append(self._offsets[-1] + len(record))
        return len(self._offsets) - 2

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def close(self) -> None:
        """Write the index and move the file into place."""
        end = self._offsets[-1]
        self._file.write(b"\0" * (-end % 8))
        index_at = end + (-end % 8)
        offsets = self._offsets
        self._file.write(offsets.tobytes())
        self._file.write(_FOOTER.pack(len(offsets) - 1, index_at, MAGIC))
        self._file.close()
        os.replace(self._partial, self.path)

    def abort(self) -> None:
        """Drop what was written."""
        self._file.close()
        self._partial.unlink(missing_ok=True)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_records(path: str | os.PathLike[str], records: Iterable[bytes]) -> int:
    """Write ``records`` to a new record file at ``path``; answers how many were written."""
    with RecordWriter(path) as writer:
        for record in records:
            writer.write(record)
        return len(writer)


class RecordFile:
    """A record file mapped into memory: ``len(f)`` records, ``f[i]`` the bytes of one.

    Safe to share between the threads of a process; each process (a DataLoader worker)
    opens its own.

    Raises:
        RecordFormatError: the file is not a complete record file (names the file and why).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(MAGIC) + _FOOTER.size:
                raise RecordFormatError(f"{self.path}: {size} bytes is too short for a record file")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        count, index_at, tail = _FOOTER.unpack_from(self._map, size - _FOOTER.size)
        if self._map[: len(MAGIC)] != MAGIC or tail != MAGIC:
            self._map.close()
            raise RecordFormatError(f"{self.path}: not a record file, or an incomplete one")
        if index_at + 8 * (count + 1) + _FOOTER.size != size:
            self._map.close()
            raise RecordFormatError(
                f"{self.path}: the index says {count} records at byte {index_at}, which does "
                f"not fit a file of {size} bytes")
        self._offsets = memoryview(self._map)[index_at : index_at + 8 * (count + 1)].cast("Q")
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> bytes:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(f"record {index} of {self._count}")
        return self._map[self._offsets[index] : self._offsets[index + 1]]

    def span(self, index: int) -> tuple[int, int]:
        """Where record ``index`` lies in the file: ``(start, end)`` byte offsets."""
        if not 0 <= index < self._count:
            raise IndexError(f"record {index} of {self._count}")
        return int(self._offsets[index]), int(self._offsets[index + 1])

    def __iter__(self) -> Iterator[bytes]:
        for i in range(self._count):
            yield self[i]

    @property
    def nbytes(self) -> int:
        """The bytes of all records together."""
        return int(self._offsets[self._count] - self._offsets[0])

    def close(self) -> None:
        self._offsets.release()
        self._map.close()

    def __getstate__(self) -> dict[str, str]:
        # A DataLoader worker gets the path and maps the file itself.
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]


__all__ = ["MAGIC", "RecordFile", "RecordFormatError", "RecordWriter", "write_records"]
