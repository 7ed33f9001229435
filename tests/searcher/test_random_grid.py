"""random and grid: fixed-length trials, max_concurrent_trials at a time."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_driver import Driver

from det_hub.searcher import (
    Create,
    GridSearch,
    RandomSearch,
    SearchMethod,
    Shutdown,
    ValidateAfter,
    build_search_method,
)

SPACE = {
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3},
    "n": {"type": "int", "minval": 1, "maxval": 8, "count": 2},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "wd": {"type": "log", "base": 10, "minval": -4, "maxval": -2, "count": 1},
    "fixed": 7,
}


def build(name: str, seed: int = 0, **searcher: Any) -> SearchMethod:
    config = {"name": name, "metric": "loss", "max_length": {"batches": 100}, **searcher}
    return build_search_method(config, SPACE, seed)


def creates(actions: list[Any]) -> list[Create]:
    return [a for a in actions if isinstance(a, Create)]


def check_finished(driver: Driver, failure: bool = False) -> None:
    assert driver.shutdowns == [Shutdown(failure=failure)]
    assert isinstance(driver.actions[-1], Shutdown)
    assert all(t.closed for t in driver.created)
    assert all(b <= a for b, a in zip(driver.progress, driver.progress[1:], strict=False))
    assert driver.progress[-1] == 1.0


def fault_on(indices: Mapping[int, str]) -> Any:
    return lambda index, hparams, length: indices.get(index)


# --- random -----------------------------------------------------------------------------
@pytest.mark.parametrize(("max_concurrent", "expected"), [(0, 10), (3, 3), (16, 10)])
def test_random_starts_max_concurrent_trials_and_0_means_all(
    max_concurrent: int, expected: int
) -> None:
    method = build("random", max_trials=10, max_concurrent_trials=max_concurrent)
    actions = method.initial_actions()
    assert len(creates(actions)) == expected
    # Every Create is followed by its target, the whole max_length.
    for create, target in zip(actions[::2], actions[1::2], strict=True):
        assert isinstance(create, Create)
        assert target == ValidateAfter(create.request_id, 100)
    driver = Driver(build("random", max_trials=10, max_concurrent_trials=max_concurrent)).run()
    check_finished(driver)
    assert len(driver.created) == 10
    assert driver.max_training == expected
    assert all(t.done == 100 and t.exit_reason is None for t in driver.created)


def test_random_hparams_come_from_the_space() -> None:
    driver = Driver(build("random", max_trials=20)).run()
    for trial in driver.created:
        hp = trial.hparams
        assert 0.0 <= hp["x"] <= 1.0 and 1 <= hp["n"] <= 8 and hp["act"] in ("relu", "tanh")
        assert 1e-4 <= hp["wd"] <= 1e-2 and hp["fixed"] == 7


def test_random_replaces_invalid_hyperparameters_without_counting_them() -> None:
    method = build("random", max_trials=8, max_concurrent_trials=2)
    driver = Driver(method, fault=fault_on({0: "INVALID_HP", 3: "INVALID_HP"})).run()
    check_finished(driver)
    assert len(driver.created) == 10
    assert sum(1 for t in driver.created if t.exit_reason is None) == 8
    assert driver.max_training <= 2


def test_random_counts_errored_and_user_stopped_trials_as_done() -> None:
    method = build("random", max_trials=8, max_concurrent_trials=2)
    driver = Driver(method, fault=fault_on({1: "ERRORED", 2: "USER_REQUESTED_STOP"})).run()
    check_finished(driver)
    assert len(driver.created) == 8


def test_random_fails_when_every_trial_errors() -> None:
    method = build("random", max_trials=4, max_concurrent_trials=2)
    driver = Driver(method, fault=lambda index, hparams, length: "ERRORED").run()
    check_finished(driver, failure=True)
    assert len(driver.created) == 4


def test_random_progress_counts_units_then_finished_trials() -> None:
    method = build("random", max_trials=4, max_concurrent_trials=2)
    a, b = (c.request_id for c in creates(method.initial_actions()))
    assert method.progress({a: 50, b: 100}) == pytest.approx(150 / 400)
    method.on_trial_exited_early(a, "ERRORED")  # done: counts as trained in full
    assert method.progress({a: 50, b: 100}) == pytest.approx(200 / 400)


def test_random_without_a_length_has_no_targets_and_counts_trials() -> None:
    method = build_search_method(
        {"name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": 1},
        SPACE,
        0,
    )
    [create] = method.initial_actions()
    assert isinstance(create, Create) and method.target_length(create.request_id) is None
    assert method.on_validation(create.request_id, 0.5, 37) == []
    [second] = method.on_trial_closed(create.request_id)
    assert isinstance(second, Create)
    assert method.progress({}) == 0.5
    assert method.on_trial_closed(second.request_id) == [Shutdown()]


@pytest.mark.parametrize("name", ["random", "grid"])
def test_restoring_after_every_event_continues_exactly(name: str) -> None:
    def fresh() -> SearchMethod:
        return build(name, seed=9, max_trials=12, max_concurrent_trials=3)

    faults = fault_on({2: "ERRORED", 4: "INVALID_HP", 5: "USER_REQUESTED_STOP"})
    straight = Driver(fresh(), validate_every=30, fault=faults, seed=2).run()
    restarted = Driver(fresh(), validate_every=30, fault=faults, seed=2, rebuild=fresh).run()
    check_finished(straight)
    assert restarted.actions == straight.actions
    assert restarted.progress == straight.progress


def test_random_same_seed_same_trials_other_seed_other_trials() -> None:
    def hparams(seed: int) -> list[Any]:
        return [
            dict(c.hparams) for c in creates(build("random", seed, max_trials=5).initial_actions())
        ]

    assert hparams(1) == hparams(1)
    assert hparams(1) != hparams(2)


# --- grid -------------------------------------------------------------------------------
def test_grid_runs_the_whole_product_in_order_and_ignores_max_trials() -> None:
    method = build("grid", max_trials=2, max_concurrent_trials=4)
    assert isinstance(method, GridSearch)
    driver = Driver(method, seed=1).run()
    check_finished(driver)
    points = [t.hparams for t in driver.created]
    assert len(points) == 3 * 2 * 2 * 1  # x: 3 points, n: 2, act: 2, wd: 1 (its midpoint)
    assert points[0] == {"x": 0.0, "n": 1, "act": "relu", "wd": pytest.approx(1e-3), "fixed": 7}
    assert points[-1] == {"x": 1.0, "n": 8, "act": "tanh", "wd": pytest.approx(1e-3), "fixed": 7}
    assert len({json.dumps(p, sort_keys=True) for p in points}) == 12
    assert driver.max_training == 4


def test_grid_does_not_replace_invalid_points() -> None:
    method = build("grid", max_concurrent_trials=0)
    assert len(creates(method.initial_actions())) == 12
    driver = Driver(build("grid"), fault=fault_on({0: "INVALID_HP", 1: "ERRORED"})).run()
    check_finished(driver)
    assert len(driver.created) == 12


def test_random_and_grid_are_registered_under_their_names() -> None:
    assert isinstance(build("random", max_trials=1), RandomSearch)
    assert isinstance(build("grid"), GridSearch)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["random", "grid"]),
    max_trials=st.integers(1, 20),
    max_concurrent=st.integers(0, 5),
    validate_every=st.none() | st.integers(1, 120),
    faults=st.dictionaries(
        st.integers(0, 25), st.sampled_from(["ERRORED", "INVALID_HP", "USER_REQUESTED_STOP"])
    ),
    seed=st.integers(0, 3),
)
def test_any_random_or_grid_search_ends_cleanly(
    name: str,
    max_trials: int,
    max_concurrent: int,
    validate_every: int | None,
    faults: dict[int, str],
    seed: int,
) -> None:
    m = build(name, seed, max_trials=max_trials, max_concurrent_trials=max_concurrent)
    driver = Driver(m, validate_every=validate_every, fault=fault_on(faults), seed=seed).run()
    errored = [t for t in driver.created if t.exit_reason == "ERRORED"]
    check_finished(driver, failure=len(errored) == len(driver.created))
    invalid = sum(1 for t in driver.created if t.exit_reason == "INVALID_HP")
    if name == "random":
        assert len(driver.created) - invalid == max_trials
    else:
        assert len(driver.created) == 12
    assert driver.max_training <= (max_concurrent or len(driver.created))


@pytest.mark.parametrize("name", ["random", "grid"])
def test_a_failed_trial_reopens_and_the_search_shuts_down_once_it_closes(name: str) -> None:
    extra = {"max_trials": 3} if name == "random" else {}
    method = build(name, max_concurrent_trials=0, **extra)
    ids = [c.request_id for c in creates(method.initial_actions())]
    for rid in ids[:-1]:
        assert method.on_trial_closed(rid) == []
    assert method.on_trial_exited_early(ids[-1], "ERRORED") == [Shutdown(failure=False)]
    method.reopen(ids[-1])
    assert not method.shutdown and method.target_length(ids[-1]) == 100
    method.reopen(ids[-1])  # twice is once
    assert method.on_trial_closed(ids[-1]) == [Shutdown(failure=False)]
    assert method.errored == set()
    with pytest.raises(ValueError, match="not one of this search's trials"):
        method.reopen("unknown")


def test_a_replaced_invalid_trial_cannot_reopen() -> None:
    method = build("random", max_trials=2, max_concurrent_trials=1)
    [first] = creates(method.initial_actions())
    assert creates(method.on_trial_exited_early(first.request_id, "INVALID_HP"))
    with pytest.raises(ValueError, match="replaced by another trial"):
        method.reopen(first.request_id)
