"""Errors the API answers with: a status code and ``{"error": ..., "details": [...]}``."""

from __future__ import annotations

from typing import Any

from tornado.web import HTTPError, RequestHandler

from det_hub.store import StoreUnavailable


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
    """The master cannot answer now but will: 503, with ``Retry-After`` when
    ``retry_after`` (whole seconds) is given."""

    status = 503

    def __init__(self, message: str, details: list[Any] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message, details)
        self.retry_after = retry_after

    @classmethod
    def from_store(cls, error: StoreUnavailable) -> Unavailable:
        """The answer for a database that cannot be used now (see ``StoreUnavailable``)."""
        return cls(str(error), retry_after=error.retry_after)


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


def answered_as(exc: BaseException) -> tuple[BaseException, str | None]:
    """The error answered for ``exc``, and its ``Retry-After``: a
    :class:`~det_hub.store.StoreUnavailable` that rose from under a handler becomes the 503 it
    is (not a 500), and an :class:`Unavailable` says when to come back where it knows."""
    if isinstance(exc, StoreUnavailable):
        exc = Unavailable.from_store(exc)
    retry_after = exc.retry_after if isinstance(exc, Unavailable) else None
    return exc, None if retry_after is None else str(retry_after)


def answered_error(handler: RequestHandler, exc: BaseException | None) -> BaseException | None:
    """The error a handler's ``write_error`` answers for ``exc`` (see :func:`answered_as`),
    its status and ``Retry-After`` set on the handler."""
    if exc is None:
        return None
    error, retry_after = answered_as(exc)
    if isinstance(exc, StoreUnavailable):
        handler.set_status(Unavailable.status)
    if retry_after is not None:
        handler.set_header("Retry-After", retry_after)
    return error


def logged_as_traceback(exc: BaseException | None) -> bool:
    """Whether a handler's uncaught ``exc`` is logged with its traceback: not a database
    outage, which the store logs once, at its start (each request it fails is a 503 in the
    access log)."""
    return not isinstance(exc, StoreUnavailable)

