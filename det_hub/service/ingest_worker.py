"""An ingest worker: one of the master's processes that store training code's metric reports
(``POST /api/v1/trials/{id}/metrics``) straight into PostgreSQL, so that ingest uses every
core instead of the master's one event loop (:mod:`det_hub.service.ingest` starts them).

Every worker serves the same port (``SO_REUSEPORT``: the kernel spreads connections among
them), over a small HTTP/1.1 server of its own (:mod:`det_hub.service.ingest_http`). A
report is read and checked exactly as the master reads it (:mod:`det_hub.service.reports`)
and stored exactly as the master stores it (:meth:`Store.insert_pack`: its key makes a repeat
store nothing, wherever the first copy went), and the same transaction announces the stored
batch on :data:`CHANNEL`, from which the master hands the rows to the live streams and raises
the trial's progress. Only an open allocation's token is taken, for its own trial, while the
trial has not ended. A validation is refused (421): the searcher acts on it in the master,
whose answer carries the decision.

The worker's settings arrive as one JSON line on stdin, never on the command line, which any
local user can read (the database URL may hold a password). It stops when stdin closes (the
master is gone) or on SIGTERM, after the requests in flight.

    python -m det_hub.service.ingest_worker < settings.json
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import threading
from typing import Any

import orjson
from tornado.netutil import bind_sockets

from det_hub.service.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
    Unavailable,
    answered_as,
)
from det_hub.service.handlers.base import bearer_token, check_path_ids, json_object
from det_hub.service.ingest_http import Answer, HTTPServer, Request
from det_hub.service.reports import pack_report, read_report
from det_hub.states import TrialState
from det_hub.store import NotFound as StoreNotFound
from det_hub.store import Store, hash_token

#: The channel stored batches are announced on (see :class:`~det_hub.store.metrics.StoredNotice`).
CHANNEL = "det_hub_metrics"

log = logging.getLogger("det_hub.ingest")


class Misdirected(APIError):
    """A request this server does not answer, though the master does."""

    status = 421


def _unknown_token() -> Unauthorized:
    """What a token of no running trial gets."""
    return Unauthorized("the token is not that of a running trial: the ingest port takes "
                        "training code's reports only")


#: The one route: a trial's metrics.
_ROUTE = re.compile(r"/api/v1/trials/(\d+)/metrics")


class Ingest:
    """Answers ``POST /api/v1/trials/{id}/metrics`` with an allocation's token (see the
    module), and every other request with the error it is."""

    def __init__(self, store: Store, stopping: asyncio.Event) -> None:
        self.store = store
        self.stopping = stopping

    async def __call__(self, request: Request) -> Answer:
        try:
            return await self._answer(request)
        except Exception as exc:  # noqa: BLE001 - every error is answered
            error, retry_after = answered_as(exc)
            if not isinstance(error, APIError):
                log.error("POST %s failed", request.path, exc_info=exc)
                return Answer.error(500, "Internal Server Error")
            answer = Answer(error.status_code, orjson.dumps(error.body()))
            if retry_after is not None:
                answer.headers["Retry-After"] = retry_after
            return answer

    async def _answer(self, request: Request) -> Answer:
        route = _ROUTE.fullmatch(request.path)
        if route is None:
            raise NotFound(f"{request.path} is not served on the ingest port, which takes "
                           "training code's metric reports only")
        if request.method != "POST":
            raise APIError(f"{request.method} is not allowed here; POST a report",
                           status=405)
        if self.stopping.is_set():
            raise Unavailable("this ingest worker is stopping; try again shortly",
                              retry_after=1)
        check_path_ids({"trial_id": route.group(1)})
        token_hash = hash_token(bearer_token(request.headers.get("authorization", "")))
        return await self._store(int(route.group(1)), token_hash, request.body)

    async def _store(self, tid: int, token_hash: str, body: bytes) -> Answer:
        """Store a batch of a trial's metrics (training code)."""
        try:
            batch = read_report(json_object(body))
            pack = pack_report(batch)
        except BadRequest:
            # The master answers a token it does not know before it reads the body.
            if await self.store.ingest_target(token_hash) is None:
                raise _unknown_token() from None
            raise
        if batch.group == "validation":
            raise Misdirected("validations go to the master, whose searcher acts on them")
        if not len(pack):
            refusal = await self._refusal(tid, token_hash)
            if refusal is not None:
                raise refusal
            return _stored(0, repeat=False)
        try:
            # The token and the trial's state are checked by the statement that stores.
            stored = await self.store.insert_pack(
                tid, batch.group, pack, key=batch.key, steps_completed=max(pack.steps),
                notify=CHANNEL, token_hash=token_hash)
        except StoreNotFound:
            raise await self._refusal(tid, token_hash) or NotFound(
                f"trial {tid} not found") from None
        if isinstance(stored, int):
            return _stored(stored, repeat=True)
        return _stored(len(stored), repeat=False)

    async def _refusal(self, trial_id: int, token_hash: str) -> APIError | None:
        """Why this token may not report for the trial, as the master answers it (401: no
        running trial's token; 403: another trial's; 409: the trial has ended); None when
        it may."""
        target = await self.store.ingest_target(token_hash)
        if target is None:
            return _unknown_token()
        if target.trial_id != trial_id:
            return Forbidden(f"this allocation's token is not valid for trial {trial_id}")
        if TrialState(target.state).terminal:
            return Conflict(f"trial {trial_id} is {target.state}; it takes no more metrics")
        return None


def _stored(count: int, *, repeat: bool) -> Answer:
    """The answer to a stored batch."""
    return Answer(200, orjson.dumps({"count": count, "repeat": repeat}))


async def serve(settings: dict[str, Any], stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then finish the requests in flight (at most 10 s)."""
    store = Store.connect(settings["db_url"])
    stopping = asyncio.Event()
    server = HTTPServer(Ingest(store, stopping), max_body_bytes=int(settings["max_body_bytes"]))
    await server.serve(bind_sockets(int(settings["port"]), settings["host"], reuse_port=True))
    print("ready", flush=True)
    await stop.wait()
    stopping.set()
    if not await server.close(timeout=10):
        log.warning("requests still in flight after 10 s; stopping anyway")
    await store.close()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (a dependency of det_hub on Linux and macOS),
    else asyncio's own. A report here is an HTTP request, a statement and an answer, and
    uvloop takes about a tenth less of a worker's CPU for each (see docs/cluster.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[%(levelname)1.1s %(asctime)s ingest %(process)d] %(message)s")
    # The database is the master's too, which logs an outage of it once; the workers' lines
    # would repeat it, once each.
    logging.getLogger("det_hub.store").setLevel(logging.ERROR)
    line = sys.stdin.readline()
    if not line:
        return 0  # the master went before saying anything
    settings = json.loads(line)
    loop = new_event_loop()
    stop = asyncio.Event()

    def watch_stdin() -> None:
        # The master keeps stdin open while it wants this worker: EOF is the stop.
        sys.stdin.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stdin, name="det-hub-ingest-stdin", daemon=True).start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        loop.run_until_complete(serve(settings, stop))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
