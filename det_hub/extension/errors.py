"""What the extension answers with when the master cannot be asked: JSON
``{"error": ..., "details": [...]}`` with a status code, as the master's own errors are."""

from __future__ import annotations

from typing import Any


class ExtensionError(Exception):
    """An error answered to the browser: ``status`` and the JSON :meth:`body`."""

    status = 500

    def __init__(self, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "details": self.details}


class BadPath(ExtensionError):
    """A path that would leave the master's ``/api/v1``."""

    status = 400


class BadRequest(ExtensionError):
    """A request body the extension cannot use (missing or wrong fields)."""

    status = 400


class NotFound(ExtensionError):
    """A file, directory or checkpoint the request names is not there."""

    status = 404


class TooLarge(ExtensionError):
    """A context directory over the master's limit."""

    status = 413


class MasterUnreachable(ExtensionError):
    """The master did not take the connection, or dropped it before answering."""

    status = 502


class MasterRefused(ExtensionError):
    """The master answered with an error; its status, message and details are kept."""

    def __init__(self, status: int, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message, details)
        self.status = status


class MasterNotConfigured(ExtensionError):
    """No master URL: neither ``DET_HUB_MASTER`` nor ``MasterConnection.master_url``."""

    status = 503


__all__ = ["BadPath", "BadRequest", "ExtensionError", "MasterNotConfigured", "MasterRefused",
           "MasterUnreachable", "NotFound", "TooLarge"]
