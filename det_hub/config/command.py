"""Task configs: what ``det-hub command run`` runs, and on which slots and in what container
a command, notebook, shell or TensorBoard runs.

Determined's command config, less what only its Kubernetes and PBS back ends read; notebooks,
shells and TensorBoards take the same settings without ``entrypoint`` (they run a Jupyter server,
an SSH server or a TensorBoard)::

    entrypoint: ["python3", "prepare.py"]   # or one string, split as a shell would
    description: prepare the data
    resources: {slots: 1, resource_pool: default, priority: 42}
    environment: {image: ..., environment_variables: ["A=1"]}
    bind_mounts: [{host_path: /data, container_path: /data, read_only: true}]
    idle_timeout: 30m
    slurm: {sbatch_args: ["--time=1:00:00"]}   # where the pool is a Slurm partition

``idle_timeout`` frees slots a command holds while doing nothing: a running command that
writes no line to stdout or stderr for that long is killed. It is counted from when the
command starts running (time in the queue does not count), every line of output starts it
again, and a master restart starts it again for the commands it adopts. For notebooks, shells and TensorBoards, use through
the master's proxy counts as well (a request, a WebSocket message, bytes through an SSH tunnel),
and so does a notebook kernel that is running a cell. It is a number of seconds, or a duration
such as ``90s``, ``30m``, ``2h`` or ``1d``; without it a task may be idle for as long as it likes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field

from det_hub.config._errors import Problem, fail
from det_hub.config._model import ConfigModel
from det_hub.config.environment import BindMount, EnvironmentConfig
from det_hub.config.experiment import check_command
from det_hub.config.limited_yaml import LOCAL_LIMITS, ConfigLimits
from det_hub.config.parse import parse_model
from det_hub.config.resources import _pool_name, _size
from det_hub.config.slurm import SlurmConfig
from det_hub.defaults import DEFAULT_RESOURCE_POOL, DEFAULT_SLOTS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: int | float | str) -> float:
    """Seconds from a duration: a number of seconds, or ``'90s'``, ``'30m'``, ``'2h'``, ``'1d'``.

    Raises:
        ValueError: Not a duration greater than zero.
    """
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds or a duration such as '30m'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ValueError(f"{value!r} is not a duration such as 90s, 30m, 2h or 1d")
        seconds = float(match.group(1)) * _SECONDS[(match.group(2) or "s").lower()]
    if not seconds > 0:
        raise ValueError("must be greater than 0")
    return seconds


def _duration(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        fail("must be a number of seconds or a duration such as '30m'")
    try:
        parse_duration(value)
    except ValueError as e:
        fail(str(e))
    return value


def _entrypoint(value: Any) -> Any:
    return check_command(value, "a command: a string, or a list of its arguments")


class CommandResources(ConfigModel):
    """Slots and scheduling of a command.

    Attributes:
        slots: Slots (GPUs, or CPU groups on CPU agents) the command holds while it runs. At
            least 1: the scheduler places every task on slots of its own.
        priority: 1 (highest) to 99; None for the default, 42
            (:data:`det_hub.defaults.DEFAULT_PRIORITY`).
    """

    slots: int = Field(default=DEFAULT_SLOTS, ge=1)
    resource_pool: Annotated[str, BeforeValidator(_pool_name)] = DEFAULT_RESOURCE_POOL
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float = Field(default=1.0, gt=0)
    shm_size: Annotated[int | str | None, BeforeValidator(_size)] = None
    devices: list[Any] = []


class TaskConfig(ConfigModel):
    """A validated notebook, shell or TensorBoard config with its defaults filled in (a command
    config is one with an ``entrypoint``); see the module's docstring."""

    ignored_keys: ClassVar[frozenset[str]] = frozenset({"pbs"})

    description: str = ""
    resources: CommandResources = CommandResources()
    environment: EnvironmentConfig = EnvironmentConfig()
    bind_mounts: list[BindMount] = []
    idle_timeout: Annotated[int | float | str | None, BeforeValidator(_duration)] = None
    slurm: SlurmConfig | None = None

    @property
    def idle_timeout_seconds(self) -> float | None:
        return parse_duration(self.idle_timeout) if self.idle_timeout is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The config with defaults filled, as JSON-serialisable data that parses back equal."""
        return self.model_dump(mode="json")


class CommandConfig(TaskConfig):
    """A validated command config with its defaults filled in; see the module's docstring."""

    entrypoint: Annotated[str | list[str], BeforeValidator(_entrypoint)]

    def argv(self) -> list[str]:
        """The command to run, split as a shell would when it is one string."""
        if isinstance(self.entrypoint, list):
            return list(self.entrypoint)
        return shlex.split(self.entrypoint)

    def _semantic_problems(self) -> list[Problem]:
        if isinstance(self.entrypoint, str):
            try:
                if not shlex.split(self.entrypoint):
                    return [Problem("entrypoint", "must not be empty")]
            except ValueError as e:
                return [Problem("entrypoint", f"cannot be split into arguments: {e}")]
        return []


def parse_command_config(source: str | bytes | Mapping[str, Any],
                         limits: ConfigLimits = LOCAL_LIMITS) -> CommandConfig:
    """Parse and validate a command config.

    Args:
        source: YAML text (``str`` or UTF-8 ``bytes``), or the already loaded mapping.
        limits: The bounds YAML text must keep (size, alias expansion, nesting).

    Raises:
        ConfigLimitError: Past one of ``limits`` (a :class:`ConfigError` too).
        ConfigError: Listing every problem found, each with the dotted path of its setting.
    """
    return parse_model(CommandConfig, source, limits)


def parse_task_config(source: str | bytes | Mapping[str, Any],
                      limits: ConfigLimits = LOCAL_LIMITS) -> TaskConfig:
    """Parse and validate a notebook, shell or TensorBoard config (no ``entrypoint``).

    Raises:
        ConfigLimitError, ConfigError: As :func:`parse_command_config`.
    """
    return parse_model(TaskConfig, source, limits)


__all__ = ["CommandConfig", "CommandResources", "TaskConfig", "parse_command_config",
           "parse_duration", "parse_task_config"]
