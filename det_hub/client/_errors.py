"""Errors raised by the SDK.

Every error derives from :class:`DetHubError`, so callers that only want to report a failure to
a user can catch that one class; the subclasses carry what a program needs to react.
"""

from __future__ import annotations

from typing import Any


class DetHubError(Exception):
    """Base class of every error the SDK raises."""


class MasterError(DetHubError):
    """The master answered with an HTTP error.

    Attributes:
        status: The HTTP status code (400 bad input, 401 bad token, 404 unknown id, 409 wrong
            state, 413 too large, ...).
        message: The one-sentence ``error`` of the master's JSON error body.
        details: The ``details`` list of the error body; for config errors each item is
            ``{"path": ..., "message": ...}``.
    """

    def __init__(self, status: int, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details: list[Any] = list(details or [])

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"MasterError(status={self.status}, message={self.message!r}, details={self.details!r})"

    def detail_lines(self) -> list[str]:
        """The details rendered one per line, ``path: message`` where a path is given."""
        lines = []
        for item in self.details:
            if isinstance(item, dict):
                path = item.get("path")
                message = item.get("message", "")
                if path:
                    lines.append(f"{path}: {message}")
                elif message:
                    lines.append(str(message))
                else:
                    lines.append(str(item))
            else:
                lines.append(str(item))
        return lines


class MasterUnreachable(DetHubError):
    """No answer from the master: connection refused, DNS failure or a timeout.

    Attributes:
        url: The master URL that was tried.
        reason: What went wrong, as the network layer put it.
    """

    def __init__(self, url: str, reason: str = "") -> None:
        message = f"cannot reach the master at {url}"
        if reason:
            message += f" ({reason})"
        super().__init__(message)
        self.url = url
        self.reason = reason


class ContextError(DetHubError):
    """A model-definition directory that cannot be packed (missing, or an unsafe symlink)."""


class ContextTooLarge(ContextError):
    """The context's files add up to more than the master accepts.

    Attributes:
        size: The total size, in bytes, of the files that would be sent (before compression).
        limit: The largest total the master accepts.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"the context directory holds {_mib(size)} of files, over the limit of {_mib(limit)}; "
            "list large files (data sets, checkpoints) in a .detignore file"
        )
        self.size = size
        self.limit = limit


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"
