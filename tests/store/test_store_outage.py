"""A database that cannot be used is StoreUnavailable, never a bare driver error: a SQLite file
that cannot grow is a full disk, PostgreSQL down or going away is unavailable; nothing of a
refused call is stored, the outage is logged once, and the store works again by itself."""

from __future__ import annotations

import logging
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors
from sqlalchemy import Engine, event
from sqlalchemy.exc import IntegrityError, OperationalError

from det_hub.states import ExperimentState, TrialState
from det_hub.store import Store
from det_hub.store._common import unavailable
from det_hub.store.engine import create_store_engine, normalize_url
from det_hub.store.errors import StoreError, StoreUnavailable
from det_hub.store.packing import Pack
from det_hub.testing import free_port


def _log_rows(trial_id: int, first: int, count: int) -> list[dict[str, Any]]:
    return [{"trial_id": trial_id, "allocation_id": None, "rank": None, "stdtype": "stdout",
             "timestamp": datetime.now(timezone.utc), "message": f"{n:06d} " + "x" * 2000}
            for n in range(first, first + count)]


async def _a_trial(store: Store) -> int:
    user = await store.create_user("alice")
    experiment = await store.create_experiment(
        name="full", owner_id=user.id, config={"searcher": {"name": "single"}},
        original_config="", context=None, state=ExperimentState.ACTIVE.value,
        searcher_metric="loss", smaller_is_better=True)
    trial = await store.create_trial(experiment_id=experiment.id, request_id="r",
                                     hparams={}, seed=1, state=TrialState.ACTIVE.value)
    return trial.id


async def test_a_sqlite_file_that_cannot_grow_is_a_full_disk_until_it_can(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'full.db'}"
    limit: dict[str, int | None] = {"pages": None}

    # Every connection the store makes (its async pool's and its writer thread's), while a
    # limit is set: SQLite keeps the file at its size at most (it cannot be set below), a
    # real SQLITE_FULL once a write needs one more page.
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        if limit["pages"] is not None:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA max_page_count = {limit['pages']}")
            cursor.close()

    event.listen(Engine, "connect", _cap)
    store = await Store.open(url)
    try:
        trial_id = await _a_trial(store)
        limit["pages"] = 1
        await store.close()  # every connection from here on has the cap

        acknowledged = 0
        caplog.set_level(logging.WARNING, logger="det_hub.store")
        with pytest.raises(StoreUnavailable) as raised:
            for _ in range(200):
                await store.add_logs(_log_rows(trial_id, acknowledged, 50))
                acknowledged += 50
        error = raised.value
        assert isinstance(error, StoreError)
        assert error.disk_full and error.retry_after == 5
        assert str(error) == ("the database's disk is full (SQLite: database or disk is "
                              "full); try again in 5 s")
        # More refused writes, and reads, which a full disk still answers: one warning.
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                await store.add_logs(_log_rows(trial_id, acknowledged, 50))
        assert len(await store.get_logs(trial_id, limit=100_000)) == acknowledged
        assert store.outage is not None and store.outage.disk_full
        warnings = [r.getMessage() for r in caplog.records if r.name == "det_hub.store"]
        assert warnings == ["the database's disk is full (SQLite: database or disk is full); "
                            "calls that need it fail until it is back"]

        limit["pages"] = None
        await store.close()  # room again: no restart, only new connections
        await store.add_logs(_log_rows(trial_id, acknowledged, 50))
        assert store.outage is None
        messages = [line.message[:6] for line in await store.get_logs(trial_id, limit=100_000)]
        assert messages == [f"{n:06d}" for n in range(acknowledged + 50)]
        assert caplog.records[-1].getMessage().startswith("the database answers again after ")
    finally:
        await store.close()
        event.remove(Engine, "connect", _cap)


async def test_postgresql_on_a_closed_port_is_unavailable_and_named() -> None:
    port = free_port()
    async_url, _ = normalize_url(f"postgresql://nobody@127.0.0.1:{port}/nothing")
    store = Store(async_url.render_as_string(), "postgresql", create_store_engine(async_url))
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await store.ping()
        error = raised.value
        assert not error.disk_full and error.retry_after == 2
        assert str(error).startswith("the database is unavailable (PostgreSQL: connection "
                                     "failed: ")
        assert f'port {port} failed: Connection refused' in str(error)
        assert str(error).endswith("); try again in 2 s")
        assert store.outage is error
        # A metric batch goes through connections of its own (store/direct.py): the same.
        with pytest.raises(StoreUnavailable) as raised:
            await store.insert_pack(1, "training", Pack.of_columns([0], {"loss": [1.0]}),
                                    key="k")
        assert f"port {port} failed: Connection refused" in str(raised.value)
        assert store.outage is raised.value
    finally:
        await store.close()


def test_postgresql_server_errors_are_classified() -> None:
    def wrapped(orig: BaseException) -> OperationalError:
        return OperationalError("SELECT 1", {}, orig)

    starting = unavailable(wrapped(pg_errors.CannotConnectNow(
        "the database system is starting up")))
    assert starting is not None and not starting.disk_full
    assert starting.cause == ("PostgreSQL: it cannot accept connections now: the database "
                              "system is starting up")
    stopping = unavailable(pg_errors.CannotConnectNow("the database system is shutting down"))
    assert stopping is not None and "shutting down" in stopping.cause
    admin = unavailable(wrapped(pg_errors.AdminShutdown(
        "terminating connection due to administrator command")))
    assert admin is not None and admin.cause.startswith("PostgreSQL: it is shutting down")
    full = unavailable(wrapped(pg_errors.DiskFull(
        'could not extend file "base/16384/16385": No space left on device')))
    assert full is not None and full.disk_full
    assert str(full).startswith("the database's disk is full (PostgreSQL: could not extend")
    lost = unavailable(wrapped(pg_errors.ConnectionFailure("connection to server was lost")))
    assert lost is not None and "the connection failed" in lost.cause

    # Errors of the call itself are not outages: the same call would fail again.
    assert unavailable(wrapped(pg_errors.SerializationFailure("could not serialize"))) is None
    assert unavailable(IntegrityError("INSERT", {}, pg_errors.UniqueViolation("dup"))) is None
    assert unavailable(wrapped(pg_errors.QueryCanceled("canceling statement"))) is None
    assert unavailable(ValueError("not a database error")) is None


def test_sqlite_errors_are_classified(tmp_path: Path) -> None:
    # Real errors of the driver: a file that cannot be opened, and one that cannot grow.
    with pytest.raises(sqlite3.OperationalError) as cannot_open:
        sqlite3.connect(tmp_path / "missing" / "x.db").execute("SELECT 1")
    error = unavailable(OperationalError("SELECT 1", {}, cannot_open.value))
    assert error is not None and not error.disk_full
    assert error.cause == "SQLite: unable to open database file"

    db = sqlite3.connect(tmp_path / "small.db")
    db.execute("CREATE TABLE t (x TEXT)")
    db.execute("PRAGMA max_page_count = 2")
    with pytest.raises(sqlite3.OperationalError) as full:
        for _ in range(100):
            db.execute("INSERT INTO t VALUES (?)", ("x" * 4000,))
    db.close()
    error = unavailable(full.value)
    assert error is not None and error.disk_full
    assert error.cause == "SQLite: database or disk is full"

    with pytest.raises(sqlite3.OperationalError) as no_table:
        sqlite3.connect(tmp_path / "other.db").execute("SELECT * FROM nothing")
    assert unavailable(OperationalError("SELECT", {}, no_table.value)) is None


@pytest.mark.postgres
async def test_postgresql_connections_ended_by_the_server_are_replaced(
        postgresql_url: str) -> None:
    store = await Store.open(postgresql_url)
    try:
        await store.create_user("before")
        # What a server restart does to every pooled connection: the server ends them.
        _, sync_url = normalize_url(postgresql_url)
        conninfo = sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()) AS t"
            ).fetchone()
            assert ended is not None and ended[0] >= 1
            # A real error of the driver's for a connection the server ended.
            victim = psycopg.connect(conninfo, autocommit=True)
            admin.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
            with pytest.raises(psycopg.OperationalError) as terminated:
                victim.execute("SELECT 1")
            victim.close()
        error = unavailable(terminated.value)
        assert error is not None and not error.disk_full
        assert "terminating connection due to administrator command" in str(error)
        # The pool noticed by itself: no error, no restart.
        await store.create_user("after")
        assert [u.username for u in await store.list_users()] == ["before", "after"]
        assert store.outage is None
    finally:
        await store.close()
