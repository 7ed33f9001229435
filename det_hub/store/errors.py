"""Errors the store raises for the service to turn into HTTP answers."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of the store's own errors."""


class StoreConflict(StoreError):
    """A write would break a uniqueness rule (a taken username, a reused uuid or token)."""


class NotFound(StoreError):
    """A row to update, or one a new row refers to, does not exist."""


class StoreUnavailable(StoreError):
    """The database cannot be used right now: it does not answer (stopped, restarting,
    unreachable) or it has no room left to write. Nothing of the failed call was stored, and
    the same call may succeed later; the service answers 503 with ``Retry-After``.

    Attributes:
        cause: What the database or its driver said, in one line.
        disk_full: The database's disk (or SQLite's page limit) is full, rather than the
            database not answering.
        retry_after: Whole seconds after which a caller should try again.
    """

    def __init__(self, cause: str, *, disk_full: bool = False,
                 retry_after: int | None = None) -> None:
        self.cause = cause
        self.disk_full = disk_full
        self.retry_after = retry_after if retry_after is not None else (5 if disk_full else 2)
        super().__init__(f"{self.what} ({cause}); try again in {self.retry_after} s")

    @property
    def what(self) -> str:
        """The outage in a few words: the database's disk is full, or it is unavailable."""
        return "the database's disk is full" if self.disk_full else "the database is unavailable"
