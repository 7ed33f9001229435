"""Hyperparameter spaces: parsing, random sampling and grids."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub.config import (
    CategoricalHP,
    ConfigError,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    Problem,
    grid_hparams,
    sample_hparams,
)
from det_hub.config.hyperparameters import hyperparameters_to_dict, parse_hyperparameters

# -- strategies for valid spaces in config form ---------------------------------------------

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
counts = st.none() | st.integers(min_value=1, max_value=4)
literals = st.none() | st.booleans() | st.integers(-100, 100) | st.text(max_size=5) | finite


@st.composite
def int_hps(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-1000, 1000))
    high = draw(st.integers(low, low + 1000))
    return {"type": "int", "minval": low, "maxval": high, "count": draw(counts)}


@st.composite
def double_hps(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(finite)
    high = draw(finite.filter(lambda x: x > low))
    return {"type": "double", "minval": low, "maxval": high, "count": draw(counts)}


@st.composite
def log_hps(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.floats(-6, 5))
    high = draw(st.floats(-6, 6).filter(lambda x: x > low))
    base = draw(st.sampled_from([2.0, math.e, 10.0]))
    return {"type": "log", "base": base, "minval": low, "maxval": high, "count": draw(counts)}


categorical_hps = st.builds(
    lambda vals: {"type": "categorical", "vals": vals}, st.lists(literals, min_size=1, max_size=4)
)
const_hps = literals | st.builds(lambda v: {"type": "const", "val": v}, literals)
leaf_hps = int_hps() | double_hps() | log_hps() | categorical_hps | const_hps
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
spaces = st.recursive(
    st.dictionaries(names, leaf_hps, max_size=4),
    lambda inner: st.dictionaries(names, leaf_hps | inner, max_size=4),
    max_leaves=10,
)


def check_in_space(space: dict[str, Any], values: dict[str, Any]) -> None:
    assert set(values) == set(space)
    for name, hp in space.items():
        value = values[name]
        if isinstance(hp, ConstHP):
            assert value == hp.val
        elif isinstance(hp, IntHP):
            assert isinstance(value, int)
            assert hp.minval <= value <= hp.maxval
        elif isinstance(hp, DoubleHP):
            assert hp.minval <= value <= hp.maxval
        elif isinstance(hp, LogHP):
            low, high = hp.base**hp.minval, hp.base**hp.maxval
            assert low * (1 - 1e-9) <= value <= high * (1 + 1e-9)
        elif isinstance(hp, CategoricalHP):
            assert value in hp.vals
        else:
            assert isinstance(value, dict)
            check_in_space(hp, value)


# -- parsing ----------------------------------------------------------------------------------


def test_parse_every_form() -> None:
    space = parse_hyperparameters(
        {
            "lr": {"type": "log", "minval": -4, "maxval": -1},
            "layers": {"type": "int", "minval": 1, "maxval": 4, "count": 4},
            "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
            "act": {"type": "categorical", "vals": ["relu", "gelu"], "grid_vals": ["relu"]},
            "batch": 64,
            "tags": ["a", "b"],
            "opt": {"name": {"type": "const", "val": "adam"}, "betas": {"b1": 0.9}},
            "empty": {},
        }
    )
    assert space == {
        "lr": LogHP(base=10.0, minval=-4.0, maxval=-1.0),
        "layers": IntHP(minval=1, maxval=4, count=4),
        "dropout": DoubleHP(minval=0.0, maxval=0.5),
        "act": CategoricalHP(vals=["relu", "gelu"]),
        "batch": ConstHP(val=64),
        "tags": ConstHP(val=["a", "b"]),
        "opt": {"name": ConstHP(val="adam"), "betas": {"b1": ConstHP(val=0.9)}},
        "empty": {},
    }
    assert hyperparameters_to_dict(space)["act"] == {
        "type": "categorical",
        "vals": ["relu", "gelu"],
    }
    assert parse_hyperparameters(space) == space


def test_parse_reports_every_problem_with_relative_paths() -> None:
    with pytest.raises(ConfigError) as info:
        parse_hyperparameters(
            {
                "a": {"type": "int", "minval": 3, "maxval": 1},
                "g": {"b": {"type": "categorical"}, "c": {"type": 5}},
                1: 2,
            }
        )
    assert info.value.problems == [
        Problem("a.maxval", "must be greater than or equal to minval (3)"),
        Problem("g.b.vals", "required"),
        Problem("g.c.type", "must be one of const, int, double, log, categorical"),
        Problem("", "names must be strings, not 1"),
    ]


# -- sampling ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(space=spaces, seed=st.integers(0, 2**32 - 1))
def test_samples_stay_in_the_space_and_repeat_for_a_seed(space: dict[str, Any], seed: int) -> None:
    parsed = parse_hyperparameters(space)
    first = sample_hparams(space, random.Random(seed))
    check_in_space(parsed, first)
    assert sample_hparams(parsed, random.Random(seed)) == first


def test_sample_keeps_nesting_and_known_values() -> None:
    space = {
        "c": 3,
        "n": {"inner": {"type": "int", "minval": 7, "maxval": 7}},
        "cat": {"type": "categorical", "vals": ["only"]},
        "log": {"type": "log", "base": 2, "minval": 3, "maxval": 3.0000001},
    }
    values = sample_hparams(space, random.Random(0))
    assert values["c"] == 3
    assert values["n"] == {"inner": 7}
    assert values["cat"] == "only"
    assert values["log"] == pytest.approx(8.0)


def test_different_seeds_give_different_draws() -> None:
    space = {"x": {"type": "double", "minval": 0, "maxval": 1}}
    draws = {sample_hparams(space, random.Random(seed))["x"] for seed in range(20)}
    assert len(draws) == 20


def test_sampled_values_are_copies() -> None:
    space = parse_hyperparameters({"layers": [64, 32]})
    values = sample_hparams(space, random.Random(1))
    values["layers"].append(16)
    assert space["layers"] == ConstHP(val=[64, 32])


# -- grids ------------------------------------------------------------------------------------


def _grid_size(space: dict[str, Any]) -> int:
    size = 1
    for hp in space.values():
        if isinstance(hp, ConstHP):
            continue
        if isinstance(hp, CategoricalHP):
            size *= len(hp.vals)
        elif isinstance(hp, IntHP):
            assert hp.count is not None
            size *= min(hp.count, hp.maxval - hp.minval + 1)
        elif isinstance(hp, (DoubleHP, LogHP)):
            assert hp.count is not None
            size *= hp.count
        else:
            size *= _grid_size(hp)
    return size


def _with_counts(space: Any) -> Any:
    if isinstance(space, dict) and space.get("type") in ("int", "double", "log"):
        return {**space, "count": space.get("count") or 2}
    if isinstance(space, dict) and "type" not in space:
        return {name: _with_counts(value) for name, value in space.items()}
    return space


@settings(max_examples=200, deadline=None)
@given(space=spaces)
def test_grid_size_is_the_product_of_counts(space: dict[str, Any]) -> None:
    space = _with_counts(space)
    parsed = parse_hyperparameters(space)
    grid = grid_hparams(space)
    assert len(grid) == _grid_size(parsed)
    for point in grid:
        check_in_space(parsed, point)


def test_grid_points() -> None:
    grid = grid_hparams(
        {
            "n": {"type": "int", "minval": 0, "maxval": 10, "count": 3},
            "x": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 2},
            "c": {"type": "categorical", "vals": ["a", "b"]},
            "k": 7,
        }
    )
    assert len(grid) == 3 * 2 * 2
    assert grid[0] == {"n": 0, "x": 0.0, "c": "a", "k": 7}
    assert grid[-1] == {"n": 10, "x": 1.0, "c": "b", "k": 7}
    assert sorted({p["n"] for p in grid}) == [0, 5, 10]


@pytest.mark.parametrize(
    ("hp", "points"),
    [
        ({"type": "int", "minval": 1, "maxval": 4, "count": 4}, [1, 2, 3, 4]),
        ({"type": "int", "minval": 1, "maxval": 4, "count": 10}, [1, 2, 3, 4]),
        ({"type": "int", "minval": 0, "maxval": 5, "count": 4}, [0, 2, 3, 5]),
        ({"type": "int", "minval": 0, "maxval": 3, "count": 3}, [0, 2, 3]),
        ({"type": "int", "minval": 2, "maxval": 9, "count": 1}, [5]),
        ({"type": "int", "minval": 3, "maxval": 3, "count": 2}, [3]),
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 5}, [0.0, 0.25, 0.5, 0.75, 1.0]),
        ({"type": "double", "minval": 0.0, "maxval": 1.0, "count": 1}, [0.5]),
        ({"type": "log", "minval": -3, "maxval": -1, "count": 3}, [0.001, 0.01, 0.1]),
        ({"type": "log", "base": 2, "minval": 1, "maxval": 3, "count": 3}, [2.0, 4.0, 8.0]),
    ],
)
def test_grid_points_per_type(hp: dict[str, Any], points: list[Any]) -> None:
    assert [p["h"] for p in grid_hparams({"h": hp})] == pytest.approx(points)


def test_grid_of_a_const_is_its_value() -> None:
    assert grid_hparams({"h": {"type": "const", "val": {"a": 1}}}) == [{"h": {"a": 1}}]


def test_nested_grid_stays_nested() -> None:
    grid = grid_hparams(
        {"opt": {"lr": {"type": "categorical", "vals": [0.1, 0.01]}, "name": "sgd"}, "empty": {}}
    )
    assert grid == [
        {"opt": {"lr": 0.1, "name": "sgd"}, "empty": {}},
        {"opt": {"lr": 0.01, "name": "sgd"}, "empty": {}},
    ]


def test_empty_space_has_one_grid_point() -> None:
    assert grid_hparams({}) == [{}]


def test_grid_needs_counts() -> None:
    with pytest.raises(ConfigError) as info:
        grid_hparams(
            {
                "a": {"type": "double", "minval": 0, "maxval": 1},
                "g": {"b": {"type": "int", "minval": 0, "maxval": 1}},
                "c": {"type": "categorical", "vals": [1]},
            }
        )
    assert info.value.problems == [
        Problem("a.count", "required by the grid searcher"),
        Problem("g.b.count", "required by the grid searcher"),
    ]
