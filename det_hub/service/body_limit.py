"""A tornado application that answers a request body over its ``max_body_bytes`` setting
with 413 and the setting to change (the master's, and its ingest workers')."""

from __future__ import annotations

import json
from typing import Any

import tornado.web
from tornado import httputil


class BodyLimitedApplication(tornado.web.Application):
    """Tornado's application, answering a request body over ``max_body_bytes`` with 413 and
    the setting to change: tornado's own ``max_body_size`` check answers a bare 400 and
    drops the connection before the client has finished sending."""

    def start_request(self, server_conn: object,
                      request_conn: httputil.HTTPConnection) -> httputil.HTTPMessageDelegate:
        return _BodyLimit(super().start_request(server_conn, request_conn), request_conn,
                          self.settings["max_body_bytes"])


#: Past the limit, a body up to this many bytes more is read and dropped, so that the client
#: (which sends the whole body before it reads an answer) gets the 413 and may go on using the
#: connection; past that, the 413 is sent at once and the connection closed.
DISCARD_BYTES = 256 * 1024 * 1024


class _BodyLimit(httputil.HTTPMessageDelegate):
    """Refuses a request whose ``Content-Length`` is over the limit; others pass through."""

    def __init__(self, inner: httputil.HTTPMessageDelegate,
                 connection: httputil.HTTPConnection, limit: int) -> None:
        self.inner = inner
        self.connection = connection
        self.limit = limit
        self.refused: int | None = None  # the refused body's length

    def headers_received(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                         headers: httputil.HTTPHeaders) -> Any:
        length = headers.get("Content-Length", "")
        if not (length.isdigit() and int(length) > self.limit):
            return self.inner.headers_received(start_line, headers)
        self.refused = int(length)
        if self.refused - self.limit <= DISCARD_BYTES:
            # Read (and drop) the body; finish() answers.
            self.connection.set_max_body_size(self.refused)  # type: ignore[attr-defined]
            return None
        # Too much to read: answer now and close, leaving the body unread.
        stream = self.connection.detach()  # type: ignore[attr-defined]
        body = self._body()
        head = (f"HTTP/1.1 413 Payload Too Large\r\n"
                f"Content-Type: application/json; charset=UTF-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        stream.write(head + body).add_done_callback(lambda _: stream.close())
        return None

    def data_received(self, chunk: bytes) -> Any:
        if self.refused is None:
            return self.inner.data_received(chunk)
        return None

    def finish(self) -> None:
        if self.refused is None:
            self.inner.finish()
            return
        body = self._body()
        self.connection.write_headers(
            httputil.ResponseStartLine("HTTP/1.1", 413, "Payload Too Large"),
            httputil.HTTPHeaders({"Content-Type": "application/json; charset=UTF-8",
                                  "Content-Length": str(len(body))}),
            body)
        self.connection.finish()

    def on_connection_close(self) -> None:
        if self.refused is None:
            self.inner.on_connection_close()

    def _body(self) -> bytes:
        assert self.refused is not None
        return too_large(self.refused, self.limit)


def too_large(length: int, limit: int) -> bytes:
    """The body of the 413 answering a request body of ``length`` bytes."""
    return json.dumps({
        "error": f"the request body is {length} bytes, larger than the limit of {limit} bytes "
                 "(MasterApp.request_max_body_bytes)",
        "details": []}).encode()


__all__ = ["DISCARD_BYTES", "BodyLimitedApplication", "too_large"]
