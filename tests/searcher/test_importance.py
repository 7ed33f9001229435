"""Hyperparameter importance: optuna's fANOVA over a search's trials, on det_hub's spaces."""

from __future__ import annotations

import math
import random
import sys
from typing import Any

import pytest

from det_hub.searcher.importance import ImportanceUnavailable, parameter_importance

SPACE = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": 0},
    "width": {"type": "int", "minval": 8, "maxval": 512},
    "optimizer": {"type": "categorical", "vals": ["sgd", {"name": "adam", "beta": 0.9}]},
    "head": {"dropout": {"type": "double", "minval": 0, "maxval": 0.5}},
    "epochs": 3,
}


def trials(n: int, metric: Any, seed: int = 0) -> list[tuple[dict[str, Any], float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        hparams = {"lr": 10 ** rng.uniform(-4, 0), "width": rng.randint(8, 512),
                   "optimizer": rng.choice(["sgd", {"name": "adam", "beta": 0.9}]),
                   "head": {"dropout": rng.uniform(0, 0.5)}, "epochs": 3}
        out.append((hparams, metric(hparams, rng)))
    return out


def test_the_hyperparameter_the_metric_follows_explains_most_of_it() -> None:
    results = trials(24, lambda h, rng: math.log10(h["lr"]) ** 2 + rng.gauss(0, 0.01))
    shares = parameter_importance(SPACE, results, smaller_is_better=True)
    # Every varying hyperparameter, nested ones by dotted name; the constant is left out.
    assert set(shares) == {"lr", "width", "optimizer", "head.dropout"}
    assert list(shares)[0] == "lr" and shares["lr"] > 0.8
    assert sum(shares.values()) == pytest.approx(1)
    assert list(shares.values()) == sorted(shares.values(), reverse=True)


def test_a_categorical_of_any_json_values_is_weighed() -> None:
    results = trials(24, lambda h, rng: (1.0 if h["optimizer"] == "sgd" else 0.0)
                     + rng.gauss(0, 0.01), seed=1)
    shares = parameter_importance(SPACE, results, smaller_is_better=False)
    assert list(shares)[0] == "optimizer" and shares["optimizer"] > 0.8


def test_too_little_to_tell_gives_nothing() -> None:
    [one] = trials(1, lambda h, rng: 0.5)
    assert parameter_importance(SPACE, [one], True) == {}
    # Trials whose metric is not finite, or whose hyperparameters are not from the space,
    # do not count.
    assert parameter_importance(SPACE, [one, (one[0], math.nan), ({"lr": 0.1}, 0.2)],
                                True) == {}
    # The same metric for every trial: nothing to explain.
    same = [(hparams, 0.125) for hparams, _ in trials(4, lambda h, rng: 0.0)]
    assert parameter_importance(SPACE, same, True) == {}
    # Two trials that differ in one hyperparameter only: that one explains everything.
    other = ({**one[0], "width": one[0]["width"] + 1}, 0.7)
    assert parameter_importance(SPACE, [one, other], True) == {"width": pytest.approx(1)}


def test_without_scikit_learn_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ImportanceUnavailable, match=r"scikit-learn.*det_hub\[importance\]"):
        parameter_importance(SPACE, trials(4, lambda h, rng: 0.5), True)
