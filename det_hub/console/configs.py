"""Reading experiment and task configs from files and ``--config KEY=VALUE`` options, with the
mistakes a user can make turned into a :class:`~det_hub.console.UserError`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from det_hub.config import ConfigError, overrides_from
from det_hub.console.errors import UserError


def read_config(path: str) -> str:
    """Reads an experiment config file, turning file errors into a :class:`UserError`."""
    config_path = Path(path)
    try:
        return config_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"config file {path} not found") from None
    except IsADirectoryError:
        raise UserError(f"config file {path} is a directory, not a YAML file") from None
    except UnicodeDecodeError:
        raise UserError(f"config file {path} is not UTF-8 text") from None
    except OSError as exc:
        raise UserError(f"cannot read config file {path}: {exc.strerror or exc}") from None


def read_config_mapping(path: str) -> dict[str, Any]:
    """A config file's settings, for merging overrides into (see :func:`read_config`)."""
    try:
        loaded = yaml.safe_load(read_config(path))
    except yaml.YAMLError as e:
        raise UserError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(loaded, dict):
        raise UserError(f"config file {path} must be a mapping of settings")
    return loaded


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings ``--config-file`` and ``--config KEY=VALUE`` change, as a partial config."""
    file_text = read_config(args.config_file) if getattr(args, "config_file", None) else None
    try:
        return overrides_from(args.overrides or [], file_text)
    except ConfigError as e:
        raise UserError(str(e)) from None


__all__ = ["config_overrides", "read_config", "read_config_mapping"]
