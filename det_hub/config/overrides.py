"""Changing a config from the command line: ``--config searcher.max_length.batches=500``.

An override names a setting by its dotted path and gives its value in YAML, so numbers, lists
and mappings come out typed (``max_restarts=2``, ``environment.environment_variables=['A=1']``).
Overrides and override files are merged into a config mapping; the result is validated like any
other config by :func:`det_hub.config.parse_experiment_config`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from det_hub.config._errors import ConfigError, Problem
from det_hub.config.limited_yaml import LOCAL_LIMITS, ConfigLimits, load_yaml

_EXPONENT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def parse_override(text: str, limits: ConfigLimits = LOCAL_LIMITS) -> dict[str, Any]:
    """``"a.b.c=value"`` as the nested mapping ``{"a": {"b": {"c": value}}}``.

    Raises:
        ConfigLimitError: The value passes one of ``limits`` (size, aliases, nesting).
        ConfigError: No ``=``, an empty key or key part, or a value that is not YAML.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError([Problem("", f"--config {text!r}: expected KEY=VALUE, such as "
                                       "searcher.max_length.batches=500")])
    parts = key.split(".")
    if any(not p for p in parts):
        raise ConfigError([Problem(key, f"--config {text!r}: empty part in the key")])
    try:
        value = load_yaml(raw, limits, what=f"--config {key}") if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError([Problem(key, f"--config {text!r}: the value is not YAML")]) from None
    if isinstance(value, str) and _EXPONENT_NUMBER.match(value):
        value = float(value)  # YAML 1.1 reads 1e-3 as a string; nobody means that here
    nested: dict[str, Any] = {parts[-1]: value}
    for part in reversed(parts[:-1]):
        nested = {part: nested}
    return nested


def merge_config(base: Mapping[str, Any], *changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with each of ``changes`` laid over it in turn; ``base`` is not modified.

    Mappings merge key by key; any other value (lists included) replaces what was there, and
    ``None`` replaces too, so an override can reset a setting to its default.
    """
    merged = copy.deepcopy(dict(base))
    for change in changes:
        _merge_into(merged, change)
    return merged


def overrides_from(args: Iterable[str], file_text: str | None = None,
                   limits: ConfigLimits = LOCAL_LIMITS) -> dict[str, Any]:
    """The overrides of a command line: an optional YAML file (a partial config), then each
    ``KEY=VALUE`` in order, later ones winning.

    Raises:
        ConfigLimitError: The file or a value passes one of ``limits``.
        ConfigError: The file is not a YAML mapping, or an override cannot be read.
    """
    changes: list[Mapping[str, Any]] = []
    if file_text is not None:
        try:
            loaded = load_yaml(file_text, limits, what="--config-file")
        except yaml.YAMLError as exc:
            raise ConfigError([Problem("", f"--config-file: invalid YAML: {exc}")]) from None
        if loaded is not None and not isinstance(loaded, Mapping):
            raise ConfigError([Problem("", "--config-file: must be a mapping of settings")])
        changes.append(loaded or {})
    changes.extend(parse_override(a, limits) for a in args)
    return merge_config({}, *changes)


def _merge_into(target: dict[str, Any], change: Mapping[str, Any]) -> None:
    for key, value in change.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _merge_into(current, value)
        else:
            target[key] = copy.deepcopy(value)
