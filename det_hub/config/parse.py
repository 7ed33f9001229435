"""Reading a config (an experiment's, a command's) from YAML text (or already loaded data)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from det_hub.config._errors import ConfigError, Problem, problems_from_validation_error
from det_hub.config._model import ModelT
from det_hub.config.experiment import ExperimentConfig
from det_hub.config.limited_yaml import (
    LOCAL_LIMITS,
    MAX_DEPTH_CEILING,
    ConfigLimits,
    check_depth,
    load_yaml,
)


def parse_experiment_config(source: str | bytes | Mapping[str, Any],
                            limits: ConfigLimits = LOCAL_LIMITS) -> ExperimentConfig:
    """Parse and validate an experiment config, in Determined's older or 0.38 form.

    Args:
        source: YAML text (``str`` or UTF-8 ``bytes``), or the already loaded mapping.
        limits: The bounds YAML text must keep (size, alias expansion, nesting); the master
            passes its settings'. The default, :data:`LOCAL_LIMITS`, is for configs no
            master setting applies to (a user's own file). A mapping is held only to the
            highest nesting any setting allows (200 levels).

    Returns:
        The config with every default filled in.

    Raises:
        ConfigLimitError: Past one of ``limits`` (a :class:`ConfigError` too).
        ConfigError: Listing every problem found, each with the dotted path of its setting.
    """
    return parse_model(ExperimentConfig, source, limits)


def parse_model(model: type[ModelT], source: str | bytes | Mapping[str, Any],
                limits: ConfigLimits = LOCAL_LIMITS) -> ModelT:
    """Parse YAML text (or a loaded mapping) under ``limits`` and validate it as the config
    ``model``.

    Raises:
        ConfigLimitError: Past one of ``limits`` (a :class:`ConfigError` too).
        ConfigError: Listing every problem found, each with the dotted path of its setting.
    """
    data = _load(source, limits)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation_error(exc, list(model.model_fields))) from None


def _load(source: str | bytes | Mapping[str, Any], limits: ConfigLimits) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        # Already loaded (from the store, or merged from checked parts): held only to the
        # ceiling past which validating and copying it could exhaust Python's recursion, so
        # that a config stored under a higher max_depth still reads.
        check_depth(source, dataclasses.replace(limits, max_depth=MAX_DEPTH_CEILING))
        return source
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                [Problem("", f"the config is not UTF-8 text ({exc.reason})")]
            ) from None
    if not isinstance(source, str):
        raise ConfigError(
            [Problem("", f"expected YAML text or a mapping, not {type(source).__name__}")]
        )
    try:
        data = load_yaml(source, limits)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([Problem("", _describe_yaml_error(exc))]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([Problem("", f"invalid YAML: {exc}")]) from None
    if data is None:
        raise ConfigError([Problem("", "the config is empty; expected a mapping of settings")])
    if not isinstance(data, Mapping):
        kind = _KINDS.get(type(data), type(data).__name__)
        raise ConfigError([Problem("", f"the config must be a mapping of settings, not {kind}")])
    return data


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "cannot be read"
    if mark is None:
        return f"invalid YAML: {what}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}"
