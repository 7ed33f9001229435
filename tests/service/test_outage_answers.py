"""A database outage that rises from under any handler, API or page, is answered as the 503 it
is, with Retry-After, and is not logged as a traceback."""

from __future__ import annotations

from typing import Any

from det_hub.service.errors import (
    BadRequest,
    Unavailable,
    answered_error,
    logged_as_traceback,
)
from det_hub.store import StoreUnavailable


class _Answer:
    """What a handler's write_error sets: its status and headers."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: dict[str, Any] = {}

    def set_status(self, status: int) -> None:
        self.status = status

    def set_header(self, name: str, value: Any) -> None:
        self.headers[name] = value


def test_an_outage_is_a_503_with_retry_after_and_no_traceback() -> None:
    answer = _Answer()
    full = StoreUnavailable("SQLite: database or disk is full", disk_full=True)
    error = answered_error(answer, full)  # type: ignore[arg-type]
    assert isinstance(error, Unavailable)
    assert (answer.status, answer.headers) == (503, {"Retry-After": "5"})
    assert error.body() == {"error": "the database's disk is full (SQLite: database or disk "
                                     "is full); try again in 5 s", "details": []}
    assert not logged_as_traceback(full)


def test_other_errors_are_answered_as_they_are() -> None:
    answer = _Answer()
    bad = BadRequest("steps: must be at least 0")
    assert answered_error(answer, bad) is bad  # type: ignore[arg-type]
    assert (answer.status, answer.headers) == (500, {})
    assert logged_as_traceback(ValueError("a bug"))
    answered_error(answer, Unavailable("the master is shutting down", retry_after=5))  # type: ignore[arg-type]
    assert answer.headers == {"Retry-After": "5"}
