"""Passing an upstream server's HTTP answer on through a tornado handler, as it arrives: what
the master's proxy to notebooks and the notebook server's proxy to the master share."""

from __future__ import annotations

from collections.abc import Callable

from tornado.httputil import HTTPHeaders, parse_response_start_line
from tornado.web import RequestHandler

#: Headers that belong to one connection, not to the request or answer passed on.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade",
})


class AnswerRelay:
    """A ``header_callback`` for tornado's HTTP client that sets the upstream answer's status
    and headers on ``handler`` once they are complete, so that the body can follow chunk by
    chunk. Interim ``100 Continue`` answers are skipped.

    Args:
        handler: Where the answer goes.
        passes: Whether an answer header (by lower-case name) is passed on; hop-by-hop
            headers and ``Content-Length`` (the body is re-framed) never are.
    """

    def __init__(self, handler: RequestHandler,
                 passes: Callable[[str], bool] = lambda name: True) -> None:
        self.handler = handler
        self.passes = passes
        #: Whether the final status line has come (the upstream server answered).
        self.answered = False
        #: The final answer's headers, complete once the blank line after them has come.
        self.headers = HTTPHeaders()

    def __call__(self, line: str) -> None:
        if line.startswith("HTTP/"):
            start = parse_response_start_line(line.strip())
            self.answered = start.code != 100
            self.headers = HTTPHeaders()
            if self.answered:
                self.handler.set_status(start.code, start.reason)
        elif line.strip():
            self.headers.parse_line(line)
        elif self.answered:
            self.handler.clear_header("Content-Type")
            for name, value in self.headers.get_all():
                lower = name.lower()
                if lower not in HOP_BY_HOP and lower != "content-length" and self.passes(lower):
                    self.handler.add_header(name, value)


__all__ = ["HOP_BY_HOP", "AnswerRelay"]
