"""Drawing hyperparameter values from a space: at random, or every point of a grid."""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Mapping
from typing import Any

from det_hub.config._errors import ConfigError
from det_hub.config.hyperparameters import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    numeric_without_count,
    parse_hyperparameters,
)


def sample_hparams(space: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """Draw one value for every hyperparameter; nested spaces give nested dicts.

    The draw depends only on ``space`` and the state of ``rng``, so a seeded ``rng`` repeats it.

    Args:
        space: A parsed space (``ExperimentConfig.hyperparameters``) or its config form.
        rng: The source of randomness.

    Raises:
        ConfigError: When ``space`` is in config form and not valid.
    """
    return _sample(parse_hyperparameters(space), rng)


def grid_hparams(space: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the grid points of each hyperparameter (their cartesian product).

    Grid points: a const gives its value, a categorical each of its ``vals``; int, double and log
    give ``count`` evenly spaced points from ``minval`` to ``maxval`` inclusive (the midpoint when
    ``count`` is 1; an int range with fewer than ``count`` integers gives each of them).

    Raises:
        ConfigError: When an int, double or log hyperparameter has no ``count``.
    """
    parsed = parse_hyperparameters(space)
    problems = numeric_without_count(parsed)
    if problems:
        raise ConfigError(problems)
    return _grid(parsed)


def _sample(space: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, hp in space.items():
        if isinstance(hp, ConstHP):
            values[name] = copy.deepcopy(hp.val)
        elif isinstance(hp, IntHP):
            values[name] = rng.randint(hp.minval, hp.maxval)
        elif isinstance(hp, DoubleHP):
            values[name] = rng.uniform(hp.minval, hp.maxval)
        elif isinstance(hp, LogHP):
            values[name] = hp.base ** rng.uniform(hp.minval, hp.maxval)
        elif isinstance(hp, CategoricalHP):
            values[name] = copy.deepcopy(rng.choice(hp.vals))
        else:
            values[name] = _sample(hp, rng)
    return values


def _grid(space: Mapping[str, Any]) -> list[dict[str, Any]]:
    names = list(space)
    options = [_points(space[name]) for name in names]
    return [
        {name: copy.deepcopy(value) for name, value in zip(names, combination, strict=True)}
        for combination in itertools.product(*options)
    ]


def _points(hp: Any) -> list[Any]:
    if isinstance(hp, ConstHP):
        return [hp.val]
    if isinstance(hp, CategoricalHP):
        return list(hp.vals)
    if isinstance(hp, IntHP):
        assert hp.count is not None
        return _int_points(hp.minval, hp.maxval, hp.count)
    if isinstance(hp, DoubleHP):
        assert hp.count is not None
        return _float_points(hp.minval, hp.maxval, hp.count)
    if isinstance(hp, LogHP):
        assert hp.count is not None
        return [hp.base**exponent for exponent in _float_points(hp.minval, hp.maxval, hp.count)]
    return _grid(hp)


def _int_points(low: int, high: int, count: int) -> list[int]:
    count = min(count, high - low + 1)
    if count == 1:
        return [(low + high) // 2]
    span, steps = high - low, count - 1
    # Integer arithmetic for round-half-up of low + i * span / steps: exact, and since the step is
    # at least 1 the points are distinct (round-half-even could map two of them to one integer).
    return [low + (2 * i * span + steps) // (2 * steps) for i in range(count)]


def _float_points(low: float, high: float, count: int) -> list[float]:
    if count == 1:
        return [(low + high) / 2]
    step = (high - low) / (count - 1)
    return [low + i * step for i in range(count - 1)] + [high]
