"""A tiny real HTTP server on 127.0.0.1 that answers like the master, for client and CLI tests.

Routes map ``(method, path)`` to a handler that gets the :class:`Request` and returns a
:class:`Reply` (JSON or raw bytes, optionally streamed in chunks and cut off mid-way).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API = "/api/v1"


@dataclass
class Request:
    method: str
    path: str  # without the /api/v1 prefix
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or bytes sent as they are
    content_type: str = "application/json"
    chunks: list[bytes] | None = None  # streamed with chunked encoding when given
    drop: bool = False  # cut the connection after the chunks, without the final chunk
    pause: float = 0.0  # seconds of silence after the chunks, before the end
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Reply]


class FakeMaster:
    """Serves canned answers; records every request it gets."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        master = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # keep test output clean

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = parts.path[len(API):] if parts.path.startswith(API) else parts.path
                request = Request(
                    method=self.command,
                    path=path,
                    query={k: v[-1] for k, v in parse_qs(parts.query).items()},
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with master._lock:
                    master.requests.append(request)
                    handler = master.routes.get((self.command, path))
                if handler is None:
                    reply = Reply(404, {"error": f"no route {self.command} {path}", "details": []})
                else:
                    reply = handler(request)
                self._write(reply)

            def _write(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunks is not None:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for chunk in reply.chunks:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    time.sleep(reply.pause)
                    if reply.drop:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        self.close_connection = True  # the client gave up waiting
                    return
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        class _Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up on purpose (timeouts, drops) is expected here

        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeMaster:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def route(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

    def json(self, method: str, path: str, body: Any, status: int = 200) -> None:
        """Answers ``method path`` with a fixed JSON body."""
        self.route(method, path, lambda _request: Reply(status, body))

    def sequence(self, method: str, path: str, bodies: list[Any]) -> None:
        """Answers successive calls with successive bodies, repeating the last one."""
        remaining = list(bodies)

        def handler(_request: Request) -> Reply:
            return Reply(200, remaining.pop(0) if len(remaining) > 1 else remaining[0])

        self.route(method, path, handler)

    def calls(self, method: str, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def log_row(line_id: int, message: str, trial_id: int = 7, rank: int | None = 0) -> dict[str, Any]:
    """One log row shaped as docs/rest-api.md says."""
    return {
        "id": line_id,
        "trial_id": trial_id,
        "allocation_id": f"{trial_id}.0",
        "timestamp": f"2026-11-22T10:00:{line_id:02d}.000000Z",
        "rank": rank,
        "stdtype": "stdout",
        "message": message + "\n",
    }


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
