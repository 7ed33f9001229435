"""``determined.common.util``: metric-group names and small helpers Determined scripts import."""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

#: The metric group of ``report_training_metrics`` (``core_context.train``).
_LEGACY_TRAINING = "training"
#: The metric group of ``report_validation_metrics``.
_LEGACY_VALIDATION = "validation"
#: The metric group Determined uses for metrics reported by inference jobs.
_INFERENCE = "inference"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def chunks(seq: Sequence[T], chunk_size: int) -> Iterator[Sequence[T]]:
    """``seq`` in consecutive slices of ``chunk_size`` items (the last may be shorter)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, not {chunk_size}")
    for start in range(0, len(seq), chunk_size):
        yield seq[start : start + chunk_size]


def sizeof_fmt(val: float) -> str:
    """A byte count for people: ``sizeof_fmt(2048) == "2.0KB"``."""
    value = float(val)
    for unit in ("", "K", "M", "G", "T", "P", "E", "Z"):
        if abs(value) < 1024.0:
            return f"{value:3.1f}{unit}B"
        value /= 1024.0
    return f"{value:.1f}YB"


def debug_mode() -> bool:
    """Whether ``DET_DEBUG`` asks for debug output (``true``, ``1`` or ``yes``)."""
    return os.environ.get("DET_DEBUG", "").lower() in ("true", "1", "yes")


def preserve_random_state(fn: F) -> F:
    """Decorate ``fn`` so that Python's ``random`` state is the same after it as before."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        state = random.getstate()
        try:
            return fn(*args, **kwargs)
        finally:
            random.setstate(state)

    return wrapped  # type: ignore[return-value]
