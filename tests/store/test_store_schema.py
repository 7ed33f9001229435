"""Migrations, URL handling and re-opening."""

from __future__ import annotations

import datetime as dt

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from det_hub.store import Store, utcnow
from det_hub.store.engine import alembic_config, normalize_url
from det_hub.store.models import Base

#: The newest migration.
HEAD = "0005"

EXPECTED_TABLES = {
    "users",
    "agent_settings",
    "tokens",
    "experiments",
    "experiment_contexts",
    "trials",
    "allocations",
    "metrics",
    "checkpoints",
    "task_logs",
    "tasks",
    "task_contexts",
}


def _sync_engine(url: str):  # type: ignore[no-untyped-def]
    return create_engine(normalize_url(url)[1])


async def test_migrations_create_every_table(store: Store) -> None:
    engine = _sync_engine(store.url)
    try:
        inspector = inspect(engine)
        tables = set(inspector.get_table_names())
        assert tables == EXPECTED_TABLES | {"alembic_version"}
        index_names = {ix["name"] for ix in inspector.get_indexes("metrics")}
        assert "ix_metrics_trial_group_steps" in index_names
        with engine.connect() as conn:
            assert conn.execute(
                text("SELECT version_num FROM alembic_version")
            ).scalars().all() == [HEAD]
            # The hand-written migration and the models describe the same schema.
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
    finally:
        engine.dispose()


async def test_reopen_is_idempotent_and_keeps_data(db_url: str) -> None:
    first = await Store.open(db_url)
    user = await first.create_user("bob", admin=True)
    await first.close()
    for _ in range(2):
        again = await Store.open(db_url)
        try:
            found = await again.get_user("bob")
            assert found is not None
            assert (found.id, found.admin) == (user.id, True)
            assert [u.username for u in await again.list_users()] == ["bob"]
        finally:
            await again.close()
    engine = _sync_engine(db_url)
    try:
        with engine.connect() as conn:
            versions = conn.execute(text("SELECT version_num FROM alembic_version")).all()
        assert [v[0] for v in versions] == [HEAD]
    finally:
        engine.dispose()


async def test_a_database_of_the_first_schema_upgrades_and_keeps_its_rows(db_url: str) -> None:
    """A master of the previous release left a database at 0001; the next one opens it."""
    from alembic import command

    engine = _sync_engine(db_url)
    try:
        with engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, "0001")
            conn.execute(text("INSERT INTO users (username, admin, active, created_at) "
                              "VALUES ('old', false, true, CURRENT_TIMESTAMP)"))
            conn.execute(text(
                "INSERT INTO experiments (name, description, owner_id, state, archived, config, "
                "original_config, searcher_metric, smaller_is_better, resource_pool, priority, "
                "seed, created_at, labels, notes) SELECT 'kept', '', id, 'COMPLETED', false, "
                "'{}', '', 'loss', true, 'default', 42, 0, CURRENT_TIMESTAMP, '[]', '' "
                "FROM users WHERE username = 'old'"))
    finally:
        engine.dispose()
    store = await Store.open(db_url)
    try:
        [row], total = await store.list_experiments()
        assert total == 1 and row.name == "kept" and row.parent_id is None
        user = await store.get_user("old")
        assert user is not None
        child = await store.create_experiment(
            name="fork", owner_id=user.id, config={}, original_config="", context=None,
            state="ACTIVE", searcher_metric="loss", smaller_is_better=True, parent_id=row.id)
        assert (await store.get_experiment(child.id)).parent_id == row.id  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_dialect_and_url(store: Store, db_url: str) -> None:
    if db_url.startswith("sqlite"):
        assert store.dialect == "sqlite"
        assert store.url.startswith("sqlite+aiosqlite:///")
    else:
        assert store.dialect == "postgresql"
        assert store.url.startswith("postgresql+psycopg://")


async def test_sqlite_pragmas(sqlite_url: str) -> None:
    store = await Store.open(sqlite_url)
    try:
        async with store._engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
            assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1
            assert (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 30000
    finally:
        await store.close()


async def test_sqlite_parent_folder_is_created(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "a" / "b" / "det.db"
    store = await Store.open(f"sqlite:///{path}")
    await store.close()
    assert path.is_file()


def test_url_normalisation() -> None:
    a, s = normalize_url("sqlite:///x.db")
    assert (a.drivername, s.drivername, a.database) == ("sqlite+aiosqlite", "sqlite", "x.db")
    a, s = normalize_url("sqlite+aiosqlite:////abs/x.db")
    assert (a.drivername, s.drivername, a.database) == ("sqlite+aiosqlite", "sqlite", "/abs/x.db")
    for given in (
        "postgresql://u:p@h:5/db",
        "postgres://u:p@h:5/db",
        "postgresql+psycopg://u:p@h:5/db",
    ):
        a, s = normalize_url(given)
        assert a.drivername == s.drivername == "postgresql+psycopg"
        assert (a.username, a.password, a.host, a.port, a.database) == ("u", "p", "h", 5, "db")
    with pytest.raises(ValueError, match="in-memory"):
        normalize_url("sqlite://")
    with pytest.raises(ValueError, match="unsupported"):
        normalize_url("mysql://h/db")


def test_utcnow_is_aware_utc() -> None:
    now = utcnow()
    assert now.tzinfo is not None
    assert now.utcoffset() == dt.timedelta(0)
