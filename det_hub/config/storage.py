"""The ``checkpoint_storage`` section: where checkpoints go and how many are kept."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from det_hub.config._errors import ConfigError, Problem, not_one_of_message
from det_hub.config._model import ConfigModel, absolute_path, not_empty, validate_section


class _RetentionPolicy(ConfigModel):
    """How many checkpoints garbage collection keeps, common to every storage type."""

    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class SharedFSConfig(_RetentionPolicy):
    """A directory on the agent hosts (``type: shared_fs``), under ``host_path/storage_path``."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: Annotated[str, AfterValidator(absolute_path)]
    storage_path: str | None = None
    propagation: str = "rprivate"
    container_path: str | None = None


class S3Config(_RetentionPolicy):
    """An S3 bucket (``type: s3``); ``endpoint_url`` for servers other than AWS."""

    type: Literal["s3"] = "s3"
    bucket: Annotated[str, AfterValidator(not_empty)]
    prefix: str | None = None
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None


class DirectoryConfig(_RetentionPolicy):
    """A path inside the task's container (``type: directory``), mounted by other means."""

    type: Literal["directory"] = "directory"
    container_path: Annotated[str, AfterValidator(not_empty)]


CheckpointStorage = SharedFSConfig | S3Config | DirectoryConfig
"""Any checkpoint storage section."""

STORAGE_TYPES: dict[str, type[SharedFSConfig | S3Config | DirectoryConfig]] = {
    "shared_fs": SharedFSConfig,
    "s3": S3Config,
    "directory": DirectoryConfig,
}


def parse_checkpoint_storage(raw: Any) -> CheckpointStorage | None:
    """Pick the storage type named by ``type`` and validate the section as that type.

    Raises:
        ConfigError: With paths relative to the section (``"type"``, ``"host_path"``).
    """
    if raw is None or isinstance(raw, (SharedFSConfig, S3Config, DirectoryConfig)):
        return raw
    if not isinstance(raw, Mapping):
        raise ConfigError([Problem("", "must be a mapping")])
    if "type" not in raw:
        raise ConfigError([Problem("type", "required; one of " + ", ".join(STORAGE_TYPES))])
    model = STORAGE_TYPES.get(raw["type"]) if isinstance(raw["type"], str) else None
    if model is None:
        raise ConfigError([Problem("type", not_one_of_message(raw["type"], list(STORAGE_TYPES)))])
    return validate_section(model, raw)
