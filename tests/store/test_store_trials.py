"""Trials and allocations."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from det_hub.states import RunState, TrialState
from det_hub.store import (
    Experiment,
    NotFound,
    Store,
    StoreConflict,
    Trial,
    User,
    hash_token,
    utcnow,
)


async def test_trial_create_get_list(
    store: Store, experiment: Experiment, make_experiment: Any
) -> None:
    other = await make_experiment(experiment.owner_id, name="other")
    created = [
        await store.create_trial(
            experiment_id=experiment.id,
            request_id=f"req-{i}",
            hparams={"lr": 10.0**-i, "layers": [i, i + 1]},
            seed=100 + i,
            state=TrialState.ACTIVE,
        )
        for i in range(3)
    ]
    await store.create_trial(
        experiment_id=other.id, request_id="x", hparams={}, seed=1, state="ACTIVE"
    )
    got = await store.get_trial(created[1].id)
    assert got is not None
    assert (got.experiment_id, got.request_id, got.seed, got.state) == (
        experiment.id,
        "req-1",
        101,
        "ACTIVE",
    )
    assert got.hparams == {"lr": 0.1, "layers": [1, 2]}
    assert (got.restarts, got.steps_completed, got.run_state, got.progress) == (0, 0, None, None)
    assert (got.latest_checkpoint, got.best_validation, got.latest_validation) == (None, None, None)
    assert (got.searcher_metric_value, got.runner_state, got.ended_at) == (None, None, None)
    assert got.created_at.utcoffset() == dt.timedelta(0)
    assert await store.get_trial(9999) is None

    listed = await store.list_trials(experiment.id)
    assert [t.id for t in listed] == [t.id for t in created]
    assert [t.request_id for t in listed] == ["req-0", "req-1", "req-2"]
    assert await store.list_trials(9999) == []

    counts = await store.count_trials([experiment.id, other.id, 9999])
    assert counts == {experiment.id: 3, other.id: 1, 9999: 0}
    assert await store.count_trials([]) == {}


async def test_trial_summaries_count_and_bound_the_searcher_metric(
    store: Store, experiment: Experiment, make_experiment: Any
) -> None:
    empty = await make_experiment(experiment.owner_id, name="empty")
    for i, value in enumerate([0.5, None, 0.25, 2.0]):
        trial = await store.create_trial(
            experiment_id=experiment.id, request_id=f"r{i}", hparams={}, seed=i, state="ACTIVE"
        )
        if value is not None:
            await store.update_trial(trial.id, searcher_metric_value=value)
    summaries = await store.trial_summaries([experiment.id, empty.id])
    assert summaries == {experiment.id: (4, 0.25, 2.0), empty.id: (0, None, None)}
    assert summaries[experiment.id].trials == 4
    assert await store.trial_summaries([]) == {}


async def test_listeners_hear_of_writes_that_change_an_experiments_summary(
    store: Store, user: User, make_experiment: Any
) -> None:
    heard: list[int] = []
    store.experiment_listeners.append(heard.append)
    exp = await make_experiment(user.id)
    await store.update_experiment(exp.id, progress=0.5)
    trial = await store.create_trial(
        experiment_id=exp.id, request_id="r", hparams={}, seed=1, state="ACTIVE"
    )
    # What the summary does not show is not told.
    await store.update_trial(trial.id, progress=0.5, steps_completed=3)
    assert heard == [exp.id, exp.id, exp.id]
    await store.update_trial(trial.id, searcher_metric_value=0.1)
    assert heard == [exp.id] * 4
    # A refused write tells nothing.
    with pytest.raises(NotFound):
        await store.update_experiment(9999, progress=1.0)
    assert heard == [exp.id] * 4
    store.experiment_listeners.remove(heard.append)
    await store.update_experiment(exp.id, progress=1.0)
    assert len(heard) == 4


async def test_trial_update(store: Store, trial: Trial) -> None:
    best = {"steps_completed": 400, "metrics": {"validation_loss": 0.1}}
    updated = await store.update_trial(
        trial.id,
        state=TrialState.STOPPING_COMPLETED,
        run_state=RunState.RUNNING,
        steps_completed=500,
        progress=0.5,
        restarts=1,
        latest_checkpoint="ckpt-1",
        best_validation=best,
        latest_validation=best,
        searcher_metric_value=0.1,
        runner_state="validating",
    )
    assert (updated.state, updated.run_state) == ("STOPPING_COMPLETED", "RUNNING")
    got = await store.get_trial(trial.id)
    assert got is not None
    assert (got.state, got.run_state, got.steps_completed, got.progress, got.restarts) == (
        "STOPPING_COMPLETED",
        "RUNNING",
        500,
        0.5,
        1,
    )
    assert (got.latest_checkpoint, got.best_validation, got.searcher_metric_value) == (
        "ckpt-1",
        best,
        0.1,
    )
    assert got.runner_state == "validating"
    assert got.hparams == {"lr": 0.1}  # untouched columns keep their values

    with pytest.raises(NotFound):
        await store.update_trial(9999, state="ERROR")
    with pytest.raises(NotFound):
        await store.create_trial(
            experiment_id=9999, request_id="r", hparams={}, seed=0, state="ACTIVE"
        )


async def test_allocations(store: Store, trial: Trial) -> None:
    first = await store.create_allocation(
        id=f"{trial.id}.0", trial_id=trial.id, token_hash=hash_token("t0"), slots=2, state="QUEUED"
    )
    assert (first.id, first.trial_id, first.slots, first.state) == (
        f"{trial.id}.0",
        trial.id,
        2,
        "QUEUED",
    )
    assert (first.preempt, first.log_offset, first.ended_at, first.exit_code) == (
        False,
        0,
        None,
        None,
    )
    second = await store.create_allocation(
        id=f"{trial.id}.1", trial_id=trial.id, token_hash=hash_token("t1"), slots=1, state="QUEUED"
    )

    got = await store.get_allocation(first.id)
    assert got is not None and got.token_hash == hash_token("t0")
    by_token = await store.allocation_for_token(hash_token("t1"))
    assert by_token is not None and by_token.id == second.id
    assert await store.allocation_for_token(hash_token("nope")) is None
    assert await store.get_allocation("nope") is None

    started = utcnow()
    updated = await store.update_allocation(
        first.id,
        state="RUNNING",
        agent_id="local",
        slot_ids=[0, 1],
        pid=4242,
        workdir="/tmp/w",
        log_offset=1 << 40,
        preempt=True,
        started_at=started,
    )
    assert (updated.state, updated.slot_ids, updated.preempt) == ("RUNNING", [0, 1], True)
    got = await store.get_allocation(first.id)
    assert got is not None
    assert (got.state, got.agent_id, got.slot_ids, got.pid, got.workdir) == (
        "RUNNING",
        "local",
        [0, 1],
        4242,
        "/tmp/w",
    )
    assert (got.log_offset, got.preempt, got.started_at) == (1 << 40, True, started)

    assert [a.id for a in await store.list_open_allocations()] == [first.id, second.id]
    await store.update_allocation(
        first.id, state="TERMINATED", ended_at=utcnow(), exit_code=1, exit_reason="killed"
    )
    assert [a.id for a in await store.list_open_allocations()] == [second.id]
    ended = await store.get_allocation(first.id)
    assert ended is not None and (ended.exit_code, ended.exit_reason) == (1, "killed")

    with pytest.raises(StoreConflict):
        await store.create_allocation(
            id=f"{trial.id}.0",
            trial_id=trial.id,
            token_hash=hash_token("t2"),
            slots=1,
            state="QUEUED",
        )
    with pytest.raises(StoreConflict):
        await store.create_allocation(
            id=f"{trial.id}.2",
            trial_id=trial.id,
            token_hash=hash_token("t0"),
            slots=1,
            state="QUEUED",
        )
    with pytest.raises(NotFound):
        await store.create_allocation(
            id="9999.0", trial_id=9999, token_hash=hash_token("t3"), slots=1, state="QUEUED"
        )
    with pytest.raises(NotFound):
        await store.update_allocation("nope", state="RUNNING")
    assert len(await store.list_open_allocations()) == 1
