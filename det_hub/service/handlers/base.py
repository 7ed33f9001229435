"""The base of every REST handler: JSON in and out, errors as JSON, authentication."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from tornado.iostream import StreamClosedError
from tornado.web import HTTPError, RequestHandler

from det_hub import nonfinite
from det_hub.service import wire
from det_hub.service.errors import (
    APIError,
    BadRequest,
    Forbidden,
    Unauthorized,
    Unavailable,
    answered_error,
    logged_as_traceback,
)
from det_hub.service.serialize import iso
from det_hub.states import ExperimentState
from det_hub.store import MAX_BIG_INTEGER, MAX_INTEGER

#: What a method answers with, for the OpenAPI document (see :attr:`APIHandler.answers`).
Answer = type[BaseModel] | tuple[str, Any] | wire.Lines | str

if TYPE_CHECKING:
    from det_hub.service.master import Master, Principal
    from det_hub.store import User


def log_query(owner: str) -> dict[str, tuple[str, str]]:
    """The query parameters of a log stream (see :meth:`APIHandler.stream_logs`), for the
    OpenAPI document: ``owner`` is what the lines belong to (``trial``, ``task``)."""
    return {
        "follow": ("boolean", f"keep the stream open until the {owner} ends"),
        "after_id": ("integer", "only lines after this id"),
        "limit": ("integer", "at most this many lines (without follow)"),
    }


#: A NUL character escaped in JSON text: ``\u0000`` after an even number of backslashes.
_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")

#: The owner id :meth:`APIHandler.experiment_filters` gives for a user who does not exist.
NO_OWNER = -1


def check_path_ids(path_kwargs: dict[str, str]) -> None:
    """Refuse an id in a request's path past what an id column holds (routes match ids as
    digits): it names nothing, and the database would refuse to look it up.

    Raises:
        BadRequest: Naming the id.
    """
    for name, value in path_kwargs.items():
        if (name.endswith("_id") or name == "version") and value.isdigit() \
                and int(value) > MAX_INTEGER:
            raise BadRequest(f"{name}: must be at most {MAX_INTEGER}")


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer`` (or ``token``) header's value.

    Raises:
        Unauthorized: There is none.
    """
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token.strip():
        raise Unauthorized("no token: send 'Authorization: Bearer <token>'")
    return token.strip()


def json_object(body: bytes) -> dict[str, Any]:
    """A request's body read as a JSON object (an empty body as ``{}``).

    Raises:
        BadRequest: Not JSON, not an object, nested too deeply, or holding a NUL character.
    """
    try:
        data = nonfinite.fast_loads(body or b"{}")
    except ValueError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise BadRequest("the request body is nested too deeply") from None
    # The substring first: the pattern alone holds the interpreter for a second or more on a
    # body of tens of megabytes.
    if b"\\u0000" in body and _NUL.search(body):
        # Neither database stores one in text or JSON.
        raise BadRequest("the request body holds a NUL character (\\u0000), which the "
                         "master does not store")
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data


class APIHandler(RequestHandler):
    """Subclasses implement ``get``/``post``/``delete``; each method's docstring's first line is
    its summary in ``openapi.json``, and ``query`` / ``body`` describe its inputs there.
    """

    #: Answer without a token (health, the OpenAPI document).
    public = False
    #: Training code's allocation tokens may call this handler (for their own trial only;
    #: the manager checks that). Everything else is for users.
    allow_allocation = False
    #: Query parameters per method: {"get": {"name": ("integer", "what it is")}}.
    query: dict[str, dict[str, tuple[str, str]]] = {}
    #: The request body's model per method (:mod:`det_hub.service.wire`): what
    #: :meth:`parsed_body` reads, and the body's schema in the OpenAPI document; a union of
    #: models for a handler that picks one itself.
    body: dict[str, Any] = {}
    #: A successful answer per method, for the OpenAPI document: its model, ``(key, model)``
    #: for ``{key: model}`` (the model may be ``list[model]``; the key may name the route's
    #: arguments, ``"{kind.key}"``), :class:`~det_hub.service.wire.Lines` for
    #: newline-delimited JSON, or a description of an answer that is not JSON.
    answers: dict[str, Answer] = {}
    #: Methods that answer 201 Created.
    created: frozenset[str] = frozenset()
    #: Methods of :attr:`created` whose repeat (the same report again, by its key) answers 200
    #: with what the first stored, instead of 201.
    repeatable: frozenset[str] = frozenset()
    #: Further error statuses per method, for the OpenAPI document.
    extra_responses: dict[str, dict[str, str]] = {}

    principal: Principal

    @property
    def master(self) -> Master:
        return self.application.settings["master"]

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    async def prepare(self) -> None:
        if self.master.stopping:
            raise Unavailable("the master is shutting down; try again shortly", retry_after=5)
        check_path_ids(self.path_kwargs)
        self.master.active_requests.add(id(self))
        if self.public:
            return
        principal = await self.master.users.authenticate(self.bearer_token())
        if principal is None:
            raise Unauthorized("the token is not valid")
        if principal.allocation is not None and not self.allow_allocation:
            raise Forbidden("this endpoint is not open to training code's allocation tokens")
        self.principal = principal

    def bearer_token(self) -> str:
        """The token of the request's ``Authorization: Bearer`` (or ``token``) header.

        Raises:
            Unauthorized: There is none.
        """
        return bearer_token(self.request.headers.get("Authorization", ""))

    def on_finish(self) -> None:
        self.master.active_requests.discard(id(self))

    def on_connection_close(self) -> None:
        self.master.active_requests.discard(id(self))

    @property
    def user(self) -> User:
        """The calling user; training code's allocation tokens are refused here."""
        if self.principal.user is None:
            raise Forbidden("this endpoint is not open to training code's allocation tokens")
        return self.principal.user

    def log_exception(self, typ: type[BaseException] | None, value: BaseException | None,
                      tb: TracebackType | None) -> None:
        if logged_as_traceback(value):
            super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = answered_error(self, kwargs.get("exc_info", (None, None, None))[1])
        if isinstance(exc, APIError):
            body = exc.body()
        elif isinstance(exc, HTTPError) and exc.log_message:
            body = {"error": exc.log_message, "details": []}
        else:
            body = {"error": self._reason, "details": []}
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(body))

    def json_body(self) -> dict[str, Any]:
        return json_object(self.request.body)

    def parsed_body(self) -> Any:
        """The request's JSON body read through this method's model (:attr:`body`), checked.

        Raises:
            BadRequest: Not a JSON object, or a field that is wrong: the error names the
                first, and each problem is a ``{"path", "message"}`` detail.
        """
        return wire.parse(self.body[self.request.method.lower()], self.json_body())

    def send(self, obj: Any, status: int = 200) -> None:
        self.set_status(status)
        # NaN and infinite metrics go out as Determined's strings: always valid JSON.
        self.finish(nonfinite.dumps(obj))

    def int_arg(self, name: str, default: int, lo: int = 0, hi: int = MAX_BIG_INTEGER) -> int:
        """A whole-number query argument from ``lo`` to ``hi`` (by default, what the database
        can hold), ``default`` when it is not given."""
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadRequest(f"{name}: must be an integer") from None
        if not lo <= value <= hi:
            raise BadRequest(f"{name}: must be between {lo} and {hi}")
        return value

    async def experiment_filters(self) -> tuple[list[str], int | None]:
        """The ``state`` (repeatable) and ``owner`` arguments of the experiment lists: the
        states, checked, and the owner's id, :data:`NO_OWNER` for a user who does not exist
        (no experiment has it), None when not given."""
        states = self.get_query_arguments("state")
        for s in states:
            if s not in ExperimentState.__members__:
                raise BadRequest(f"state: {s!r} is not an experiment state")
        owner = self.get_query_argument("owner", None)
        if not owner:
            return states, None
        user = await self.master.users.get(owner)
        return states, user.id if user is not None else NO_OWNER

    def bool_arg(self, name: str) -> bool | None:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return None
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise BadRequest(f"{name}: must be true or false")

    async def stream_logs(
        self,
        read: Callable[[int, int], Awaitable[Sequence[Any]]],
        key: str,
        ended: Callable[[], Awaitable[bool]],
    ) -> None:
        """Answer with log rows as newline-delimited JSON, from the ``after_id``, ``limit`` and
        ``follow`` query arguments.

        Args:
            read: ``read(after_id, limit)``: the next stored rows, oldest first.
            key: the name of the field holding the rows' owner id (``trial_id``, ``task_id``).
            ended: whether the owner has ended, so that no more lines can come; following
                stops once it has and every line has been sent.
        """
        follow = bool(self.bool_arg("follow"))
        after = self.int_arg("after_id", 0)
        remaining = self.int_arg("limit", 0) or None
        self.set_header("Content-Type", "application/x-ndjson")
        try:
            while True:
                batch = 1000 if remaining is None else min(1000, remaining)
                rows = await read(after, batch)
                for r in rows:
                    self.write(json.dumps({
                        "id": r.id, key: getattr(r, key), "allocation_id": r.allocation_id,
                        "timestamp": iso(r.timestamp), "rank": r.rank, "stdtype": r.stdtype,
                        "message": r.message}) + "\n")
                if rows:
                    after = rows[-1].id
                    await self.flush()
                    if remaining is not None:
                        remaining -= len(rows)
                        if remaining <= 0:
                            break
                    if len(rows) == batch:
                        continue
                if not follow or self.master.stopping:
                    break
                if await ended():
                    # The last lines are stored before the end is; one more read picks up
                    # anything written between our read and that check.
                    if not await read(after, 1):
                        break
                    continue
                await asyncio.sleep(0.25)
        except StreamClosedError:
            return
        self.finish()
