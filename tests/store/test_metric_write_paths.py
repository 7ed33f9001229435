"""The metric write's own database paths: PostgreSQL's direct connections (one prepared
statement per batch, no ORM session) and SQLite's writer thread (one hop per batch)."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from det_hub.store import NotFound, Store, Trial
from det_hub.store._common import numbered
from det_hub.store.direct import MAX_OPEN, DirectConnections
from det_hub.store.engine import normalize_url
from det_hub.store.packing import Pack


def _pack(first: int, count: int) -> Pack:
    steps = list(range(first, first + count))
    return Pack.of_columns(steps, {"loss": [1.0 / (s + 1) for s in steps],
                                   "tag": ["x"] * count})


def test_named_parameters_are_numbered_once_each_and_cast() -> None:
    sql, names = numbered(
        "SELECT :a, :b::text, CAST(:a AS int), x::bigint FROM t WHERE y = :c_1",
        {"a": "BIGINT", "c_1": "VARCHAR"})
    assert names == ("a", "b", "c_1")
    assert sql == ("SELECT $1::BIGINT, $2::text, CAST($1::BIGINT AS int), x::bigint FROM t "
                   "WHERE y = $3::VARCHAR")


async def test_concurrent_batches_and_other_writes_all_land_once(
        store: Store, trial: Trial) -> None:
    """Metric batches from many tasks at once, beside other writes, on either database:
    every batch stored once, a repeat answered with its first copy's rows, steps raised to
    the greatest."""
    keys = [uuid.uuid4().hex for _ in range(40)]

    async def report(n: int) -> object:
        return await store.insert_pack(trial.id, "training", _pack(n * 10, 10), key=keys[n],
                                       steps_completed=n * 10 + 9)

    async def log(n: int) -> None:
        await store.add_logs([{"trial_id": trial.id, "message": f"line {n}", "rank": 0,
                               "stdtype": "stdout"}])

    results = await asyncio.gather(*(report(n) for n in range(40)),
                                   *(log(n) for n in range(10)),
                                   *(report(n) for n in range(0, 40, 4)))
    first, repeats = results[:40], results[50:]
    # Of two copies of a key sent together, exactly one is stored; the other is told so.
    for n, answer in enumerate(first):
        answers = [answer] + ([repeats[n // 4]] if n % 4 == 0 else [])
        assert sorted(isinstance(a, int) for a in answers) == [False] + [True] * (
            len(answers) - 1)
        assert all(a == 10 if isinstance(a, int) else len(a) == 10  # type: ignore[arg-type]
                   for a in answers)
    rows = await store.get_metrics(trial.id, group="training")
    assert [r.steps_completed for r in rows] == list(range(400))
    assert len({r.id for r in rows}) == 400
    assert (await store.get_trial(trial.id)).steps_completed == 399


async def test_a_batch_for_no_trial_is_refused_and_keeps_no_key(
        store: Store, trial: Trial) -> None:
    key = uuid.uuid4().hex
    with pytest.raises(NotFound, match=f"trial {trial.id + 99} not found"):
        await store.insert_pack(trial.id + 99, "training", _pack(0, 5), key=key)
    # The same key is free for the trial it was meant for.
    stored = await store.insert_pack(trial.id, "training", _pack(0, 5), key=key)
    assert not isinstance(stored, int) and len(stored) == 5


async def test_a_batch_sets_its_trial_fields_with_it_and_a_repeat_sets_none(
        store: Store, trial: Trial) -> None:
    """A validation's best and latest go with its batch (on SQLite in its transaction); a
    repeat of the batch sets nothing, a new best tells the experiment's listeners, and a
    name that is no column of the trial's stores nothing at all."""
    heard: list[int] = []
    store.experiment_listeners.append(heard.append)
    key = uuid.uuid4().hex
    best = {"steps_completed": 4, "metrics": {"loss": 0.2}}
    stored = await store.insert_pack(trial.id, "validation", _pack(0, 5), key=key,
                                     trial_fields={"searcher_metric_value": 0.2,
                                                   "best_validation": best,
                                                   "latest_validation": best})
    assert not isinstance(stored, int)
    got = await store.get_trial(trial.id)
    assert (got.searcher_metric_value, got.best_validation, got.latest_validation) == (
        0.2, best, best)
    assert heard == [trial.experiment_id]

    again = await store.insert_pack(trial.id, "validation", _pack(0, 5), key=key,
                                    trial_fields={"searcher_metric_value": 0.9})
    assert again == 5
    assert (await store.get_trial(trial.id)).searcher_metric_value == 0.2
    latest = {"steps_completed": 9, "metrics": {"loss": 0.3}}
    await store.insert_pack(trial.id, "validation", _pack(5, 5), key=uuid.uuid4().hex,
                            trial_fields={"latest_validation": latest})
    got = await store.get_trial(trial.id)
    assert (got.best_validation, got.latest_validation) == (best, latest)
    assert heard == [trial.experiment_id]  # the best did not change

    with pytest.raises(ValueError, match="Trial has no column"):
        await store.insert_pack(trial.id, "validation", _pack(10, 5), key=uuid.uuid4().hex,
                                trial_fields={"no_such_column": 1})
    rows = await store.get_metrics(trial.id, group="validation")
    assert [r.steps_completed for r in rows] == list(range(10))


async def _trial_of_a_new_user(store: Store) -> int:
    user = await store.create_user("alice")
    experiment = await store.create_experiment(
        name="e", owner_id=user.id, config={}, original_config="", context=None,
        state="ACTIVE", searcher_metric="loss", smaller_is_better=True)
    trial = await store.create_trial(experiment_id=experiment.id, request_id="r",
                                     hparams={}, seed=0, state="ACTIVE")
    return trial.id


@pytest.mark.postgres
async def test_steps_past_32_bits_use_the_same_prepared_statement(
        postgresql_url: str) -> None:
    """Whole numbers are sent as bigint whatever their size, so the statement prepared for
    small steps serves steps past 2**31 (a type per value size would prepare it again)."""
    store = await Store.open(postgresql_url)
    try:
        trial_id = await _trial_of_a_new_user(store)
        for first in (0, 2**31 + 5, 2**40):
            stored = await store.insert_pack(trial_id, "training", _pack(first, 3),
                                             key=uuid.uuid4().hex, steps_completed=first + 2)
            assert not isinstance(stored, int)
        rows = await store.get_metrics(trial_id, group="training")
        assert [r.steps_completed for r in rows][-3:] == [2**40, 2**40 + 1, 2**40 + 2]
        assert (await store.get_trial(trial_id)).steps_completed == 2**40 + 2
        assert store._direct is not None
        idle = store._direct._idle
        assert len(idle) == 1
        prepared = await (await idle[0].execute(
            "SELECT count(*) FROM pg_prepared_statements")).fetchone()
        assert prepared == (1,)
    finally:
        await store.close()


@pytest.mark.postgres
async def test_connections_the_server_ended_are_replaced_before_a_batch(
        postgresql_url: str) -> None:
    """What a database restart does to the kept connections: the server ends them. The next
    batch goes through on a new connection, with no error and no outage."""
    store = await Store.open(postgresql_url)
    try:
        trial_id = await _trial_of_a_new_user(store)
        # Several connections kept: as many batches at once.
        await asyncio.gather(*(store.insert_pack(trial_id, "training", _pack(n * 5, 5),
                                                 key=uuid.uuid4().hex) for n in range(4)))
        assert store._direct is not None and 1 <= len(store._direct._idle) <= MAX_OPEN
        kept = [c.info.backend_pid for c in store._direct._idle]
        _, sync_url = normalize_url(postgresql_url)
        conninfo = sync_url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(conninfo, autocommit=True) as admin:
            for pid in kept:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # The server's goodbye has reached every kept connection's socket.
            await asyncio.sleep(0.2)
        stored = await store.insert_pack(trial_id, "training", _pack(20, 5),
                                         key=uuid.uuid4().hex)
        assert not isinstance(stored, int) and len(stored) == 5
        assert store.outage is None
        assert all(c.info.backend_pid not in kept for c in store._direct._idle)
        assert len(await store.get_metrics(trial_id, group="training")) == 25
    finally:
        await store.close()


@pytest.mark.postgres
async def test_writes_beyond_the_open_limit_wait_for_a_connection(
        postgresql_url: str) -> None:
    async_url, _ = normalize_url(postgresql_url)
    conns = DirectConnections(async_url, connect_timeout=5, max_open=2)
    peak = 0

    async def one() -> None:
        nonlocal peak
        row = await conns.execute("SELECT pg_backend_pid() FROM pg_sleep(0.02)", [])
        assert row is not None
        peak = max(peak, len(conns._born))

    try:
        await asyncio.gather(*(one() for _ in range(12)))
        assert peak == 2 and len(conns._idle) == 2
    finally:
        await conns.close()
    assert conns._born == {}
