"""The ``checkpoint_storage`` section: where checkpoints go and how many are kept."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from det_hub.config._errors import ConfigError, Problem, fail, not_one_of_message
from det_hub.config._model import ConfigModel, absolute_path, not_empty, validate_section
from det_hub.defaults import RETENTION_DEFAULTS

# The characters boto3 accepts in a bucket name: S3 itself (3 to 63 lowercase letters, digits,
# dots and hyphens) is stricter, and S3-compatible servers vary, so the server has the last word.
_BUCKET_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


class _RetentionPolicy(ConfigModel):
    """How many checkpoints garbage collection keeps, common to every storage type."""

    save_experiment_best: int = Field(default=RETENTION_DEFAULTS["save_experiment_best"], ge=0)
    save_trial_best: int = Field(default=RETENTION_DEFAULTS["save_trial_best"], ge=0)
    save_trial_latest: int = Field(default=RETENTION_DEFAULTS["save_trial_latest"], ge=0)


class SharedFSConfig(_RetentionPolicy):
    """A directory on the agent hosts (``type: shared_fs``), under ``host_path/storage_path``."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: Annotated[str, AfterValidator(absolute_path)]
    storage_path: str | None = None
    propagation: str = "rprivate"
    container_path: str | None = None


def s3_bucket_name(name: str) -> str:
    """Check an S3 bucket name (for use with ``AfterValidator``)."""
    not_empty(name)
    if not _BUCKET_RE.fullmatch(name):
        fail(f"{name!r} is not a valid bucket name: letters, digits, '.', '-' and '_' only")
    return name


def s3_prefix(prefix: str) -> str:
    """Check and normalise an object key prefix: no ``.`` or ``..`` parts; leading, trailing
    and repeated slashes dropped (for use with ``AfterValidator``)."""
    parts = [part for part in prefix.split("/") if part]
    if any(part in (".", "..") for part in parts):
        fail("must not contain '.' or '..' parts")
    return "/".join(parts)


def http_url(url: str) -> str:
    """Check a URL is ``http://`` or ``https://`` with a host (for use with ``AfterValidator``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
        fail("must be an http:// or https:// URL")
    return url


class S3Config(_RetentionPolicy):
    """An S3 bucket (``type: s3``); ``endpoint_url`` for servers other than AWS.

    Checkpoints are stored under ``<prefix>/<uuid>/``. Without ``access_key`` and
    ``secret_key`` boto3 finds credentials as usual (``AWS_ACCESS_KEY_ID`` and the rest of its
    environment variables, ``~/.aws``, an instance role).
    """

    type: Literal["s3"] = "s3"
    bucket: Annotated[str, AfterValidator(s3_bucket_name)]
    prefix: Annotated[str, AfterValidator(s3_prefix)] | None = None
    endpoint_url: Annotated[str, AfterValidator(http_url)] | None = None
    access_key: str | None = None
    secret_key: str | None = None

    def _semantic_problems(self) -> list[Problem]:
        if (self.access_key is None) != (self.secret_key is None):
            missing = "secret_key" if self.secret_key is None else "access_key"
            other = "access_key" if missing == "secret_key" else "secret_key"
            return [Problem(missing, f"required when {other} is set")]
        return []


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
