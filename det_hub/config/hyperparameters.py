"""Hyperparameter spaces: the ``hyperparameters`` section of an experiment config.

A space maps names to hyperparameters. A value is one of

* a mapping with ``type`` (``const``, ``int``, ``double``, ``log``, ``categorical``),
* a mapping without ``type``: a nested space, whose sampled values stay nested,
* anything else: shorthand for a constant (``learning_rate: 1.0``).

A parsed space is a plain ``dict`` whose values are :data:`Hyperparameter` objects or nested
dicts of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from det_hub.config._errors import ConfigError, Problem, join_path, not_one_of_message
from det_hub.config._model import ConfigModel, validate_section


class ConstHP(ConfigModel):
    """A fixed value (``type: const``, ``val``)."""

    drop_none: ClassVar[bool] = False

    type: Literal["const"] = "const"
    val: Any


class IntHP(ConfigModel):
    """An integer from ``minval`` to ``maxval`` inclusive; ``count`` points for grid search."""

    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)

    def _semantic_problems(self) -> list[Problem]:
        if self.maxval < self.minval:
            return [Problem("maxval", f"must be greater than or equal to minval ({self.minval})")]
        return []


class _FloatRange(ConfigModel):
    """What ``double`` and ``log`` share: a float range and a grid ``count``."""

    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)

    def _semantic_problems(self) -> list[Problem]:
        if self.maxval <= self.minval:
            return [Problem("maxval", f"must be greater than minval ({self.minval})")]
        return []


class DoubleHP(_FloatRange):
    """A float between ``minval`` and ``maxval``; ``count`` points for grid search."""

    type: Literal["double"] = "double"


class LogHP(_FloatRange):
    """``base ** x`` for an exponent ``x`` between ``minval`` and ``maxval``."""

    type: Literal["log"] = "log"
    base: float = Field(default=10.0, gt=0)


class CategoricalHP(ConfigModel):
    """One of ``vals``. Determined's ``grid_vals`` is accepted and ignored: grid uses ``vals``."""

    ignored_keys: ClassVar[frozenset[str]] = frozenset({"grid_vals"})

    type: Literal["categorical"] = "categorical"
    vals: list[Any] = Field(min_length=1)


Hyperparameter = ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP
"""Any one hyperparameter."""

HP_TYPES: dict[str, type[ConfigModel]] = {
    "const": ConstHP,
    "int": IntHP,
    "double": DoubleHP,
    "log": LogHP,
    "categorical": CategoricalHP,
}

_HP_CLASSES = (ConstHP, IntHP, DoubleHP, LogHP, CategoricalHP)


def parse_hyperparameters(raw: Any) -> dict[str, Any]:
    """Parse a hyperparameter space; already parsed spaces come back unchanged.

    Raises:
        ConfigError: Every problem, with paths relative to the space (``"lr.maxval"``).
    """
    problems: list[Problem] = []
    space = _parse_space(raw, "", problems)
    if problems:
        raise ConfigError(problems)
    return space


def hyperparameters_to_dict(space: Mapping[str, Any]) -> dict[str, Any]:
    """The config form of a parsed space: every hyperparameter as a mapping with ``type``."""
    return {
        name: value.model_dump(mode="json")
        if isinstance(value, _HP_CLASSES)
        else hyperparameters_to_dict(value)
        for name, value in space.items()
    }


def numeric_without_count(space: Mapping[str, Any], prefix: str = "") -> list[Problem]:
    """Problems for int, double and log hyperparameters that grid search cannot enumerate."""
    problems = []
    for name, value in space.items():
        path = join_path(prefix, name)
        if isinstance(value, (IntHP, DoubleHP, LogHP)):
            if value.count is None:
                problems.append(Problem(join_path(path, "count"), "required by the grid searcher"))
        elif isinstance(value, Mapping):
            problems.extend(numeric_without_count(value, path))
    return problems


def _parse_space(raw: Any, path: str, problems: list[Problem]) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        problems.append(Problem(path, "must be a mapping of names to hyperparameters"))
        return {}
    space: dict[str, Any] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            problems.append(Problem(path, f"names must be strings, not {name!r}"))
            continue
        here = join_path(path, name)
        if isinstance(value, _HP_CLASSES):
            space[name] = value
        elif isinstance(value, Mapping) and "type" in value:
            parsed = _parse_one(value, here, problems)
            if parsed is not None:
                space[name] = parsed
        elif isinstance(value, Mapping):
            space[name] = _parse_space(value, here, problems)
        else:
            space[name] = ConstHP(val=value)
    return space


def _parse_one(raw: Mapping[str, Any], path: str, problems: list[Problem]) -> Any:
    kind = raw["type"]
    model = HP_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        problems.append(Problem(join_path(path, "type"), not_one_of_message(kind, list(HP_TYPES))))
        return None
    try:
        return validate_section(model, raw)
    except ConfigError as exc:
        problems.extend(Problem(join_path(path, p.path), p.message) for p in exc.problems)
        return None
