"""PostgreSQL connections for the store's hottest write, a metric batch that is one statement
(:meth:`.metric_writes.MetricWriteQueries.insert_pack`): the driver's own connections in
autocommit, each statement prepared once per connection, with no ORM session, no pool
liveness round trip and no greenlet between the handler and the socket.

A metric batch of 100 rows costs its writer about 0.35 ms of CPU this way, against 1.3 ms
through SQLAlchemy's session (see docs/cluster.md, "Metrics on every core").

A kept connection is looked at before it is used again without a round trip: a server that
ended it (a restart, an administrator) has sent its goodbye or closed the socket, which shows
as data to read on an idle connection, and such a connection is dropped for a new one. A
connection that fails in use is dropped too; the error reaches the caller (the store turns it
into :class:`~det_hub.store.errors.StoreUnavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.numeric import Int8Dumper
from sqlalchemy.engine import URL

#: Connections open at most, each kept for the next writes once opened: further writes
#: wait for one, so that a burst of reports never takes more of the server's connections.
MAX_OPEN = 8


class DirectConnections:
    """Autocommit driver connections to one PostgreSQL database, kept between writes."""

    def __init__(self, url: URL, *, connect_timeout: float, max_open: int = MAX_OPEN) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._connect_args: dict[str, Any] = (
            {} if "connect_timeout" in url.query else {"connect_timeout": connect_timeout})
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._open = asyncio.Semaphore(max_open)
        # Connections opened before the last close() are closed when their write ends.
        self._generation = 0
        self._born: dict[int, int] = {}

    async def execute(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """Run one statement (``$n`` parameters, prepared on its connection) that commits by
        itself; its first row, or None.

        Raises:
            psycopg.Error: the database's or the connection's error, as the driver raises it.
        """
        async with self._connection() as conn:
            cursor = psycopg.AsyncRawCursor(conn)
            await cursor.execute(sql, params, prepare=True)
            return await cursor.fetchone() if cursor.description is not None else None

    async def close(self) -> None:
        """Close every kept connection, and each one in use when its write ends; later
        writes open new ones."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._drop(conn)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._open:
            conn = await self._take()
            try:
                yield conn
            except BaseException:
                if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
                    await self._drop(conn)
                else:
                    await self._give_back(conn)
                raise
            await self._give_back(conn)

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        while self._idle:
            conn = self._idle.pop()
            if not _ended_while_idle(conn):
                return conn
            await self._drop(conn)
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, **self._connect_args)
        # Every whole number as bigint: a prepared statement is kept per parameter types, and
        # the driver would otherwise pick smallint, integer or bigint by each value's size.
        conn.adapters.register_dumper(int, Int8Dumper)
        self._born[id(conn)] = self._generation
        return conn

    async def _give_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not conn.closed and self._born.get(id(conn)) == self._generation:
            self._idle.append(conn)
        else:
            await self._drop(conn)

    async def _drop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._born.pop(id(conn), None)
        await conn.close()


def _ended_while_idle(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the server ended an idle connection: it is marked closed or broken, or its
    socket has something to read (a server says goodbye before it closes; nothing else
    arrives unasked on a connection that listens to no channel)."""
    if conn.closed or conn.broken:
        return True
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, psycopg.OperationalError):
        return True


__all__ = ["MAX_OPEN", "DirectConnections"]
