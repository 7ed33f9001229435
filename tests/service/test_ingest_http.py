"""The ingest workers' HTTP server (det_hub.service.ingest_http), spoken to over raw sockets:
keep-alive, pipelining in order, bodies over the limit, Expect, oversized and broken heads,
and closing with requests in flight."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from tornado.netutil import bind_sockets

from det_hub.service import body_limit
from det_hub.service.ingest_http import (
    MAX_HEADER_BYTES,
    MAX_UNFINISHED_HEAD_BYTES,
    Answer,
    HTTPServer,
    Request,
)
from det_hub.service.ingest_worker import Ingest
from det_hub.store import StoreUnavailable

LIMIT = 1000


class Echo:
    """Answers each request with what it read; a body of ``wait`` waits for ``release``."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.release = asyncio.Event()

    async def __call__(self, request: Request) -> Answer:
        self.seen.append(request)
        if request.body == b"wait":
            await self.release.wait()
        return Answer(200, json.dumps({
            "method": request.method, "target": request.target, "path": request.path,
            "body": request.body.decode(),
            "auth": request.headers.get("authorization")}).encode())


@pytest.fixture
async def served() -> AsyncIterator[tuple[HTTPServer, Echo, int]]:
    echo = Echo()
    server = HTTPServer(echo, max_body_bytes=LIMIT)
    sockets = bind_sockets(0, "127.0.0.1")
    await server.serve(sockets)
    yield server, echo, sockets[0].getsockname()[1]
    echo.release.set()
    await server.close(timeout=5)


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def _post(body: bytes, *, target: str = "/x", extra: str = "") -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: here\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), headers, body


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 10) == b""


async def _refused(reader: asyncio.StreamReader, echo: Echo, status: int) -> bytes:
    """Read an answer of ``status`` that closes the connection, none of whose requests reached
    the handler; its body."""
    answer, headers, body = await _answer(reader)
    assert (answer, headers["connection"]) == (status, "close")
    assert await _closed(reader)
    assert echo.seen == []
    return body


async def test_requests_on_one_connection_are_answered_in_order(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    writer.write(_post(b"one", target="/a?x=1", extra="Authorization: Bearer t\r\n"))
    status, headers, body = await _answer(reader)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert "date" in headers and "connection" not in headers
    assert json.loads(body) == {"method": "POST", "target": "/a?x=1", "path": "/a",
                                "body": "one", "auth": "Bearer t"}
    # Pipelined: the first waits in the handler, the others wait behind it.
    writer.write(_post(b"wait") + _post(b"two") + _post(b"three"))
    await asyncio.sleep(0.2)
    assert [r.body for r in echo.seen] == [b"one", b"wait"]
    echo.release.set()
    assert [json.loads((await _answer(reader))[2])["body"] for _ in range(3)] == [
        "wait", "two", "three"]
    writer.close()


async def test_a_body_sent_in_chunks_is_read_whole(served: tuple[HTTPServer, Echo, int]) -> None:
    _, _, port = served
    reader, writer = await _connect(port)
    writer.write(b"POST /c HTTP/1.1\r\nHost: here\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert json.loads((await _answer(reader))[2])["body"] == "abcde"
    writer.close()


async def test_a_body_over_the_limit_is_refused_and_the_connection_goes_on(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    writer.write(_post(b"x" * (LIMIT + 1)) + _post(b"after"))
    status, _, body = await _answer(reader)
    assert status == 413
    assert json.loads(body)["error"] == json.loads(body_limit.too_large(LIMIT + 1, LIMIT))["error"]
    assert json.loads((await _answer(reader))[2])["body"] == "after"
    assert [r.body for r in echo.seen] == [b"after"]
    writer.close()


async def test_a_body_far_over_the_limit_is_refused_unread(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    huge = LIMIT + body_limit.DISCARD_BYTES + 1
    writer.write(f"POST /h HTTP/1.1\r\nContent-Length: {huge}\r\n\r\n".encode() + b"x" * 100)
    await _refused(reader, echo, 413)


async def test_chunks_past_the_limit_are_refused(served: tuple[HTTPServer, Echo, int]) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    chunk = b"x" * 600
    writer.write(b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + (b"258\r\n" + chunk + b"\r\n") * 2)
    await _refused(reader, echo, 413)


async def test_expect_continue_is_answered_before_the_body(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, _, port = served
    reader, writer = await _connect(port)
    writer.write(b"POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == \
        b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"body")
    assert json.loads((await _answer(reader))[2])["body"] == "body"
    # Too large and waiting to be asked: refused unread.
    writer.write(f"POST /e HTTP/1.1\r\nContent-Length: {LIMIT + 1}\r\n"
                 "Expect: 100-continue\r\n\r\n".encode())
    assert (await _answer(reader))[0] == 413
    assert await _closed(reader)


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEADER_BYTES + 1) + b"\r\n\r\n", 431),
])
async def test_what_is_not_a_request_is_answered_and_closed(
        served: tuple[HTTPServer, Echo, int], request_bytes: bytes, status: int) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    writer.write(request_bytes)
    assert json.loads(await _refused(reader, echo, status))["error"]


async def test_a_header_that_never_ends_is_refused_before_it_fills_memory(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, echo, port = served
    reader, writer = await _connect(port)
    writer.write(b"POST /h HTTP/1.1\r\nX-Endless: ")
    sent = 0
    with contextlib.suppress(ConnectionError):
        while sent <= MAX_UNFINISHED_HEAD_BYTES:
            writer.write(b"a" * 65536)
            await writer.drain()
            sent += 65536
    await _refused(reader, echo, 431)


async def test_connection_close_and_http_1_0_close_after_the_answer(
        served: tuple[HTTPServer, Echo, int]) -> None:
    _, _, port = served
    for request in (_post(b"a", extra="Connection: close\r\n"),
                    b"POST /old HTTP/1.0\r\nContent-Length: 1\r\n\r\nb"):
        reader, writer = await _connect(port)
        writer.write(request)
        status, headers, _ = await _answer(reader)
        assert (status, headers["connection"]) == (200, "close")
        assert await _closed(reader)
    reader, writer = await _connect(port)
    writer.write(b"POST /old HTTP/1.0\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nc")
    assert "connection" not in (await _answer(reader))[1]
    writer.close()


async def test_closing_answers_what_was_read_then_closes(
        served: tuple[HTTPServer, Echo, int]) -> None:
    server, echo, port = served
    idle_reader, _ = await _connect(port)
    reader, writer = await _connect(port)
    writer.write(_post(b"wait"))
    await asyncio.sleep(0.2)
    closing = asyncio.create_task(server.close(timeout=10))
    await asyncio.sleep(0.2)
    assert await _closed(idle_reader)
    assert not closing.done()
    echo.release.set()
    status, headers, _ = await _answer(reader)
    assert (status, headers["connection"]) == (200, "close")
    assert await closing
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# -- the worker's answers (det_hub.service.ingest_worker.Ingest) ------------------------------


class FailingStore:
    """A store whose every call raises ``error``; no token is a running trial's."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def insert_pack(self, *args: object, **kwargs: object) -> object:
        raise self.error

    async def ingest_target(self, token_hash: str) -> None:
        return None


def _ingest(store: FailingStore, stopping: asyncio.Event) -> Ingest:
    return Ingest(cast(Any, store), stopping)


def _report(method: str = "POST", target: str = "/api/v1/trials/7/metrics",
            token: str | None = "t", body: object = None) -> Request:
    data = body if body is not None else {"group": "training", "steps": [1],
                                          "metrics": {"loss": [0.5]}}
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return Request(method, target, headers, json.dumps(data).encode(), True)


@pytest.mark.parametrize(("request_", "status", "says"), [
    (_report(target="/api/v1/experiments"), 404, "not served on the ingest port"),
    (_report(method="GET"), 405, "POST a report"),
    (_report(token=None), 401, "no token"),
    (_report(target="/api/v1/trials/99999999999999999999/metrics"), 400, "trial_id"),
    # A token nobody holds is answered before the body is looked at.
    (_report(body=[1, 2]), 401, "not that of a running trial"),
])
async def test_the_worker_answers_what_it_does_not_store(
        request_: Request, status: int, says: str) -> None:
    answer = await _ingest(FailingStore(AssertionError("not reached")), asyncio.Event())(request_)
    assert answer.status == status and says in json.loads(answer.body)["error"], answer


async def test_the_worker_answers_its_outages_and_its_bugs() -> None:
    stopping = asyncio.Event()
    outage = _ingest(FailingStore(StoreUnavailable("the database is restarting",
                                                  retry_after=3)), stopping)
    answer = await outage(_report())
    assert (answer.status, answer.headers) == (503, {"Retry-After": "3"})
    assert "restarting" in json.loads(answer.body)["error"]
    bug = await _ingest(FailingStore(RuntimeError("a bug")), stopping)(_report())
    assert (bug.status, json.loads(bug.body)["error"]) == (500, "Internal Server Error")
    stopping.set()
    answer = await outage(_report())
    assert (answer.status, answer.headers) == (503, {"Retry-After": "1"})
    assert "stopping" in json.loads(answer.body)["error"]
