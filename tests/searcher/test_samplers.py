"""Samplers: random, and optuna's TPE used in process, fed results and restored by replay."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest
from search_driver import Driver

from det_hub.searcher import SamplerUnavailable, SearchMethod, build_search_method
from det_hub.searcher.samplers import RandomSampler, TPESampler, build_sampler

optuna = pytest.importorskip("optuna")

SPACE = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "act": {"type": "categorical", "vals": ["relu", [1, 2], {"k": "v"}, None]},
    "opt": {"name": "adam", "beta": {"type": "double", "minval": 0.8, "maxval": 0.99}},
    "batch": 32,
}


def in_space(hp: dict[str, Any]) -> bool:
    return (
        1e-4 <= hp["lr"] <= 1e-1
        and isinstance(hp["layers"], int)
        and 1 <= hp["layers"] <= 4
        and 0.0 <= hp["dropout"] <= 0.5
        and hp["act"] in ("relu", [1, 2], {"k": "v"}, None)
        and hp["opt"]["name"] == "adam"
        and 0.8 <= hp["opt"]["beta"] <= 0.99
        and hp["batch"] == 32
    )


def loss(hp: dict[str, Any]) -> float:
    return (hp["dropout"] - 0.1) ** 2 + (hp["opt"]["beta"] - 0.9) ** 2 + 0.01 * hp["layers"]


def test_build_sampler_knows_random_and_tpe() -> None:
    assert isinstance(build_sampler("random", SPACE, True), RandomSampler)
    assert isinstance(build_sampler("tpe", SPACE, True), TPESampler)
    with pytest.raises(ValueError, match="searcher.sampler: 'bohb' is not one of random, tpe"):
        build_sampler("bohb", SPACE, True)


def test_tpe_draws_from_the_space_nested_and_with_any_categorical_value() -> None:
    sampler = TPESampler(SPACE, smaller_is_better=True)
    rng = random.Random(0)
    for _ in range(25):
        hp = sampler.sample(rng)
        assert in_space(hp), hp
        sampler.tell(hp, 100, loss(hp))
    assert optuna.logging.get_verbosity() == optuna.logging.WARNING


def test_tpe_learns_where_the_good_values_are() -> None:
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}

    def run(sampler_name: str) -> float:
        sampler = build_sampler(sampler_name, space, smaller_is_better=True)
        rng = random.Random(1)
        distances = []
        for i in range(60):
            hp = sampler.sample(rng)
            sampler.tell(hp, 10, (hp["x"] - 0.3) ** 2)
            if i >= 40:
                distances.append(abs(hp["x"] - 0.3))
        return sum(distances) / len(distances)

    # Uniform draws are 0.29 away from 0.3 on average; TPE's later draws cluster near it.
    assert run("tpe") < 0.1 < run("random")


def test_tpe_maximises_when_larger_is_better() -> None:
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    sampler = TPESampler(space, smaller_is_better=False)
    rng = random.Random(2)
    late = []
    for i in range(50):
        hp = sampler.sample(rng)
        sampler.tell(hp, 10, hp["x"])
        if i >= 35:
            late.append(hp["x"])
    assert sum(late) / len(late) > 0.7


def test_tpe_models_the_longest_length_with_enough_results() -> None:
    sampler = TPESampler({"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}, True)
    for i in range(5):
        sampler.tell({"x": i / 10}, 10, float(i))
    sampler.tell({"x": 0.5}, 40, 1.0)
    # One dimension needs 2 results: 10 has 5, 40 has 1 -> 10.
    assert sampler._budget() == 10
    sampler.tell({"x": 0.6}, 40, 1.0)
    assert sampler._budget() == 40
    # Values from outside the space teach nothing; non-finite metrics neither.
    sampler.tell({"y": 1}, 80, 0.0)
    sampler.tell({"x": 0.1}, 80, float("nan"))
    assert sampler._budget() == 40


def test_tpe_restore_replays_history_so_the_next_draws_match() -> None:
    def play(restore_every: bool) -> list[dict[str, Any]]:
        sampler = TPESampler(SPACE, smaller_is_better=True)
        rng = random.Random(7)
        drawn = []
        for i in range(30):
            if restore_every:
                state = json.loads(json.dumps(sampler.snapshot()))
                sampler = TPESampler(SPACE, smaller_is_better=True)
                sampler.restore(state)
            hp = sampler.sample(rng)
            drawn.append(hp)
            # Results arrive at two lengths, some late: the model's length changes over time.
            sampler.tell(hp, 10 if i % 3 else 40, loss(hp))
        return drawn

    assert play(restore_every=True) == play(restore_every=False)


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "random", "max_trials": 16, "max_concurrent_trials": 3},
        {"name": "adaptive_asha", "max_trials": 24, "max_concurrent_trials": 4, "stop_once": False},
        {"name": "adaptive_asha", "max_trials": 24, "max_concurrent_trials": 4},
    ],
)
def test_a_tpe_search_restored_after_every_event_continues_exactly(
    searcher: dict[str, Any],
) -> None:
    full = {"metric": "loss", "max_length": {"batches": 160}, "sampler": "tpe", **searcher}

    def fresh() -> SearchMethod:
        return build_search_method(full, SPACE, 11)

    def score(hp: Any, length: int) -> float:
        return loss(hp) + 1.0 / length

    straight = Driver(fresh(), score=score, validate_every=40, seed=1).run()
    restarted = Driver(fresh(), score=score, validate_every=40, seed=1, rebuild=fresh).run()
    assert restarted.actions == straight.actions
    assert len(straight.shutdowns) == 1
    assert all(in_space(t.hparams) for t in straight.created)
    history = straight.method.snapshot()["sampler"]["history"]
    assert len(history) >= len(straight.created)  # every finished trial or rung result


def test_tpe_without_optuna_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(SamplerUnavailable, match=r"pip install 'optuna>=3.4'"):
        build_search_method(
            {"name": "random", "metric": "m", "max_trials": 2, "sampler": "tpe"}, SPACE, 0
        )
