"""NaN and infinite numbers in JSON, written as Determined's REST API writes them.

JSON has no NaN or infinity, and PostgreSQL's ``jsonb`` refuses Python's bare ``NaN`` and
``Infinity`` tokens. Determined's REST API (protobuf's JSON mapping of ``double``) writes them
as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``; det_hub does the same on the wire
(training code to master, master to clients) and in the database. Where a metric is read as a
number (the master on receipt, the SDK on reading) those three strings become floats again, so
a string metric spelled exactly like one of them reads back as a float: the same trade-off
Determined's API makes.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "INFINITY",
    "NAN",
    "NEGATIVE_INFINITY",
    "decode",
    "dumps",
    "encode",
    "fast_loads",
    "loads_strict",
]

NAN = "NaN"
INFINITY = "Infinity"
NEGATIVE_INFINITY = "-Infinity"

_FROM_TEXT = {NAN: math.nan, INFINITY: math.inf, NEGATIVE_INFINITY: -math.inf}


def _text(number: float) -> str:
    if math.isnan(number):
        return NAN
    return INFINITY if number > 0 else NEGATIVE_INFINITY


def encode(value: Any) -> Any:
    """``value`` with every NaN or infinite float (in dicts, lists and tuples too) replaced
    by its string; the same object when there is none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _text(value)
    if isinstance(value, Mapping):
        items = {k: encode(v) for k, v in value.items()}
        if all(items[k] is v for k, v in value.items()):
            return value
        return items
    if isinstance(value, (list, tuple)):
        out = [encode(v) for v in value]
        if all(a is b for a, b in zip(out, value, strict=True)):
            return value
        return out
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`: ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (in dicts
    and lists too) become floats; everything else is returned as it is."""
    if isinstance(value, str):
        return _FROM_TEXT.get(value, value)
    if isinstance(value, Mapping):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`encode`\\ d ``value``: always valid JSON."""
    return json.dumps(encode(value), allow_nan=False, **kwargs)


def _refuse(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses the bare ``NaN``, ``Infinity`` and ``-Infinity`` tokens
    Python would otherwise accept."""
    return json.loads(text, parse_constant=_refuse)


#: Every digit as ``0``, a minus sign as itself, the other characters of a number (``.``,
#: ``e``, ``E``, ``+``) as ``.`` and anything else as a space: a body mapped through it shows
#: a whole number orjson would read as a float (past 64 bits: 20 digits or more, or 19 after a
#: minus sign) as a run of zeros after a space (or a space and a minus sign), which a
#: substring search finds; the digits of a fraction or an exponent, which metrics are full
#: of, follow a ``.`` and are passed over. Both steps run at memory speed, where a regular
#: expression takes a second over 50 MB while holding the interpreter. A run of digits inside
#: a string, or a number with 20 digits before its point, only costs the slow path.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else b if b == 0x2D
                else 0x2E if b in b".eE+" else 0x20 for b in range(256))
_TWENTY_DIGITS = b" " + b"0" * 20
_MINUS_NINETEEN = b" -" + b"0" * 19


def _past_64_bits(data: bytes) -> bool:
    """Whether ``data`` may hold a whole number past 64 bits (see :data:`_DIGITS`)."""
    digits = b" " + data.translate(_DIGITS)
    return _TWENTY_DIGITS in digits or _MINUS_NINETEEN in digits


def fast_loads(data: bytes) -> Any:
    """JSON read by orjson, several times faster than :mod:`json`, and read by :mod:`json`
    where orjson would change it: a whole number past 64 bits (which orjson reads as a float)
    or what orjson refuses (Python's bare ``NaN`` and ``Infinity``).

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``).
    """
    import orjson

    if not _past_64_bits(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def _not_plain(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is left to json")


def fast_dumps(value: Any) -> bytes:
    """Compact, strict JSON of ``value``, as ``json.dumps`` with ``allow_nan=False`` writes
    it, written by orjson (several times faster) where orjson writes what :mod:`json` would.
    The rest goes through :mod:`json`: what orjson refuses (a whole number past 64 bits, a key
    that is not a string), what it would write otherwise (a subclass of a plain type, a date,
    a dataclass), and a document that holds ``null``, since orjson writes NaN and infinities
    as ``null`` where :mod:`json` refuses them. A UUID or an enum member, which :mod:`json`
    refuses, is written as its value.

    Raises:
        ValueError: ``value`` holds a NaN or an infinity.
        TypeError: ``value`` holds something JSON cannot carry.
    """
    import orjson

    try:
        data = orjson.dumps(value, default=_not_plain, option=orjson.OPT_PASSTHROUGH_SUBCLASS
                            | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS)
    except TypeError:  # orjson.JSONEncodeError
        pass
    else:
        if b"null" not in data:
            return data
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
