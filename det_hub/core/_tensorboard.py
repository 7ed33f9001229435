"""Writing TensorBoard event files: scalars only, with no TensorFlow, TensorBoard or protobuf.

An event file is a sequence of TFRecords, each holding one serialised ``tensorflow.Event``.
The first event names the file format (``file_version: "brain.Event:2"``); every later one
carries a ``Summary`` of scalar values at a step.

Implemented here rather than with the ``tensorboard`` package because training images must
not need ``tensorboard`` or ``protobuf`` installed, and the few messages and the record framing
needed are small and fixed:

TFRecord framing::

    uint64 length (little-endian)
    uint32 masked CRC32C of the 8 length bytes
    byte   data[length]
    uint32 masked CRC32C of the data

Messages (proto3 wire format)::

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
              Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

FILE_VERSION = "brain.Event:2"
DEFAULT_FLUSH_SECS = 2.0

_CRC32C_POLY = 0x82F63B78  # Castagnoli, bit-reflected
_MASK_DELTA = 0xA282EAD8
_FLOAT32_MAX = 3.4028234663852886e38
# Tells apart the files of several writers a process opens within one second.
_file_counter = itertools.count()


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """The CRC32C (Castagnoli) checksum of ``data``, as TFRecord files use it."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: CRC32C rotated right by 15 bits plus a constant.

    The masking keeps a CRC of data that itself holds CRCs from being degenerate.
    """
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    """``data`` framed as one TFRecord: length, its checksum, the data, its checksum."""
    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64s take ten bytes, as protobuf writes them
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _float32(value: float) -> bytes:
    if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
        # Too large for a float32: round to infinity, as a float32 cast does.
        value = math.copysign(math.inf, value)
    return struct.pack("<f", value)


def encode_event(
    wall_time: float,
    step: int = 0,
    *,
    file_version: str | None = None,
    scalars: Mapping[str, float] | None = None,
) -> bytes:
    """One ``tensorflow.Event`` in protobuf wire format.

    Args:
        wall_time: Seconds since the epoch.
        step: The step the event belongs to (omitted from the message when 0, as protobuf does).
        file_version: The file-format marker; set on a file's first event only.
        scalars: Tag to value, written as a ``Summary`` of ``simple_value`` entries.
    """
    out = _key(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _key(2, 0) + _varint(step)
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _length_delimited(
                1,
                _length_delimited(1, tag.encode("utf-8", "replace")) + _key(2, 5) + _float32(value),
            )
            for tag, value in scalars.items()
        )
        out += _length_delimited(5, summary)
    return out


def scalar_value(value: Any) -> float | None:
    """``value`` as a float if it is a real number, else None.

    Python and numpy ints and floats count, and so do one-element numpy arrays and torch
    tensors; booleans, strings, complex numbers and containers do not. NaN and infinities are
    floats like any other and are kept.
    """
    if isinstance(value, (bool, str, bytes)):
        return None
    if not isinstance(value, numbers.Real):
        # numpy 0-d arrays and torch tensors: duck-typed, so neither library is imported here.
        item = getattr(value, "item", None)
        if not callable(item):
            return None
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def event_file_name(wall_time: float | None = None) -> str:
    """A new event file's name, ``events.out.tfevents.<seconds>.<host>.<pid>.<counter>``.

    TensorBoard reads the files of a directory in name order, so the time comes first.
    """
    seconds = int(time.time() if wall_time is None else wall_time)
    return (
        f"events.out.tfevents.{seconds}.{socket.gethostname()}.{os.getpid()}.{next(_file_counter)}"
    )


class EventWriter:
    """Writes scalars to a new TensorBoard event file in ``logdir``.

    Records are buffered; a background thread flushes them every ``flush_secs`` seconds, so a
    TensorBoard reading the file live sees new points soon, and :meth:`close` flushes the rest.
    Safe to use from several threads.

    Args:
        logdir: The directory, created with its parents when missing.
        flush_secs: The longest a written record waits in the buffer.

    Raises:
        OSError: The directory or the file cannot be created, or the first record written.
    """

    def __init__(
        self, logdir: str | os.PathLike[str], flush_secs: float = DEFAULT_FLUSH_SECS
    ) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.path = self.logdir / event_file_name(now)
        self._file: BinaryIO = open(self.path, "xb")  # noqa: SIM115 - kept open until close()
        self._lock = threading.Lock()
        self._dirty = False
        self._error: OSError | None = None
        self._closed = threading.Event()
        try:
            self._write(encode_event(now, file_version=FILE_VERSION))
            self._file.flush()
        except OSError:
            self._file.close()
            raise
        self._flusher = threading.Thread(
            target=self._flush_every, args=(flush_secs,), name="det_hub-event-writer", daemon=True
        )
        self._flusher.start()

    def _write(self, event: bytes) -> None:
        self._file.write(tfrecord(event))
        self._dirty = True

    def _check(self) -> None:
        if self._closed.is_set():
            raise ValueError(f"event file {self.path} is closed")
        if self._error is not None:
            raise self._error

    def _flush_locked(self) -> None:
        if self._dirty:
            self._file.flush()
            self._dirty = False

    def _flush_every(self, interval: float) -> None:
        while not self._closed.wait(interval):
            with self._lock:
                if self._closed.is_set() or self._error is not None:
                    return
                try:
                    self._flush_locked()
                except OSError as exc:
                    # Raised to the caller by the next add_scalars(), flush() or close().
                    self._error = exc
                    return

    def add_scalars(
        self, step: int, scalars: Mapping[str, Any], wall_time: float | None = None
    ) -> int:
        """Write one event holding the real-number values of ``scalars`` at ``step``.

        Args:
            step: The x value of the points.
            scalars: Tag to value; values that are not real numbers (see :func:`scalar_value`)
                are skipped.
            wall_time: Seconds since the epoch; now when None.

        Returns:
            How many values were written (no event is written when none).

        Raises:
            OSError: Writing failed, now or in an earlier background flush.
            ValueError: The writer is closed.
        """
        values = {}
        for tag, value in scalars.items():
            number = scalar_value(value)
            if number is not None:
                values[str(tag)] = number
        with self._lock:
            self._check()
            if values:
                stamp = time.time() if wall_time is None else float(wall_time)
                self._write(encode_event(stamp, int(step), scalars=values))
        return len(values)

    def flush(self) -> None:
        """Write buffered records to the file now.

        Raises:
            OSError: Writing failed, now or in an earlier background flush.
            ValueError: The writer is closed.
        """
        with self._lock:
            self._check()
            self._flush_locked()

    def close(self) -> None:
        """Flush, stop the background thread and close the file; closing twice is a no-op.

        Raises:
            OSError: Writing failed, now or in an earlier background flush (the file is
                closed all the same).
        """
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            error = self._error
            try:
                self._file.close()  # flushes what is buffered first
            except OSError as exc:
                error = error or exc
        self._flusher.join()
        if error is not None:
            raise error

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventWriter({str(self.path)!r})"
