"""Checkpoints and task logs."""

from __future__ import annotations

import datetime as dt

import pytest

from det_hub.states import CheckpointState
from det_hub.store import NotFound, Store, StoreConflict, Trial

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
STORAGE = {"type": "shared_fs", "host_path": "/ckpt", "storage_path": None}


async def _add(store: Store, trial: Trial, uuid: str, steps: int, **kw: object) -> None:
    fields: dict[str, object] = {
        "uuid": uuid,
        "trial_id": trial.id,
        "experiment_id": trial.experiment_id,
        "allocation_id": f"{trial.id}.0",
        "state": CheckpointState.COMPLETED,
        "steps_completed": steps,
        "resources": {"model.pt": 1000, "optim.pt": 234},
        "metadata": {"steps_completed": steps},
        "storage": STORAGE,
        "report_time": T0 + dt.timedelta(minutes=steps),
    }
    fields.update(kw)
    await store.add_checkpoint(**fields)  # type: ignore[arg-type]


async def test_checkpoint_crud(store: Store, trial: Trial) -> None:
    created = await store.add_checkpoint(
        uuid="c-1",
        trial_id=trial.id,
        experiment_id=trial.experiment_id,
        allocation_id=f"{trial.id}.0",
        state="ACTIVE",
        steps_completed=100,
        resources={"model.pt": 1234, "sub/optim.pt": 4321, "empty": 0},
        metadata={"steps_completed": 100, "framework": "torch"},
        storage=STORAGE,
    )
    assert created.size == 1234 + 4321
    assert created.report_time.utcoffset() == dt.timedelta(0)

    got = await store.get_checkpoint("c-1")
    assert got is not None
    assert (got.trial_id, got.experiment_id, got.allocation_id, got.state) == (
        trial.id,
        trial.experiment_id,
        f"{trial.id}.0",
        "ACTIVE",
    )
    assert (got.steps_completed, got.size) == (100, 5555)
    assert got.resources == {"model.pt": 1234, "sub/optim.pt": 4321, "empty": 0}
    assert got.meta == {"steps_completed": 100, "framework": "torch"}
    assert got.storage == STORAGE
    assert got.report_time == created.report_time
    assert await store.get_checkpoint("nope") is None

    updated = await store.update_checkpoint("c-1", state=CheckpointState.DELETED, meta={"x": 1})
    assert (updated.state, updated.meta) == ("DELETED", {"x": 1})
    got = await store.get_checkpoint("c-1")
    assert got is not None and (got.state, got.meta) == ("DELETED", {"x": 1})

    with pytest.raises(StoreConflict):
        await _add(store, trial, "c-1", 200)
    with pytest.raises(NotFound):
        await store.update_checkpoint("nope", state="DELETED")
    with pytest.raises(NotFound):
        await _add(store, trial, "c-2", 1, trial_id=9999)


async def test_checkpoint_listing(store: Store, trial: Trial) -> None:
    other = await store.create_trial(
        experiment_id=trial.experiment_id, request_id="r2", hparams={}, seed=1, state="ACTIVE"
    )
    await _add(store, trial, "a", 100)
    await _add(store, trial, "b", 300)
    await _add(store, other, "c", 200)
    await _add(store, trial, "d", 400, state="DELETED")

    everything = await store.list_checkpoints(experiment_id=trial.experiment_id)
    assert [c.uuid for c in everything] == ["d", "b", "c", "a"]  # newest first
    assert [c.uuid for c in await store.list_checkpoints()] == ["d", "b", "c", "a"]
    assert [c.uuid for c in await store.list_checkpoints(trial_id=trial.id)] == ["d", "b", "a"]
    assert [c.uuid for c in await store.list_checkpoints(trial_id=other.id)] == ["c"]
    completed = await store.list_checkpoints(
        experiment_id=trial.experiment_id, states=[CheckpointState.COMPLETED]
    )
    assert [c.uuid for c in completed] == ["b", "c", "a"]
    assert await store.list_checkpoints(experiment_id=9999) == []
    assert all(c.size == 1234 for c in everything)


async def test_logs_order_and_paging(store: Store, trial: Trial) -> None:
    other = await store.create_trial(
        experiment_id=trial.experiment_id, request_id="r2", hparams={}, seed=1, state="ACTIVE"
    )
    rows = [
        {
            "trial_id": trial.id if i % 3 else other.id,
            "allocation_id": f"{trial.id}.0",
            "timestamp": T0 + dt.timedelta(seconds=i),
            "rank": i % 2 if i % 5 else None,
            "stdtype": ("stdout", "stderr", "system")[i % 3],
            "message": f"line {i}\n",
        }
        for i in range(30)
    ]
    assert await store.add_logs(rows) == 30
    assert await store.add_logs([]) == 0

    mine = await store.get_logs(trial.id)
    expected = [r for r in rows if r["trial_id"] == trial.id]
    assert len(mine) == 20
    assert [m.message for m in mine] == [r["message"] for r in expected]
    ids = [m.id for m in mine]
    assert ids == sorted(ids) and len(set(ids)) == 20
    first = mine[0]
    assert (first.trial_id, first.allocation_id, first.rank, first.stdtype) == (
        trial.id,
        f"{trial.id}.0",
        1,
        "stderr",
    )
    assert first.timestamp == T0 + dt.timedelta(seconds=1)
    assert first.timestamp.utcoffset() == dt.timedelta(0)
    assert mine[3].rank is None  # line 5

    page = await store.get_logs(trial.id, after_id=ids[4], limit=5)
    assert [m.id for m in page] == ids[5:10]
    assert await store.get_logs(trial.id, after_id=ids[-1]) == []
    assert len(await store.get_logs(other.id)) == 10

    # Lines added later come after every earlier one.
    await store.add_logs([{**rows[1], "message": "late"}])
    latest = await store.get_logs(trial.id, after_id=ids[-1])
    assert [m.message for m in latest] == ["late"]
    assert latest[0].id > ids[-1]
