"""The single searcher: one trial, reproducible hyperparameters, and a clean shutdown."""

from __future__ import annotations

import json

import pytest

from det_hub.searcher import (
    Create,
    Shutdown,
    SingleSearch,
    UnsupportedSearcher,
    build_search_method,
)

SPACE = {
    "lr": {"type": "double", "minval": 0.001, "maxval": 0.1},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "batch": {"type": "const", "val": 64},
}


def test_one_trial_with_hparams_from_the_space() -> None:
    method = build_search_method("single", SPACE, seed=7, max_length=100)
    [create] = method.initial_actions()
    assert isinstance(create, Create)
    hp = create.hparams
    assert 0.001 <= hp["lr"] <= 0.1 and 1 <= hp["layers"] <= 4
    assert hp["act"] in ("relu", "tanh") and hp["batch"] == 64
    assert method.target_length(create.request_id) == 100


def test_same_seed_same_trial_other_seed_other_trial() -> None:
    a = SingleSearch(SPACE, 7, 100).initial_actions()
    b = SingleSearch(SPACE, 7, 100).initial_actions()
    c = SingleSearch(SPACE, 8, 100).initial_actions()
    assert a == b
    assert a != c


def test_closing_the_trial_shuts_the_search_down_once() -> None:
    method = SingleSearch(SPACE, 1, 10)
    [create] = method.initial_actions()
    assert method.progress({create.request_id: 5}) == 0.5
    assert method.on_trial_closed(create.request_id) == [Shutdown(failure=False)]
    assert method.on_trial_closed(create.request_id) == []
    assert method.progress({}) == 1.0


def test_an_errored_trial_fails_the_search() -> None:
    method = SingleSearch(SPACE, 1, 10)
    [create] = method.initial_actions()
    assert method.on_trial_exited_early(create.request_id, "ERRORED") == [Shutdown(failure=True)]


def test_snapshot_survives_json_and_restores_exactly() -> None:
    method = SingleSearch(SPACE, 3, 10)
    [create] = method.initial_actions()
    state = json.loads(json.dumps(method.snapshot()))
    again = SingleSearch(SPACE, 3, 10)
    again.restore(state)
    assert again.request_id == create.request_id
    assert again.rng.random() == method.rng.random()
    assert again.on_trial_closed(create.request_id) == [Shutdown()]


def test_restore_refuses_another_method_state() -> None:
    method = SingleSearch(SPACE, 3, 10)
    with pytest.raises(ValueError, match="searcher state is for 'random'"):
        method.restore({"name": "random"})


def test_unknown_searcher_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedSearcher, match="searcher.name: 'bogus' is not available"):
        build_search_method("bogus", {}, 0, None)
