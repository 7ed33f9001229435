"""An ingest worker: one of the master's processes that store training code's metric reports
(``POST /api/v1/trials/{id}/metrics``) straight into PostgreSQL, so that ingest uses every
core instead of the master's one event loop (:mod:`det_hub.service.ingest` starts them).

Every worker serves the same port (``SO_REUSEPORT``: the kernel spreads connections among
them). A report is read and checked exactly as the master reads it
(:mod:`det_hub.service.reports`) and stored exactly as the master stores it
(:meth:`Store.insert_pack`: its key makes a repeat store nothing, wherever the first copy
went), and the same transaction announces the stored batch on :data:`CHANNEL`, from which the
master hands the rows to the live streams and raises the trial's progress. Only an open
allocation's token is taken, for its own trial, while the trial has not ended. A validation is
refused (421): the searcher acts on it in the master, whose answer carries the decision.

The worker's settings arrive as one JSON line on stdin, never on the command line, which any
local user can read (the database URL may hold a password). It stops when stdin closes (the
master is gone) or on SIGTERM, after the requests in flight.

    python -m det_hub.service.ingest_worker < settings.json
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import threading
from typing import Any

import orjson
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from det_hub.service.body_limit import BodyLimitedApplication
from det_hub.service.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
    Unavailable,
)
from det_hub.service.handlers.base import APIHandler, check_path_ids
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


class IngestHandler(APIHandler):
    """``POST /api/v1/trials/{id}/metrics`` with an allocation's token (see the module)."""

    token_hash: str

    @property
    def store(self) -> Store:
        return self.application.settings["store"]

    async def prepare(self) -> None:
        if self.application.settings["stopping"].is_set():
            raise Unavailable("this ingest worker is stopping; try again shortly",
                              retry_after=1)
        check_path_ids(self.path_kwargs)
        self.token_hash = hash_token(self.bearer_token())

    def on_finish(self) -> None:
        """Nothing to count: the master's own bookkeeping of requests is not here."""

    def on_connection_close(self) -> None:
        """As :meth:`on_finish`."""

    async def post(self, trial_id: str) -> None:
        """Store a batch of a trial's metrics (training code)."""
        tid = int(trial_id)
        try:
            batch = read_report(self.json_body())
            pack = pack_report(batch)
        except BadRequest:
            # The master answers a token it does not know before it reads the body.
            if await self.store.ingest_target(self.token_hash) is None:
                raise _unknown_token() from None
            raise
        if batch.group == "validation":
            raise Misdirected("validations go to the master, whose searcher acts on them")
        if not len(pack):
            refusal = await self._refusal(tid)
            if refusal is not None:
                raise refusal
            self._stored(0, repeat=False)
            return
        try:
            # The token and the trial's state are checked by the statement that stores.
            stored = await self.store.insert_pack(
                tid, batch.group, pack, key=batch.key, steps_completed=max(pack.steps),
                notify=CHANNEL, token_hash=self.token_hash)
        except StoreNotFound:
            raise await self._refusal(tid) or NotFound(f"trial {tid} not found") from None
        if isinstance(stored, int):
            self._stored(stored, repeat=True)
        else:
            self._stored(len(stored), repeat=False)

    def _stored(self, count: int, *, repeat: bool) -> None:
        """The answer to a stored batch: no float in it, so written without looking for
        one (what :meth:`send` does for every answer)."""
        self.finish(orjson.dumps({"count": count, "repeat": repeat}))

    async def _refusal(self, trial_id: int) -> APIError | None:
        """Why this token may not report for the trial, as the master answers it (401: no
        running trial's token; 403: another trial's; 409: the trial has ended); None when
        it may."""
        target = await self.store.ingest_target(self.token_hash)
        if target is None:
            return _unknown_token()
        if target.trial_id != trial_id:
            return Forbidden(f"this allocation's token is not valid for trial {trial_id}")
        if TrialState(target.state).terminal:
            return Conflict(f"trial {trial_id} is {target.state}; it takes no more metrics")
        return None


def make_app(store: Store, max_body_bytes: int,
             stopping: asyncio.Event) -> BodyLimitedApplication:
    """The worker's one route, under ``/api/v1``."""
    return BodyLimitedApplication(
        [(r"/api/v1/trials/(?P<trial_id>\d+)/metrics", IngestHandler)],
        store=store, stopping=stopping, max_body_bytes=max_body_bytes,
        log_function=lambda handler: None)


async def serve(settings: dict[str, Any], stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then finish the requests in flight (at most 10 s)."""
    store = Store.connect(settings["db_url"])
    stopping = asyncio.Event()
    app = make_app(store, int(settings["max_body_bytes"]), stopping)
    server = HTTPServer(app, max_body_size=int(settings["max_body_bytes"]))
    server.add_sockets(bind_sockets(int(settings["port"]), settings["host"], reuse_port=True))
    print("ready", flush=True)
    await stop.wait()
    stopping.set()
    server.stop()
    try:
        await asyncio.wait_for(server.close_all_connections(), timeout=10)
    except TimeoutError:
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
