"""How the CLI and the notebook magics show things: tables for people, JSON for programs;
numbers, times and log lines in the short forms both print."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from det_hub.client import parse_time

NONE = "-"


def print_json(data: Any) -> None:
    """Prints API JSON as the master sent it, indented."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Prints a plain-text table; an empty one still shows its headers."""
    sys.stdout.write(tabulate(list(rows), headers=list(headers), tablefmt="simple", disable_numparse=True) + "\n")


def print_fields(fields: Iterable[tuple[str, Any]]) -> None:
    """Prints one object as a two-column ``name  value`` table."""
    sys.stdout.write(tabulate([(f"{k}:", v) for k, v in fields], tablefmt="plain", disable_numparse=True) + "\n")


def fmt_time(value: dt.datetime | str | None) -> str:
    """An API time in the local zone, short form: ``2026-11-22 11:00:00``."""
    when = parse_time(value) if isinstance(value, str) else value
    if when is None:
        return NONE
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(start: dt.datetime | None, end: dt.datetime | None = None, now: dt.datetime | None = None) -> str:
    """The time from ``start`` to ``end`` (or to now while running), e.g. ``1h 02m``."""
    if start is None:
        return NONE
    stop = end or now or dt.datetime.now(dt.timezone.utc)
    seconds = max(0, int((stop - start).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def fmt_percent(fraction: float | None) -> str:
    """A 0..1 progress as a whole percent."""
    if fraction is None:
        return NONE
    return f"{fraction * 100:.0f}%"


def fmt_bytes(size: int | None) -> str:
    """A byte count in binary units: ``1.2 MiB``."""
    if size is None:
        return NONE
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # not reached


def fmt_value(value: Any) -> str:
    """A metric or hyperparameter value, compact: floats to 6 significant digits."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def fmt_mapping(mapping: dict[str, Any] | None) -> str:
    """A dict on one line: ``lr=0.1, layers=2``."""
    if not mapping:
        return NONE
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in mapping.items())


def fmt_bool(value: bool) -> str:
    """Yes or no, for table cells."""
    return "yes" if value else "no"


def or_none(value: Any) -> Any:
    """The value, or ``-`` when it is empty."""
    return NONE if value is None or value == "" else value


def format_log_line(line: dict[str, Any]) -> str:
    """A log row as ``[timestamp] [rank=0] message``; the rank part is left out when unknown."""
    message = str(line.get("message", "")).rstrip("\n")
    parts = []
    if line.get("timestamp"):
        parts.append(f"[{line['timestamp']}]")
    if line.get("rank") is not None:
        parts.append(f"[rank={line['rank']}]")
    parts.append(message)
    return " ".join(parts)
