"""Experiments and their context archives."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, inspect
from sqlalchemy.orm.exc import DetachedInstanceError

from det_hub.states import ExperimentState
from det_hub.store import NotFound, Store, StoreConflict, User, utcnow
from det_hub.store._common import keyed_update
from det_hub.store.models import Experiment


@contextlib.contextmanager
def recorded_sql(store: Store) -> Iterator[list[str]]:
    """Every SQL statement the store sends within."""
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    engine = store._engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def test_create_and_get(store: Store, user: User) -> None:
    config = {"searcher": {"name": "random", "max_trials": 4}, "hyperparameters": {"lr": 0.1}}
    created = await store.create_experiment(
        name="mnist",
        owner_id=user.id,
        config=config,
        original_config="name: mnist\n",
        context=None,
        state=ExperimentState.PAUSED,
        searcher_metric="validation_loss",
        smaller_is_better=False,
        resource_pool="gpus",
        priority=10,
        description="first",
        seed=1234,
    )
    got = await store.get_experiment(created.id)
    assert got is not None
    assert got.id == created.id
    assert (got.name, got.description, got.owner_id, got.state) == (
        "mnist",
        "first",
        user.id,
        "PAUSED",
    )
    assert got.config == config
    assert got.original_config == "name: mnist\n"
    assert (got.searcher_metric, got.smaller_is_better) == ("validation_loss", False)
    assert (got.resource_pool, got.priority, got.seed) == ("gpus", 10, 1234)
    assert await store.load_searcher(got.id) == (None, [])
    assert (got.archived, got.progress, got.ended_at) == (
        False,
        None,
        None,
    )
    assert (got.labels, got.notes) == ([], "")
    assert got.created_at.utcoffset() == dt.timedelta(0)
    assert got.created_at == created.created_at
    assert await store.get_experiment(9999) is None


async def test_defaults(store: Store, user: User, make_experiment: Any) -> None:
    exp = await make_experiment(user.id)
    got = await store.get_experiment(exp.id)
    assert got is not None
    assert (got.resource_pool, got.priority, got.description, got.seed) == ("default", 42, "", 0)


async def test_update(store: Store, user: User, make_experiment: Any) -> None:
    exp = await make_experiment(user.id)
    ended = dt.datetime(2026, 1, 2, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    updated = await store.update_experiment(
        exp.id,
        state=ExperimentState.COMPLETED,
        progress=1.0,
        archived=True,
        ended_at=ended,
        searcher_state={"trials": {"1": {"rung": 2}}},
        name="renamed",
        priority=5,
        labels=["a", "b"],
    )
    assert updated.state == "COMPLETED"
    assert updated.ended_at == ended
    assert updated.ended_at is not None and updated.ended_at.utcoffset() == dt.timedelta(0)
    got = await store.get_experiment(exp.id)
    assert got is not None
    assert (got.state, got.progress, got.archived, got.name, got.priority) == (
        "COMPLETED",
        1.0,
        True,
        "renamed",
        5,
    )
    assert got.ended_at == ended
    assert got.ended_at is not None and got.ended_at.tzinfo is not None
    assert got.ended_at.utcoffset() == dt.timedelta(0)
    assert (await store.load_searcher(exp.id))[0] == {"trials": {"1": {"rung": 2}}}
    assert got.labels == ["a", "b"]

    with pytest.raises(NotFound):
        await store.update_experiment(9999, state="PAUSED")
    with pytest.raises(ValueError, match="no column"):
        await store.update_experiment(exp.id, colour="red")
    with pytest.raises(ValueError, match="primary key"):
        await store.update_experiment(exp.id, id=5)


async def test_create_with_missing_owner_is_not_found(store: Store, make_experiment: Any) -> None:
    with pytest.raises(NotFound):
        await make_experiment(9999)
    assert await store.list_experiments() == ([], 0)


async def test_list_filters_pagination_and_total(
    store: Store, user: User, make_experiment: Any
) -> None:
    bob = await store.create_user("bob")
    ids = []
    for i in range(7):
        exp = await make_experiment(
            user.id if i % 2 == 0 else bob.id,
            name=f"e{i}",
            state="ACTIVE" if i < 4 else "COMPLETED",
        )
        ids.append(exp.id)
    await store.update_experiment(ids[1], archived=True)
    await store.update_experiment(ids[5], archived=True)
    newest_first = ids[::-1]

    page, total = await store.list_experiments(limit=3)
    assert total == 7
    assert [e.id for e in page] == newest_first[:3]
    page, total = await store.list_experiments(limit=3, offset=3)
    assert (total, [e.id for e in page]) == (7, newest_first[3:6])
    page, total = await store.list_experiments(limit=3, offset=6)
    assert (total, [e.id for e in page]) == (7, newest_first[6:])
    page, total = await store.list_experiments(offset=10)
    assert (page, total) == ([], 7)

    page, total = await store.list_experiments(states=["COMPLETED"])
    assert (total, [e.id for e in page]) == (3, [ids[6], ids[5], ids[4]])
    page, total = await store.list_experiments(states=[ExperimentState.ACTIVE, "COMPLETED"])
    assert total == 7
    page, total = await store.list_experiments(states=[])
    assert (page, total) == ([], 0)

    page, total = await store.list_experiments(archived=True)
    assert (total, [e.id for e in page]) == (2, [ids[5], ids[1]])
    page, total = await store.list_experiments(archived=False)
    assert total == 5 and ids[1] not in [e.id for e in page]

    page, total = await store.list_experiments(owner_id=bob.id)
    assert (total, [e.id for e in page]) == (3, [ids[5], ids[3], ids[1]])
    page, total = await store.list_experiments(
        owner_id=bob.id, states=["ACTIVE"], archived=False, limit=1
    )
    assert (total, [e.id for e in page]) == (1, [ids[3]])

    recovering = await store.list_experiments_in_states(["ACTIVE", "PAUSED"])
    assert [e.id for e in recovering] == ids[:4]


async def test_context_round_trip_and_not_loaded_by_list(
    store: Store, user: User, make_experiment: Any
) -> None:
    blob = os.urandom(5 * 1024 * 1024)
    exp = await make_experiment(user.id, context=blob)
    bare = await make_experiment(user.id)
    assert await store.get_experiment_context(exp.id) == blob
    assert await store.get_experiment_context(bare.id) is None
    assert await store.get_experiment_context(9999) is None

    with recorded_sql(store) as statements:
        page, total = await store.list_experiments()
        got = await store.get_experiment(exp.id)
    assert total == 2 and got is not None
    assert statements, "no SQL captured"
    assert not any(re.search(r"experiment_contexts|\barchive\b", s) for s in statements)
    assert "archive" not in vars(got)


async def test_the_searcher_is_stored_as_events_then_whole(
    store: Store, user: User, make_experiment: Any
) -> None:
    """Events append after the state stored whole; storing it whole again drops those it
    holds, in one transaction; an experiment's load never reads the state."""
    exp = await make_experiment(user.id)
    await store.add_searcher_events(exp.id, 1, [{"event": "initial"},
                                                {"event": "created", "request_id": "a"}])
    assert await store.load_searcher(exp.id) == (None, [
        {"event": "initial", "seq": 1}, {"event": "created", "request_id": "a", "seq": 2}])
    with pytest.raises(StoreConflict):
        await store.add_searcher_events(exp.id, 2, [{"event": "closed", "request_id": "a"}])
    await store.add_searcher_events(exp.id, 3, [{"event": "closed", "request_id": "a"}])
    whole = {"method": {"x": 1}, "events_through": 2}
    await store.compact_searcher(exp.id, whole, 2)
    assert await store.load_searcher(exp.id) == (
        whole, [{"event": "closed", "request_id": "a", "seq": 3}])
    with pytest.raises(NotFound):
        await store.compact_searcher(exp.id + 100, whole, 2)

    with recorded_sql(store) as statements:
        await store.get_experiment(exp.id)
        await store.list_experiments()
        await store.update_experiment(exp.id, progress=0.5)
    assert statements and not any("searcher_state" in s for s in statements)


async def test_returned_objects_are_usable_after_the_call(
    store: Store, user: User, make_experiment: Any
) -> None:
    exp = await make_experiment(user.id)
    page, _ = await store.list_experiments()
    await store.update_experiment(exp.id, name="changed")
    # Detached, fully loaded snapshots: reading attributes needs no session.
    assert page[0].name == "mnist"
    assert page[0].config["searcher"]["name"] == "single"
    assert abs(utcnow() - page[0].created_at) < dt.timedelta(minutes=1)


async def test_an_update_answers_the_row_as_a_read_does_without_its_searcher_state(
    store: Store, user: User, make_experiment: Any
) -> None:
    exp = await make_experiment(user.id)
    await store.compact_searcher(exp.id, {"method": {"big": list(range(1000))}}, 0)
    updated = await store.update_experiment(exp.id, progress=0.25, name="renamed")
    got = await store.get_experiment(exp.id)
    assert got is not None
    shown = inspect(updated)
    assert shown.detached and shown.identity == (exp.id,)
    loaded = {a.key for a in inspect(Experiment).column_attrs} - {"searcher_state"}
    assert {k: getattr(updated, k) for k in loaded} == {k: getattr(got, k) for k in loaded}
    assert (updated.progress, updated.name) == (0.25, "renamed")
    # Deferred, as a read leaves it: the search's whole state is not read back by an update.
    assert "searcher_state" not in shown.dict
    with pytest.raises(DetachedInstanceError):
        _ = updated.searcher_state
    with pytest.raises(NotFound, match="Experiment 9999 does not exist"):
        await store.update_experiment(9999, progress=0.5)


async def test_updates_of_the_same_columns_share_one_statement_and_keep_their_own_values(
    store: Store, user: User, make_experiment: Any
) -> None:
    first = await make_experiment(user.id, name="first")
    second = await make_experiment(user.id, name="second")
    one, one_params = keyed_update(Experiment, first.id, {"progress": 0.5, "name": "a"})
    other, other_params = keyed_update(Experiment, second.id, {"name": "b", "progress": 0.75})
    # Kept, whatever the order of the fields: SQLAlchemy finds its compiled form at once.
    assert one is other
    assert one_params != other_params
    await store.update_experiment(first.id, progress=0.5, name="a")
    await store.update_experiment(second.id, name="b", progress=0.75)
    got = [await store.get_experiment(e.id) for e in (first, second)]
    assert [(e.name, e.progress) for e in got if e is not None] == [("a", 0.5), ("b", 0.75)]
    with pytest.raises(ValueError, match="Experiment has no column"):
        keyed_update(Experiment, first.id, {"colour": "red"})
    with pytest.raises(ValueError, match="primary key id cannot be updated"):
        keyed_update(Experiment, first.id, {"id": 7})

async def test_experiments_are_found_by_part_of_their_name(
        store: Store, user: User, make_experiment: Any) -> None:
    mnist = await make_experiment(user.id, name="MNIST baseline")
    cifar = await make_experiment(user.id, name="cifar_10 50%")
    await make_experiment(user.id, name="cifar-10")

    async def found(text: str) -> list[int]:
        rows, total = await store.list_experiments(name_contains=text)
        assert total == len(rows)
        return [r.id for r in rows]

    assert await found("mnist") == [mnist.id]  # ignoring case
    assert await found("BASE") == [mnist.id]
    # % and _ are the text itself, not LIKE's wildcards.
    assert await found("0 50%") == [cifar.id]
    assert await found("cifar_") == [cifar.id]
    assert await found("%") == [cifar.id]
    # With the other filters, and counted over every page.
    page, total = await store.list_experiments(name_contains="CIFAR", owner_id=user.id, limit=1)
    assert ([r.id for r in page], total) == ([cifar.id + 1], 2)
    assert await found("nothing") == []
