"""Metric ingest on every core: the master's ingest workers and what it hears from them.

On PostgreSQL the master runs ``MasterApp.ingest_workers`` processes
(:mod:`det_hub.service.ingest_worker`) that serve one port of their own and store training
code's metric reports straight into the database; the Core API sends its training batches
there (``DET_HUB_INGEST_URL``, set on every trial) and its validations to the master.

- :class:`IngestWorkers` reserves the port, starts the workers, starts again one that dies
  and stops them with the master.
- :class:`StoredListener` hears every stored batch (``LISTEN``; a batch is announced in the
  transaction that stores it, so announcements arrive once, in commit order, and never for a
  batch rolled back) and hands them to :meth:`TrialManager.on_stored`. Announcements lost
  while its connection was down are made up for by :meth:`TrialManager.resync`: live streams
  resume from the store, and live trials read their progress from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import psycopg
from sqlalchemy.engine import make_url

from det_hub.service.ingest_worker import CHANNEL
from det_hub.store.metric_writes import StoredNotice

if TYPE_CHECKING:
    from det_hub.service.trials import TrialManager

log = logging.getLogger("det_hub.ingest")

#: Seconds a worker has to start serving, and to stop once asked.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
#: Seconds between starts of a worker that keeps dying.
RESTART_DELAY_S = 1.0
#: Seconds between attempts to listen again once the listening connection broke.
RELISTEN_DELAY_S = 1.0


def default_worker_count() -> int:
    """Workers for ``MasterApp.ingest_workers = -1``: one per core this process may use, at
    most four (past that the database is what is busy)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


def libpq_url(store_url: str) -> str:
    """A store URL (``postgresql+psycopg://...``) as psycopg's own connection string."""
    return make_url(store_url).set(drivername="postgresql").render_as_string(
        hide_password=False)


class IngestWorkers:
    """``count`` worker processes serving ``host:port`` (0: a free port, kept for them).

    Args:
        db_url: The store's URL, handed to each worker on its stdin.
        max_body_bytes: The largest request body a worker reads (the master's limit).
    """

    def __init__(self, db_url: str, *, count: int, host: str, port: int = 0,
                 max_body_bytes: int) -> None:
        if count < 1:
            raise ValueError(f"ingest workers: {count}; there must be at least one")
        self.count = count
        self.host = host
        self._port = port
        self._settings: dict[str, object] = {"db_url": db_url, "host": host,
                                             "max_body_bytes": max_body_bytes}
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self._reserved: socket.socket | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        #: Workers started again after they died, since the start.
        self.restarts = 0

    @property
    def port(self) -> int:
        return self._port

    async def start(self, *, preferred: int = 0) -> None:
        """Start every worker and wait until each serves.

        Args:
            preferred: With ``port`` 0, the port to serve if it is free (the one served
                before a restart, which running trials were told), else a free one.

        Raises:
            OSError: ``port`` is taken.
            RuntimeError: A worker could not start (its exit and output are in the log).
        """
        try:
            self._reserve(self._port or preferred)
        except OSError:
            if self._port or not preferred:
                raise
            log.warning("the ingest port %d is taken now; serving another (trials told of "
                        "%d send their metrics to the master)", preferred, preferred)
            self._reserve(0)
        for i in range(self.count):
            self._procs[i] = await self._spawn()
        self._watch = asyncio.create_task(self._supervise(), name="det-hub-ingest-workers")

    def _reserve(self, port: int) -> None:
        """Bind ``port`` (0: a free one) without listening, for as long as the workers serve
        it: the kernel hands connections only to the workers' listening sockets, and no other
        account can take the port while one of them restarts (``SO_REUSEPORT`` joins only
        sockets of the same user)."""
        reserved = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                                 socket.SOCK_STREAM)
        try:
            reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            reserved.bind((self.host, port))
        except OSError:
            reserved.close()
            raise
        self._reserved = reserved
        self._port = reserved.getsockname()[1]

    async def _spawn(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "det_hub.service.ingest_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({**self._settings, "port": self._port}).encode() + b"\n")
        proc.stdin.flush()
        stdout = proc.stdout
        try:
            line = await asyncio.wait_for(asyncio.to_thread(stdout.readline), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            proc.kill()
            code = await asyncio.to_thread(proc.wait)
            raise RuntimeError(f"ingest worker (pid {proc.pid}) did not start on "
                               f"{self.host}:{self.port}: exit {code} (its error is above)")
        return proc

    async def _supervise(self) -> None:
        """Start again, after a pause, a worker that died."""
        while not self._stopping:
            await asyncio.sleep(RESTART_DELAY_S)
            for i, proc in enumerate(self._procs):
                if self._stopping or proc is None or proc.poll() is None:
                    continue
                log.error("ingest worker (pid %d) exited with %s; starting another",
                          proc.pid, proc.returncode)
                self._procs[i] = None
                try:
                    self._procs[i] = await self._spawn()
                    self.restarts += 1
                except RuntimeError as e:
                    log.error("%s; trying again in %.0f s", e, RESTART_DELAY_S)

    def pids(self) -> list[int]:
        """The running workers' process ids."""
        return [p.pid for p in self._procs if p is not None and p.poll() is None]

    async def stop(self) -> None:
        """Stop every worker: each finishes the requests in flight (killed past
        :data:`STOP_TIMEOUT_S`)."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        procs = [p for p in self._procs if p is not None]
        for proc in procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the worker's signal to stop
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            try:
                await asyncio.to_thread(proc.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("ingest worker (pid %d) did not stop in %.0f s; killing it",
                            proc.pid, STOP_TIMEOUT_S)
                proc.kill()
                await asyncio.to_thread(proc.wait)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._reserved is not None:
            self._reserved.close()


class StoredListener:
    """Hears the batches announced on :data:`CHANNEL` and hands them, in the order they were
    committed, to ``trials.on_stored`` (see the module's docstring)."""

    def __init__(self, store_url: str, trials: TrialManager) -> None:
        self._conninfo = libpq_url(store_url)
        self._trials = trials
        # Stored chunks, and None where announcements may have been lost.
        self._queue: asyncio.Queue[StoredNotice | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._conn: psycopg.AsyncConnection[object] | None = None
        #: Times the connection was made again after it broke.
        self.relistens = 0

    async def start(self) -> None:
        """Listen, and return once listening (batches stored from then on are heard).

        Raises:
            psycopg.OperationalError: The database cannot be reached.
        """
        await self._connect()
        self._tasks = [asyncio.create_task(self._hear(), name="det-hub-stored-listen"),
                       asyncio.create_task(self._apply(), name="det-hub-stored-apply")]

    async def _connect(self) -> None:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            await conn.close()
            raise
        self._conn = conn

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def _hear(self) -> None:
        while True:
            assert self._conn is not None
            try:
                async for note in self._conn.notifies():
                    try:
                        self._queue.put_nowait(StoredNotice.parse(note.payload))
                    except ValueError:
                        log.error("not a stored batch on %s: %r", CHANNEL, note.payload[:200])
            except psycopg.Error as e:
                log.warning("stopped hearing of stored metrics (%s); listening again", e)
            await self._close()
            while True:
                await asyncio.sleep(RELISTEN_DELAY_S)
                try:
                    await self._connect()
                    break
                except psycopg.Error as e:
                    log.debug("cannot listen for stored metrics yet: %s", e)
            self.relistens += 1
            # Batches stored while nobody listened were announced to nobody.
            self._queue.put_nowait(None)

    async def _apply(self) -> None:
        while True:
            notices = [await self._queue.get()]
            while not self._queue.empty():
                notices.append(self._queue.get_nowait())
            stored = [n for n in notices if n is not None]
            try:
                if len(stored) < len(notices):
                    await self._trials.resync()
                if stored:
                    await self._trials.on_stored(stored)
            except Exception:  # a database outage, mostly: streams must not miss what it hid
                log.exception("could not act on %d stored batches; streams resume from the "
                              "store", len(stored))
                self._trials.metric_events.lost()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._close()


__all__ = ["CHANNEL", "IngestWorkers", "StoredListener", "default_worker_count", "libpq_url"]
