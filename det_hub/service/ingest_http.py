"""The ingest workers' HTTP/1.1 server (:mod:`det_hub.service.ingest_worker`): asyncio's
transports, and httptools' parser (llhttp, the one Node.js uses) for the requests.

A worker answers one route, a trial's metric report, and answers it as the master does; a
report of 100 rows takes a fifth of the CPU here that tornado's whole stack (routing, request
handler objects, header classes) took before the handler ran (see docs/cluster.md).

On each connection the requests are answered one at a time, in the order they came: requests
sent without waiting (pipelined) queue up, and past :data:`MAX_QUEUED` the connection is not
read until they are answered. The connection is kept alive as HTTP/1.1 says (HTTP/1.0 only
when asked) and closed after an answer with ``Connection: close``. A body over the limit is
answered 413 with the setting to change, as the master answers it: read and dropped up to
:data:`~det_hub.service.body_limit.DISCARD_BYTES` past the limit so that the connection goes
on, else answered at once and the connection closed. ``Expect: 100-continue`` is answered
when nothing is ahead of the request. A request line and headers over
:data:`MAX_HEADER_BYTES` are answered 431, and what is not HTTP/1.x 400; both close.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import http
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import httptools

from det_hub.service.body_limit import DISCARD_BYTES, too_large

log = logging.getLogger("det_hub.ingest")

#: Bytes of request line and headers a request may have (tornado's default too).
MAX_HEADER_BYTES = 64 * 1024
#: Requests a connection may have waiting for their answers before it is no longer read.
MAX_QUEUED = 16
#: Bytes read while a request's head is unfinished past which it is refused (431): the
#: parser keeps a header it has not seen the end of, and a reading hands it at most 256 KiB,
#: some of which may be the end of the request before.
MAX_UNFINISHED_HEAD_BYTES = MAX_HEADER_BYTES + (1 << 20)
#: Seconds a connection refused mid-request is still read (and what comes dropped) after its
#: answer, so that the client reads the answer rather than a reset for the bytes unread.
LINGER_S = 1.0


@dataclass
class Request:
    """One request as read: ``headers`` by lower-case name (a repeated header's last value)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.partition("?")[0]


@dataclass
class Answer:
    """What a request is answered: a status, a JSON body and any more headers."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def error(cls, status: int, message: str) -> Answer:
        return cls(status, json.dumps({"error": message, "details": []}).encode())


#: Answers a request; it answers errors too, and raises nothing.
Handler = Callable[[Request], Awaitable[Answer]]


class HTTPServer:
    """Serves ``handle`` on listening sockets until :meth:`close`."""

    def __init__(self, handle: Handler, *, max_body_bytes: int) -> None:
        self.handle = handle
        self.max_body_bytes = max_body_bytes
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[_Connection] = set()
        self._date = (0, "")

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Accept connections on ``sockets`` (already listening)."""
        loop = asyncio.get_running_loop()
        for sock in sockets:
            self._servers.append(await loop.create_server(lambda: _Connection(self), sock=sock))

    async def close(self, timeout: float) -> bool:
        """Stop accepting, let each connection answer what it has read (at most ``timeout``
        seconds) and close it. Whether every answer was sent in time."""
        for server in self._servers:
            server.close()
        for connection in list(self._connections):
            connection.close_when_idle()
        deadline = time.monotonic() + timeout
        while self._connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        in_time = not self._connections
        for connection in list(self._connections):
            connection.abort()
        return in_time

    def date(self) -> str:
        """The ``Date`` header's value, made once a second."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, email.utils.formatdate(now, usegmt=True))
        return self._date[1]


class _Connection(asyncio.Protocol):
    """One client's connection: its parser, its requests waiting, and the task answering."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiting: collections.deque[Request | Answer] = collections.deque()
        self.answering: asyncio.Task[None] | None = None
        # What the request being read has so far.
        self.target = bytearray()
        self.headers: dict[str, str] = {}
        self.head_bytes = 0
        self.in_head = False
        self.head_read = 0  # bytes read while the head was unfinished
        self.body = bytearray()
        self.refused: int | None = None  # the length of a body over the limit
        self.done_reading = False
        self.closing = False

    # -- the transport's side ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport's subclasses).
        self.transport = cast(asyncio.Transport, transport)
        self.server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        self.waiting.clear()
        self.done_reading = True

    def data_received(self, data: bytes) -> None:
        if self.done_reading:
            return
        try:
            self.parser.feed_data(data)
            if self.in_head:
                self.head_read += len(data)
                if self.head_read > MAX_UNFINISHED_HEAD_BYTES:
                    self._too_long_head()
        except httptools.HttpParserUpgrade:
            pass  # refused as its message completed
        except httptools.HttpParserError as e:
            if not self.done_reading:  # else a callback refused the request already
                self._last(Answer.error(400, f"not an HTTP/1.x request: {e}"))

    # -- the parser's side ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.target.clear()
        self.headers = {}
        self.head_bytes = 0
        self.in_head = True
        self.head_read = 0
        self.body.clear()
        self.refused = None

    def on_url(self, url: bytes) -> None:
        self.target += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.in_head = False
        if self.done_reading:
            return
        limit = self.server.max_body_bytes
        length = self.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            self.refused = int(length)
            if self.refused - limit > DISCARD_BYTES or self._expects_continue():
                # Too much to read, or a client that waits to be asked: answered unread.
                self._last(Answer(413, too_large(self.refused, limit)))
            return
        if self._expects_continue() and not self.waiting and self.answering is None:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        if self.refused is not None or self.done_reading:
            return
        self.body += chunk
        if len(self.body) > self.server.max_body_bytes:  # sent in chunks, of no length given
            self._last(Answer(413, too_large(len(self.body), self.server.max_body_bytes)))

    def on_message_complete(self) -> None:
        if self.done_reading:
            return
        if self.refused is not None:
            self._queue(Answer(413, too_large(self.refused, self.server.max_body_bytes)))
            return
        if self.parser.should_upgrade():
            self._last(Answer.error(400, "protocol upgrades are not served here"))
            return
        self._queue(Request(self.parser.get_method().decode("ascii"),
                            self.target.decode("latin-1"), self.headers, bytes(self.body),
                            self.parser.should_keep_alive()))

    # -- answering -----------------------------------------------------------------------

    def close_when_idle(self) -> None:
        """Close once what was read is answered (the server is stopping)."""
        self.closing = True
        if self.answering is None and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _count_head(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > MAX_HEADER_BYTES:
            self._too_long_head()

    def _too_long_head(self) -> None:
        if not self.done_reading:
            self._last(Answer.error(431, f"the request line and headers are over "
                                         f"{MAX_HEADER_BYTES} bytes"))

    def _expects_continue(self) -> bool:
        return self.headers.get("expect", "").lower() == "100-continue"

    def _last(self, answer: Answer) -> None:
        """Answer ``answer`` after what is waiting, read no more, and close."""
        self.done_reading = True
        answer.headers["Connection"] = "close"
        self._queue(answer)

    def _queue(self, item: Request | Answer) -> None:
        self.waiting.append(item)
        assert self.transport is not None
        if len(self.waiting) >= MAX_QUEUED:
            self.transport.pause_reading()
        if self.answering is None:
            self.answering = asyncio.get_running_loop().create_task(self._answer_waiting())

    async def _answer_waiting(self) -> None:
        transport = self.transport
        assert transport is not None
        try:
            while self.waiting:
                item = self.waiting.popleft()
                if isinstance(item, Answer):
                    answer, keep_alive = item, "Connection" not in item.headers
                else:
                    answer, keep_alive = await self.server.handle(item), item.keep_alive
                if transport.is_closing():
                    return
                keep_alive = keep_alive and not self.closing
                transport.write(self._head(answer, keep_alive) + answer.body)
                if not keep_alive:
                    self._close_after_answer(transport)
                    return
                if len(self.waiting) == MAX_QUEUED - 1:
                    transport.resume_reading()
            if self.closing:
                transport.close()
        except Exception:  # a bug here must not leave the client waiting for ever
            log.exception("answering a request failed; closing its connection")
            transport.abort()
        finally:
            self.answering = None

    def _close_after_answer(self, transport: asyncio.Transport) -> None:
        """Close once the answer is sent; a client refused mid-request may still be sending,
        so its connection is half closed and read for :data:`LINGER_S` first."""
        if not self.done_reading or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def _head(self, answer: Answer, keep_alive: bool) -> bytes:
        try:
            reason = http.HTTPStatus(answer.status).phrase
        except ValueError:
            reason = "Unknown"
        lines = [f"HTTP/1.1 {answer.status} {reason}",
                 "Content-Type: application/json; charset=UTF-8", "Cache-Control: no-store",
                 f"Date: {self.server.date()}", f"Content-Length: {len(answer.body)}"]
        lines.extend(f"{name}: {value}" for name, value in answer.headers.items()
                     if name != "Connection")
        if not keep_alive:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


__all__ = ["LINGER_S", "MAX_HEADER_BYTES", "MAX_QUEUED", "MAX_UNFINISHED_HEAD_BYTES",
           "Answer", "HTTPServer", "Request"]
