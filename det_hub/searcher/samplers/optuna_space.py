"""A det_hub hyperparameter space as optuna sees one: what the ``tpe`` sampler asks optuna to
sample from, and what parameter importance (:mod:`det_hub.searcher.importance`) hands to
optuna's evaluators.

The space maps onto optuna distributions: int → ``IntDistribution``, double →
``FloatDistribution``, log → ``FloatDistribution(log=True)`` from ``base**minval`` to
``base**maxval``, categorical → ``CategoricalDistribution`` over the indices of ``vals`` (so that
any JSON value can be a choice); const hyperparameters stay out. Nested spaces are flattened to
dotted names and rebuilt.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from det_hub.config.hyperparameters import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    IntHP,
    LogHP,
    parse_hyperparameters,
)


def import_optuna(unavailable: Exception) -> Any:
    """optuna, quiet; raises ``unavailable`` where it is not installed."""
    try:
        import optuna
    except ImportError:
        raise unavailable from None
    # Optuna logs every trial at INFO; the master's log is not the place for it.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class OptunaSpace:
    """The non-constant hyperparameters of a space as optuna distributions, by dotted name.

    Raises:
        ValueError: Two hyperparameters share a dotted name once nested names are joined.
    """

    def __init__(self, optuna: Any, space: Mapping[str, Any]) -> None:
        self.parsed = parse_hyperparameters(space)
        #: Dotted name → (path in the nested space, hyperparameter).
        self.dims: dict[str, tuple[tuple[str, ...], Any]] = {}
        for path, hp in _leaves(self.parsed, ()):
            if isinstance(hp, ConstHP):
                continue
            key = ".".join(path)
            if key in self.dims:
                raise ValueError(
                    f"hyperparameters: {key!r} names two hyperparameters once nested names are "
                    "joined with dots")
            self.dims[key] = (path, hp)
        self.distributions = {key: _distribution(optuna.distributions, hp)
                              for key, (_, hp) in self.dims.items()}

    def params(self, hparams: Mapping[str, Any]) -> dict[str, Any] | None:
        """The optuna params of a trial's hyperparameters, or None if they are not from the
        space."""
        params: dict[str, Any] = {}
        for key, (path, hp) in self.dims.items():
            value: Any = hparams
            for name in path:
                if not isinstance(value, Mapping) or name not in value:
                    return None
                value = value[name]
            if isinstance(hp, CategoricalHP):
                matches = [i for i, val in enumerate(hp.vals) if val == value]
                if not matches:
                    return None
                params[key] = matches[0]
            elif isinstance(hp, IntHP):
                params[key] = min(max(int(value), hp.minval), hp.maxval)
            else:
                # Clamp: uniform() may land a rounding error outside its bounds.
                low, high = _log_bounds(hp) if isinstance(hp, LogHP) else (hp.minval, hp.maxval)
                params[key] = min(max(float(value), low), high)
        return params

    def hparams(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The nested hyperparameters of optuna params: the inverse of :meth:`params`."""
        return _rebuild(self.parsed, params, self.dims, ())


def _distribution(distributions: Any, hp: Any) -> Any:
    if isinstance(hp, IntHP):
        return distributions.IntDistribution(hp.minval, hp.maxval)
    if isinstance(hp, DoubleHP):
        return distributions.FloatDistribution(hp.minval, hp.maxval)
    if isinstance(hp, LogHP):
        low, high = _log_bounds(hp)
        return distributions.FloatDistribution(low, high, log=True)
    if isinstance(hp, CategoricalHP):
        return distributions.CategoricalDistribution(list(range(len(hp.vals))))
    raise TypeError(f"no optuna distribution for {hp!r}")


def _log_bounds(hp: LogHP) -> tuple[float, float]:
    return hp.base**hp.minval, hp.base**hp.maxval


def _leaves(space: Mapping[str, Any], prefix: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, value in space.items():
        if isinstance(value, Mapping):
            found.extend(_leaves(value, (*prefix, name)))
        else:
            found.append(((*prefix, name), value))
    return found


def _rebuild(
    space: Mapping[str, Any],
    params: Mapping[str, Any],
    dims: Mapping[str, tuple[tuple[str, ...], Any]],
    prefix: tuple[str, ...],
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, hp in space.items():
        path = (*prefix, name)
        if isinstance(hp, Mapping):
            values[name] = _rebuild(hp, params, dims, path)
        elif isinstance(hp, ConstHP):
            values[name] = copy.deepcopy(hp.val)
        else:
            value = params[".".join(path)]
            if isinstance(hp, CategoricalHP):
                value = copy.deepcopy(hp.vals[value])
            values[name] = value
    return values
