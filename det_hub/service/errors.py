"""Errors the API answers with: a status code and ``{"error": ..., "details": [...]}``."""

from __future__ import annotations

from typing import Any

from tornado.web import HTTPError


class APIError(HTTPError):
    status = 500

    def __init__(self, message: str, details: list[Any] | None = None,
                 status: int | None = None) -> None:
        super().__init__(status or self.status, reason=None)
        self.message = message
        self.details = details or []

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "details": self.details}

    def __str__(self) -> str:
        return self.message


class BadRequest(APIError):
    status = 400


class Unauthorized(APIError):
    status = 401


class Forbidden(APIError):
    status = 403


class NotFound(APIError):
    status = 404


class Conflict(APIError):
    status = 409


class TooLarge(APIError):
    status = 413


class Unavailable(APIError):
    status = 503


class NotReady(Unavailable):
    """A proxied task that is not serving (yet, or any more)."""

    def __init__(self, task: Any) -> None:
        from det_hub.states import TaskType

        word = TaskType(task.type).word
        if task.state == "TERMINATED":
            message = f"{word} {task.id} has ended ({task.exit_reason or 'TERMINATED'})"
        else:
            message = f"{word} {task.id} is {task.state} and not serving yet; try again shortly"
        super().__init__(message)
        self.task = task
