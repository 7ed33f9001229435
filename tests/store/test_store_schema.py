"""Migrations, URL handling and re-opening."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, create_engine, inspect, select, text

from det_hub.store import Store, hash_token, utcnow
from det_hub.store.engine import alembic_config, normalize_url
from det_hub.store.models import Base, MetricSummary
from det_hub.store.summaries import LEVELS, Block, summarize

#: The newest migration.
HEAD = "0016"

EXPECTED_TABLES = {
    "users",
    "agent_settings",
    "tokens",
    "experiments",
    "experiment_contexts",
    "trials",
    "allocations",
    "metric_chunks",
    "metric_batches",
    "rolled_back_metrics",
    "searcher_events",
    "metric_summaries",
    "checkpoints",
    "task_logs",
    "tasks",
    "task_contexts",
    "models",
    "model_versions",
    "webhooks",
    "webhook_triggers",
    "trial_source_infos",
    "webhook_deliveries",
}


def _sync_engine(url: str):  # type: ignore[no-untyped-def]
    return create_engine(normalize_url(url)[1])


@contextlib.contextmanager
def _connected(url: str) -> Iterator[Connection]:
    """A connection of a synchronous engine of its own to the database at ``url``."""
    engine = _sync_engine(url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


async def test_migrations_create_every_table(store: Store) -> None:
    engine = _sync_engine(store.url)
    try:
        inspector = inspect(engine)
        tables = set(inspector.get_table_names())
        assert tables == EXPECTED_TABLES | {"alembic_version"}
        index_names = {ix["name"] for ix in inspector.get_indexes("metric_chunks")}
        assert "ix_metric_chunks_trial_group_last" in index_names
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


def _migrate(db_url: str, step: str, target: str,
             then: Callable[[Connection], None] | None = None) -> None:
    """Run alembic's ``step`` ("upgrade" or "downgrade") to ``target``, then ``then`` in the
    same transaction: a database as an older master left it."""
    from alembic import command

    engine = _sync_engine(db_url)
    try:
        with engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            getattr(command, step)(config, target)
            if then is not None:
                then(conn)
    finally:
        engine.dispose()


def _add_old_experiment(conn: Connection) -> None:
    """User ``old`` and its COMPLETED experiment ``kept``, in the columns of the first schema."""
    conn.execute(text("INSERT INTO users (username, admin, active, created_at) "
                      "VALUES ('old', false, true, CURRENT_TIMESTAMP)"))
    conn.execute(text(
        "INSERT INTO experiments (name, description, owner_id, state, archived, config, "
        "original_config, searcher_metric, smaller_is_better, resource_pool, priority, "
        "seed, created_at, labels, notes) SELECT 'kept', '', id, 'COMPLETED', false, "
        "'{}', '', 'loss', true, 'default', 42, 0, CURRENT_TIMESTAMP, '[]', '' "
        "FROM users WHERE username = 'old'"))


def _add_old_trial(conn: Connection, request_id: str, *, run_id: int) -> None:
    """An ACTIVE trial of the old experiment, in the columns of schema 0013 (runs)."""
    conn.execute(text(
        "INSERT INTO trials (experiment_id, request_id, state, hparams, seed, restarts, "
        "created_at, steps_completed, run_id) SELECT id, :request, 'ACTIVE', '{}', 0, 0, "
        "CURRENT_TIMESTAMP, 0, :run FROM experiments"), {"request": request_id, "run": run_id})

async def test_a_database_of_the_first_schema_upgrades_and_keeps_its_rows(db_url: str) -> None:
    """A master of the previous release left a database at 0001; the next one opens it."""
    _migrate(db_url, "upgrade", "0001", _add_old_experiment)
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


async def test_the_model_registry_migration_upgrades_and_downgrades(db_url: str) -> None:
    """0007 adds the registry beside existing checkpoints; going back to 0006 drops it and
    keeps the checkpoints; going forward again gives an empty registry."""
    def tables() -> set[str]:
        engine = _sync_engine(db_url)
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()

    _migrate(db_url, "upgrade", "0006")
    assert not {"models", "model_versions"} & tables()
    store = await Store.open(db_url)  # upgrades to 0007
    try:
        user = await store.create_user("old")
        exp = await store.create_experiment(
            name="e", owner_id=user.id, config={}, original_config="", context=None,
            state="COMPLETED", searcher_metric="loss", smaller_is_better=True)
        trial = await store.create_trial(experiment_id=exp.id, request_id="r", hparams={},
                                         seed=1, state="COMPLETED")
        uuid = "0b6f4f5c-6e4a-4b8e-9a39-2f6a1c1d2e3f"
        await store.add_checkpoint(uuid=uuid, trial_id=trial.id, experiment_id=exp.id,
                                   allocation_id=None, state="COMPLETED", steps_completed=5,
                                   resources={"a": 1}, metadata={}, storage={})
        model = await store.create_model(name="m", owner_id=user.id, labels=["x"])
        await store.add_model_version(model_id=model.id, checkpoint_uuid=uuid,
                                      owner_id=user.id)
    finally:
        await store.close()
    assert {"models", "model_versions"} <= tables()

    _migrate(db_url, "downgrade", "0006")
    assert not {"models", "model_versions"} & tables()
    with _connected(db_url) as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0006"
        assert conn.execute(text("SELECT uuid FROM checkpoints")).scalars().all() == [uuid]

    store = await Store.open(db_url)
    try:
        assert (await store.list_models()) == ([], 0)
        assert (await store.get_checkpoint(uuid)) is not None
    finally:
        await store.close()


async def test_the_summaries_migration_summarises_metrics_already_stored(db_url: str) -> None:
    """A database at 0005 with metrics gets their block summaries when it is upgraded."""

    def with_metrics(conn: Connection) -> None:
        _add_old_experiment(conn)
        conn.execute(text(
            "INSERT INTO trials (experiment_id, request_id, state, hparams, seed, restarts, "
            "created_at, steps_completed) SELECT id, 'r1', 'COMPLETED', '{}', 0, 0, "
            "CURRENT_TIMESTAMP, 200 FROM experiments"))
        for step in range(200):
            conn.execute(text(
                "INSERT INTO metrics (trial_id, group_name, steps_completed, report_time, "
                "metrics) SELECT id, 'training', :s, CURRENT_TIMESTAMP, :m FROM trials"),
                {"s": step, "m": f'{{"loss": {step * 0.5}, "ok": true}}'})

    _migrate(db_url, "upgrade", "0005", with_metrics)
    store = await Store.open(db_url)
    try:
        [exp], _ = await store.list_experiments()
        [trial] = await store.list_trials(exp.id)
        rows = await store.get_metrics(trial.id)
        want = summarize((r.id, r.steps_completed, r.metrics) for r in rows)
        async with store._engine.connect() as conn:
            stored = (await conn.execute(select(MetricSummary.__table__))).mappings().all()
        assert {(r["name"], r["level"], r["block"]): Block.from_row(r) for r in stored} == want
        # Steps 0-63, 64-127, 128-191 and 192-199 at the finest level (64 steps a block);
        # the booleans are not summarised.
        assert sorted(k[2] for k in want if k[1] == LEVELS[0]) == [0, 1, 2, 3]
        assert {k[0] for k in want} == {"loss"}
    finally:
        await store.close()


async def test_the_agent_user_migration_adds_unlinked_users_and_downgrades(db_url: str) -> None:
    """0008 gives users of 0007 an empty link; going back to 0007 drops the links and keeps
    the users; going forward again leaves them unlinked."""
    def user_columns() -> set[str]:
        engine = _sync_engine(db_url)
        try:
            return {c["name"] for c in inspect(engine).get_columns("users")}
        finally:
            engine.dispose()

    link = {"agent_uid", "agent_gid", "agent_user", "agent_group"}
    _migrate(db_url, "upgrade", "0007", _add_old_experiment)
    assert not link & user_columns()
    store = await Store.open(db_url)  # upgrades to 0008
    try:
        old = await store.get_user("old")
        assert old is not None
        assert (old.agent_uid, old.agent_gid, old.agent_user, old.agent_group) == (
            None, None, None, None)
        await store.link_agent_user(old.id, agent_uid=3000000000, agent_gid=1000,
                                    agent_user="old", agent_group="staff")
        await store.add_token(old.id, hash_token("old-secret"))
    finally:
        await store.close()
    assert link <= user_columns()

    _migrate(db_url, "downgrade", "0007")
    assert not link & user_columns()
    with _connected(db_url) as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0007"
        assert conn.execute(text("SELECT username FROM users")).scalars().all() == ["old"]
        # What references the user is untouched: its experiment and its token.
        assert conn.execute(text("SELECT name FROM experiments")).scalars().all() == ["kept"]
        assert conn.execute(text("SELECT token_hash FROM tokens")).scalars().all() == [
            hash_token("old-secret")]

    store = await Store.open(db_url)
    try:
        old = await store.get_user("old")
        assert old is not None and old.agent_uid is None and old.agent_user is None
    finally:
        await store.close()


async def test_the_chunks_migration_packs_rows_keeping_ids_and_new_rows_number_above(
        db_url: str) -> None:
    """0015 packs the rows of ``metrics`` into chunks: every row keeps its id, step, time,
    run and metrics (NaN included), reads see the same rows, a stream resuming from an old id
    misses nothing, and rows stored afterwards get ids above every old one, rolled-back
    rows' included. Going back to 0014 unpacks them again."""
    def with_rows(conn: Connection) -> None:
        _add_old_experiment(conn)
        _add_old_trial(conn, "r1", run_id=2)
        # Groups interleaved by id, two runs, and an id gap where a row was rolled back.
        for row_id, group, step, run, value in [
                (1, "training", 1, 1, "1.5"), (2, "validation", 1, 1, '"NaN"'),
                (3, "training", 2, 1, "2.5"), (4, "training", 3, 1, '{"a": [1, 2]}'),
                (6, "training", 3, 2, "3.25"), (7, "training", 4, 2, "4.5")]:
            conn.execute(text(
                "INSERT INTO metrics (id, trial_id, group_name, steps_completed, report_time, "
                "metrics, trial_run) SELECT :id, id, :g, :s, :t, :m, :r FROM trials"),
                {"id": row_id, "g": group, "s": step, "r": run, "m": f'{{"v": {value}}}',
                 "t": dt.datetime(2026, 1, 1, 0, 0, row_id, tzinfo=dt.timezone.utc)})
        conn.execute(text(
            "INSERT INTO rolled_back_metrics (id, trial_id, group_name, steps_completed, "
            "report_time, metrics, trial_run, rolled_back_by_run, rolled_back_at) SELECT 5000000, "
            "id, 'training', 9, CURRENT_TIMESTAMP, '{}', 1, 2, CURRENT_TIMESTAMP FROM trials"))

    _migrate(db_url, "upgrade", "0014", with_rows)
    store = await Store.open(db_url)
    try:
        [exp], _ = await store.list_experiments()
        [trial] = await store.list_trials(exp.id)
        rows = await store.get_metrics(trial.id, group="training")
        assert [(r.id, r.steps_completed, r.trial_run, r.metrics["v"]) for r in rows] == [
            (1, 1, 1, 1.5), (3, 2, 1, 2.5), (4, 3, 1, {"a": [1, 2]}), (6, 3, 2, 3.25),
            (7, 4, 2, 4.5)]
        assert rows[2].report_time == dt.datetime(2026, 1, 1, 0, 0, 4, tzinfo=dt.timezone.utc)
        [nan] = await store.get_metrics(trial.id, group="validation")
        assert (nan.id, nan.metrics) == (2, {"v": "NaN"})
        assert [r.id for r in await store.experiment_metrics_after(exp.id, 2, 100)] == [
            3, 4, 6, 7]
        assert [r.id for r in await store.experiment_metrics_after(exp.id, 0, 3)] == [1, 2, 3]
        new = await store.insert_metrics(trial.id, "training",
                                         [{"steps_completed": 5, "metrics": {"v": 5}}])
        assert not isinstance(new, int) and new[0]["id"] > 5000000
        assert [r.id for r in await store.experiment_metrics_after(exp.id, 6, 100)] == [
            7, new[0]["id"]]
        # A rollback cuts an old chunk and keeps its earlier rows' ids.
        assert await store.start_trial_run(trial.id, 2) == (3, 4)
        assert [r.id for r in await store.get_metrics(trial.id)] == [1, 2, 3]
    finally:
        await store.close()

    _migrate(db_url, "downgrade", "0014")
    with _connected(db_url) as conn:
        assert conn.execute(text(
            "SELECT id, group_name, steps_completed FROM metrics ORDER BY id")).all() == [
            (1, "training", 1), (2, "validation", 1), (3, "training", 2)]


async def test_the_summary_marks_migration_keeps_old_trials_eager_and_downgrades_rolled_up(
        db_url: str) -> None:
    """0016 marks each trial's coarse summaries: a trial from before holds every row in them
    and goes on so (its mark is past every step), a new one starts at 0. Going back to 0015
    rolls every row past a mark up into the coarse blocks, as the older code reads them."""
    def with_trial(conn: Connection) -> None:
        _add_old_experiment(conn)
        _add_old_trial(conn, "old", run_id=0)

    _migrate(db_url, "upgrade", "0015", with_trial)
    store = await Store.open(db_url)
    steps = [s * 499 for s in range(4_000)]
    rows = [{"steps_completed": s, "metrics": {"loss": (s % 17) / 3}} for s in steps]
    try:
        [exp], _ = await store.list_experiments()
        [old] = await store.list_trials(exp.id)
        new = await store.create_trial(experiment_id=exp.id, request_id="new", hparams={},
                                       seed=1, state="ACTIVE")
        assert (old.summaries_below, new.summaries_below) == (1 << 62, 0)
        expected = {}
        for trial in (old, new):
            for start in range(0, len(rows), 400):
                await store.add_metrics(trial.id, "training", rows[start : start + 400])
            stored = await store.get_metrics(trial.id, group="training")
            expected[trial.id] = {key: b.row() for key, b in summarize(
                (r.id, r.steps_completed, r.metrics) for r in stored).items()}
        marks = {t.id: (await store.get_trial(t.id)).summaries_below  # type: ignore[union-attr]
                 for t in (old, new)}
        assert marks[old.id] == 1 << 62 and 0 < marks[new.id] < steps[-1]
    finally:
        await store.close()

    _migrate(db_url, "downgrade", "0015")
    with _connected(db_url) as conn:
        assert "summaries_below" not in {c["name"] for c in inspect(conn).get_columns("trials")}
        for trial_id, want in expected.items():
            got = conn.execute(select(MetricSummary.__table__).where(
                MetricSummary.trial_id == trial_id)).mappings().all()
            assert {(r["name"], r["level"], r["block"]): Block.from_row(r).row()
                    for r in got} == want
            assert {level for _, level, _ in want} == set(LEVELS)
