"""Rows most store tests need: a user, an experiment of theirs and a trial of it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from det_hub.states import ExperimentState, TrialState
from det_hub.store import Experiment, Store, Trial, User

MakeExperiment = Callable[..., Awaitable[Experiment]]


async def _make_experiment(store: Store, owner_id: int, **overrides: Any) -> Experiment:
    fields: dict[str, Any] = {
        "name": "mnist",
        "owner_id": owner_id,
        "config": {"searcher": {"name": "single", "metric": "validation_loss"}},
        "original_config": "searcher:\n  name: single\n  metric: validation_loss\n",
        "context": None,
        "state": ExperimentState.ACTIVE.value,
        "searcher_metric": "validation_loss",
        "smaller_is_better": True,
    }
    fields.update(overrides)
    return await store.create_experiment(**fields)


@pytest.fixture
def make_experiment(store: Store) -> MakeExperiment:
    """``await make_experiment(owner_id, **overrides)``: an experiment with plausible defaults."""

    async def make(owner_id: int, **overrides: Any) -> Experiment:
        return await _make_experiment(store, owner_id, **overrides)

    return make


@pytest.fixture
async def user(store: Store) -> User:
    return await store.create_user("alice")


@pytest.fixture
async def experiment(store: Store, user: User) -> Experiment:
    return await _make_experiment(store, user.id)


@pytest.fixture
async def trial(store: Store, experiment: Experiment) -> Trial:
    return await store.create_trial(
        experiment_id=experiment.id,
        request_id="req-0",
        hparams={"lr": 0.1},
        seed=7,
        state=TrialState.ACTIVE.value,
    )
