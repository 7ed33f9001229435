"""The single searcher: one trial, reproducible hyperparameters, and a clean shutdown."""

from __future__ import annotations

import json
from typing import Any

import pytest

from det_hub.config import ConfigError, SearcherConfig
from det_hub.searcher import (
    Create,
    Shutdown,
    SingleSearch,
    UnsupportedSearcher,
    ValidateAfter,
    build_search_method,
)

SPACE = {
    "lr": {"type": "double", "minval": 0.001, "maxval": 0.1},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "batch": {"type": "const", "val": 64},
}


def searcher(**extra: Any) -> dict[str, Any]:
    return {"name": "single", "metric": "loss", "max_length": {"batches": 100}, **extra}


def single(seed: int, max_length: int = 10) -> SingleSearch:
    config = SearcherConfig.model_validate(searcher(max_length={"batches": max_length}))
    return SingleSearch(config, SPACE, seed)


def test_one_trial_with_hparams_from_the_space_and_its_target() -> None:
    method = build_search_method(searcher(), SPACE, seed=7)
    create, target = method.initial_actions()
    assert isinstance(create, Create)
    assert target == ValidateAfter(create.request_id, 100)
    hp = create.hparams
    assert 0.001 <= hp["lr"] <= 0.1 and 1 <= hp["layers"] <= 4
    assert hp["act"] in ("relu", "tanh") and hp["batch"] == 64
    assert method.target_length(create.request_id) == 100
    assert method.is_waiting(create.request_id) is False


def test_a_config_object_or_its_dict_form_build_the_same_method() -> None:
    from_dict = build_search_method(searcher(), SPACE, seed=7).initial_actions()
    config = SearcherConfig.model_validate(searcher())
    assert build_search_method(config, SPACE, seed=7).initial_actions() == from_dict


def test_time_metric_lengths_are_units_too() -> None:
    config = {"name": "single", "metric": "loss", "time_metric": "batches", "max_time": 250}
    _, target = build_search_method(config, SPACE, seed=7).initial_actions()
    assert isinstance(target, ValidateAfter) and target.length == 250


def test_without_a_length_there_is_no_target() -> None:
    method = build_search_method({"name": "single", "metric": "loss"}, SPACE, seed=7)
    [create] = method.initial_actions()
    assert isinstance(create, Create)
    assert method.target_length(create.request_id) is None


def test_same_seed_same_trial_other_seed_other_trial() -> None:
    a = single(7).initial_actions()
    b = single(7).initial_actions()
    c = single(8).initial_actions()
    assert a == b
    assert a != c


def test_closing_the_trial_shuts_the_search_down_once() -> None:
    method = single(1)
    create, _ = method.initial_actions()
    assert method.progress({create.request_id: 5}) == 0.5
    assert method.on_trial_closed(create.request_id) == [Shutdown(failure=False)]
    assert method.on_trial_closed(create.request_id) == []
    assert method.progress({}) == 1.0


def test_an_errored_trial_fails_the_search() -> None:
    method = single(1)
    create, _ = method.initial_actions()
    assert method.on_trial_exited_early(create.request_id, "ERRORED") == [Shutdown(failure=True)]


def test_snapshot_survives_json_and_restores_exactly() -> None:
    method = single(3)
    create, _ = method.initial_actions()
    state = json.loads(json.dumps(method.snapshot()))
    again = single(3)
    again.restore(state)
    assert again.request_id == create.request_id
    assert again.rng.random() == method.rng.random()
    assert again.on_trial_closed(create.request_id) == [Shutdown()]


def test_restore_refuses_another_method_state() -> None:
    method = single(3)
    with pytest.raises(ValueError, match="searcher state is for 'random'"):
        method.restore({"name": "random"})


def test_unknown_searcher_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedSearcher, match="searcher.name: 'custom' is not available"):
        build_search_method({"name": "custom", "metric": "loss"}, {}, 0)


def test_an_invalid_searcher_section_names_the_field() -> None:
    with pytest.raises(ConfigError, match="max_trials"):
        build_search_method({"name": "random", "metric": "loss"}, {}, 0)


def test_a_closed_trial_reopens_and_the_search_ends_again_when_it_closes() -> None:
    method = build_search_method(searcher(), SPACE, 1)
    [create, _] = method.initial_actions()
    assert isinstance(create, Create)
    assert method.on_trial_closed(create.request_id) == [Shutdown(failure=False)]
    method.reopen(create.request_id)
    assert not method.shutdown and method.progress({create.request_id: 50}) == 0.5
    assert method.on_trial_exited_early(create.request_id, "ERRORED") == [Shutdown(failure=True)]
    with pytest.raises(ValueError, match="not this search's trial"):
        method.reopen("another")
