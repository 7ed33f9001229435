"""Trial source infos: a trial's links to the checkpoints and model versions it used, and the
metrics read back through them (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid as uuidlib

import pytest
from sqlalchemy import delete, func, select

from det_hub.states import CheckpointState, TrialState
from det_hub.store import (
    Experiment,
    ModelVersion,
    NotFound,
    Store,
    StoreConflict,
    Trial,
    TrialSourceInfo,
    User,
)


async def _checkpoint(store: Store, trial: Trial, steps: int = 10) -> str:
    uuid = str(uuidlib.uuid4())
    await store.add_checkpoint(
        uuid=uuid, trial_id=trial.id, experiment_id=trial.experiment_id, allocation_id=None,
        state=CheckpointState.COMPLETED.value, steps_completed=steps, resources={"w": 1},
        metadata={}, storage={"type": "shared_fs"})
    return uuid


async def _trial(store: Store, experiment: Experiment, request_id: str) -> Trial:
    return await store.create_trial(experiment_id=experiment.id, request_id=request_id,
                                    hparams={}, seed=1, state=TrialState.ACTIVE.value)


async def _version(store: Store, user: User, checkpoint_uuid: str,
                   name: str = "digits") -> ModelVersion:
    model = await store.get_model(name) or await store.create_model(name=name,
                                                                     owner_id=user.id)
    return await store.add_model_version(model_id=model.id, checkpoint_uuid=checkpoint_uuid,
                                         owner_id=user.id)


async def _count_links(store: Store) -> int:
    async with store._reading() as session:
        return int(await session.scalar(select(func.count()).select_from(TrialSourceInfo))
                   or 0)


async def test_a_link_is_stored_once_and_finds_the_trials_metrics(
        store: Store, user: User, experiment: Experiment, trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    inference = await _trial(store, experiment, "req-1")
    first = await store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used)
    again = await store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used)
    assert (again.id, again.created_at) == (first.id, first.created_at)
    assert (first.trial_id, first.checkpoint_uuid, first.model_version_id) == (
        inference.id, used, None)
    assert await _count_links(store) == 1
    assert await store.trials_using_checkpoint(used) == [inference.id]

    await store.add_metrics(inference.id, "validation", [
        {"steps_completed": 5, "metrics": {"accuracy": 0.9}}])
    await store.add_metrics(inference.id, "training", [
        {"steps_completed": 2, "metrics": {"loss": 1.0}},
        {"steps_completed": 4, "metrics": {"loss": 0.5}}])
    # The trial that wrote the checkpoint reported too; it did not use it.
    await store.add_metrics(trial.id, "validation", [
        {"steps_completed": 10, "metrics": {"accuracy": 0.1}}])

    rows = await store.checkpoint_metrics(used)
    assert [(r.trial_id, r.group, r.steps_completed) for r in rows] == [
        (inference.id, "training", 2), (inference.id, "training", 4),
        (inference.id, "validation", 5)]
    [validation] = await store.checkpoint_metrics(used, group="validation")
    assert validation.metrics == {"accuracy": 0.9}
    assert await store.checkpoint_metrics(used, group="nothing") == []
    assert await store.checkpoint_metrics(str(uuidlib.uuid4())) == []


async def test_several_trials_are_read_in_order_of_their_ids(
        store: Store, experiment: Experiment, trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    trials = [await _trial(store, experiment, f"req-{i}") for i in range(3)]
    for t in reversed(trials):
        await store.add_trial_source(trial_id=t.id, checkpoint_uuid=used)
        await store.add_metrics(t.id, "validation", [
            {"steps_completed": 1, "metrics": {"who": t.id}}])
    assert await store.trials_using_checkpoint(used) == [t.id for t in trials]
    rows = await store.checkpoint_metrics(used, group="validation")
    assert [r.metrics["who"] for r in rows] == [t.id for t in trials]
    picked = await store.metrics_of_trials([trials[2].id, trials[0].id], group="validation")
    assert [r.id for r in picked] == [rows[2].id, rows[0].id]


async def test_a_model_version_link_also_links_its_checkpoint(
        store: Store, user: User, experiment: Experiment, trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    v1 = await _version(store, user, used)
    v2 = await _version(store, user, used)
    inference = await _trial(store, experiment, "req-1")
    link = await store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used,
                                        model_version_id=v1.id)
    assert link.model_version_id == v1.id
    await store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used,
                                 model_version_id=v1.id)
    links = await store.list_trial_sources(inference.id)
    assert [(s.checkpoint_uuid, s.model_version_id) for s in links] == [
        (used, None), (used, v1.id)]
    await store.add_metrics(inference.id, "validation", [
        {"steps_completed": 3, "metrics": {"accuracy": 0.8}}])

    assert await store.trials_using_model_version(v1.id) == [inference.id]
    assert await store.trials_using_model_version(v2.id) == []
    assert [r.metrics for r in await store.model_version_metrics(v1.id)] == [
        {"accuracy": 0.8}]
    assert await store.model_version_metrics(v2.id) == []
    assert await store.trials_using_checkpoint(used) == [inference.id]

    # The version's link goes with it; the checkpoint's stays.
    await store.delete_model_version(v1.id)
    assert [s.model_version_id for s in await store.list_trial_sources(inference.id)] == [None]
    assert [r.metrics for r in await store.checkpoint_metrics(used)] == [{"accuracy": 0.8}]


async def test_unknown_rows_and_a_version_of_another_checkpoint_are_refused(
        store: Store, user: User, trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    other = await _checkpoint(store, trial, steps=20)
    version = await _version(store, user, other)
    with pytest.raises(NotFound, match="trial 999999"):
        await store.add_trial_source(trial_id=999999, checkpoint_uuid=used)
    missing = str(uuidlib.uuid4())
    with pytest.raises(NotFound, match=missing):
        await store.add_trial_source(trial_id=trial.id, checkpoint_uuid=missing)
    with pytest.raises(NotFound, match="model version 999999"):
        await store.add_trial_source(trial_id=trial.id, checkpoint_uuid=used,
                                     model_version_id=999999)
    with pytest.raises(StoreConflict, match=f"names checkpoint {other}, not {used}"):
        await store.add_trial_source(trial_id=trial.id, checkpoint_uuid=used,
                                     model_version_id=version.id)
    assert await _count_links(store) == 0


async def test_concurrent_reports_of_one_link_store_one_row(
        store: Store, experiment: Experiment, trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    inference = await _trial(store, experiment, "req-1")
    links = await asyncio.gather(*[
        store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used)
        for _ in range(8)])
    assert len({link.id for link in links}) == 1
    assert await _count_links(store) == 1


async def test_links_go_with_their_trial(store: Store, experiment: Experiment,
                                         trial: Trial) -> None:
    used = await _checkpoint(store, trial)
    inference = await _trial(store, experiment, "req-1")
    await store.add_trial_source(trial_id=inference.id, checkpoint_uuid=used)
    async with store._writing() as session:
        await session.execute(delete(Trial).where(Trial.id == inference.id))
    assert await store.trials_using_checkpoint(used) == []
    assert await _count_links(store) == 0
