"""The experiment config as a whole, and the checks that involve more than one section."""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, ClassVar, Literal, TypeGuard

from pydantic import BeforeValidator, Field, field_serializer

from det_hub.config._errors import Problem, fail, problems_error
from det_hub.config._length import Length, LengthUnit
from det_hub.config._model import ConfigModel, choice, reraise_as_problems
from det_hub.config.environment import BindMount, EnvironmentConfig
from det_hub.config.hyperparameters import (
    hyperparameters_to_dict,
    numeric_without_count,
    parse_hyperparameters,
)
from det_hub.config.resources import ResourcesConfig
from det_hub.config.searcher import SearcherConfig
from det_hub.config.slurm import SlurmConfig
from det_hub.config.storage import CheckpointStorage, parse_checkpoint_storage

# "package.module:Class" (a nested "Outer.Inner" allowed) names a trial class; anything else,
# such as "python3 train.py", is a command.
_TRIAL_CLASS = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

CHECKPOINT_POLICIES = ("best", "all", "none")


def names_trial_class(entrypoint: Any) -> TypeGuard[str]:
    """Whether an ``entrypoint`` names a trial class (``package.module:Class``, a nested
    ``Outer.Inner`` allowed) rather than a command such as ``python3 train.py``."""
    return isinstance(entrypoint, str) and _TRIAL_CLASS.fullmatch(entrypoint.strip()) is not None


def check_command(value: Any, expected: str) -> Any:
    """A command's validation: a non-empty string, or a non-empty list of strings.

    Args:
        expected: what the value must be, for the message when it is neither.
    """
    if isinstance(value, str):
        if not value.strip():
            fail("must not be empty")
        return value
    if isinstance(value, list):
        if not value:
            fail("must not be empty")
        problems = [
            Problem(f"[{index}]", "must be a string")
            for index, item in enumerate(value)
            if not isinstance(item, str)
        ]
        if problems:
            raise problems_error(problems)
        return value
    fail(f"must be {expected}")


def _entrypoint(value: Any) -> Any:
    return check_command(value, '"module:TrialClass", a command, or a list of command arguments')


class ReproducibilityConfig(ConfigModel):
    """Seeds. Without ``experiment_seed`` the master picks one and stores it."""

    experiment_seed: int | None = Field(default=None, ge=0, le=2**31 - 1)


class ExperimentConfig(ConfigModel):
    """A validated experiment config with its defaults filled in.

    Build one with :func:`det_hub.config.parse_experiment_config`. A ``pbs`` section is
    accepted and dropped; ``slurm`` is read (see :class:`~det_hub.config.slurm.SlurmConfig`)
    and used where the trials' pool is a Slurm partition; ``data``, ``optimizations``, ``profiling``,
    ``log_policies``, ``retention_policy`` and ``integrations`` are kept as written.
    """

    ignored_keys: ClassVar[frozenset[str]] = frozenset({"pbs"})

    name: str = "Experiment"
    description: str = ""
    labels: list[str] = []
    workspace: str | None = None
    project: str | None = None
    data: dict[str, Any] = {}
    entrypoint: Annotated[str | list[str], BeforeValidator(_entrypoint)]
    hyperparameters: Annotated[
        dict[str, Any], BeforeValidator(reraise_as_problems(parse_hyperparameters))
    ] = {}
    searcher: SearcherConfig
    resources: ResourcesConfig = ResourcesConfig()
    checkpoint_storage: Annotated[
        CheckpointStorage | None, BeforeValidator(reraise_as_problems(parse_checkpoint_storage))
    ] = None
    environment: EnvironmentConfig = EnvironmentConfig()
    bind_mounts: list[BindMount] = []
    reproducibility: ReproducibilityConfig = ReproducibilityConfig()
    records_per_epoch: int = Field(default=0, ge=0)
    scheduling_unit: int = Field(default=100, ge=1)
    min_validation_period: Length | None = None
    min_checkpoint_period: Length | None = None
    perform_initial_validation: bool = False
    checkpoint_policy: Annotated[Literal["best", "all", "none"], choice(*CHECKPOINT_POLICIES)] = (
        "best"
    )
    max_restarts: int = Field(default=5, ge=0)
    debug: bool = False
    optimizations: dict[str, Any] = {}
    profiling: dict[str, Any] = {}
    log_policies: list[Any] | dict[str, Any] | None = None
    retention_policy: dict[str, Any] = {}
    integrations: dict[str, Any] = {}
    slurm: SlurmConfig | None = None

    @property
    def entrypoint_kind(self) -> Literal["trial_class", "script"]:
        """``"trial_class"`` for ``module:Class``, ``"script"`` for a command."""
        if names_trial_class(self.entrypoint):
            return "trial_class"
        return "script"

    def entrypoint_argv(self) -> list[str] | None:
        """The command to run, split as a shell would; None for a trial class."""
        if self.entrypoint_kind == "trial_class":
            return None
        if isinstance(self.entrypoint, list):
            return list(self.entrypoint)
        return shlex.split(self.entrypoint)

    def to_dict(self) -> dict[str, Any]:
        """The config with defaults filled, as JSON-serialisable data that parses back equal."""
        return self.model_dump(mode="json")

    @field_serializer("hyperparameters")
    def _hyperparameters_to_dict(self, space: dict[str, Any]) -> dict[str, Any]:
        return hyperparameters_to_dict(space)

    def _semantic_problems(self) -> list[Problem]:
        problems = []
        in_epochs = [
            path
            for path, length in (
                ("searcher.max_length", self.searcher.max_length),
                ("min_validation_period", self.min_validation_period),
                ("min_checkpoint_period", self.min_checkpoint_period),
            )
            if length is not None and length.unit is LengthUnit.EPOCHS
        ]
        if in_epochs and self.records_per_epoch == 0 and self.entrypoint_kind == "trial_class":
            problems.append(
                Problem(
                    "records_per_epoch",
                    "required (> 0) when a length is in epochs (" + ", ".join(in_epochs) + ")",
                )
            )
        if self.searcher.name == "grid":
            problems.extend(numeric_without_count(self.hyperparameters, "hyperparameters"))
        return problems
