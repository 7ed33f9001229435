"""Making a storage backend from an experiment's ``checkpoint_storage`` config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub.storage._base import StorageManager

if TYPE_CHECKING:  # each backend is imported where it is built: a trial loads its own only
    from det_hub.storage.s3 import S3Storage

SUPPORTED_TYPES = ("shared_fs", "s3", "directory")


def _s3_storage(config: Mapping[str, Any]) -> S3Storage:
    # The config schema's checks and normalisation (the prefix), with its error paths.
    from det_hub.config import ConfigError
    from det_hub.config.storage import S3Config, parse_checkpoint_storage
    from det_hub.storage.s3 import S3Storage

    try:
        parsed = parse_checkpoint_storage(config)
    except ConfigError as exc:
        raise ValueError(
            "\n".join(f"checkpoint_storage.{p.path}: {p.message}" for p in exc.problems)
        ) from None
    assert isinstance(parsed, S3Config)
    return S3Storage(parsed.bucket, parsed.prefix, endpoint_url=parsed.endpoint_url,
                     access_key=parsed.access_key, secret_key=parsed.secret_key)


def build_storage(config: Mapping[str, Any]) -> StorageManager:
    """The storage backend a ``checkpoint_storage`` config describes.

    Args:
        config: For example ``{"type": "shared_fs", "host_path": "/data", "storage_path": None}``
            (Determined's other shared_fs keys, such as ``propagation``, are accepted and have
            no effect here), or ``{"type": "s3", "bucket": "ckpts", "prefix": "team",
            "endpoint_url": None, "access_key": None, "secret_key": None}``, or
            ``{"type": "directory", "container_path": "/mnt/checkpoints"}``.

    Raises:
        ValueError: The type is missing or not supported, or a required key is missing or
            invalid (the message names it: ``checkpoint_storage.bucket: required``).
    """
    kind = config.get("type")
    if kind == "shared_fs":
        host_path = config.get("host_path")
        if not host_path:
            raise ValueError("checkpoint_storage.host_path: required for type shared_fs")
        from det_hub.storage.shared_fs import SharedFSStorage

        return SharedFSStorage(str(host_path), config.get("storage_path"))
    if kind == "s3":
        return _s3_storage(config)
    if kind == "directory":
        container_path = config.get("container_path")
        if not container_path:
            raise ValueError("checkpoint_storage.container_path: required for type directory")
        from det_hub.storage.directory import DirectoryStorage

        return DirectoryStorage(str(container_path))
    raise ValueError(
        f"checkpoint_storage.type: {kind!r} is not supported; supported types: "
        + ", ".join(SUPPORTED_TYPES)
    )


def remote_tensorboard(config: Mapping[str, Any] | None) -> bool:
    """Whether a ``checkpoint_storage`` config keeps TensorBoard event files away from the
    host's file system (an object store), where a TensorBoard must fetch them from (see
    :attr:`StorageManager.remote_tensorboard`); False when it is missing or invalid."""
    if not config:
        return False
    try:
        return build_storage(config).remote_tensorboard
    except ValueError:
        return False


def tensorboard_dir(experiment_id: int, config: Mapping[str, Any] | None) -> Path | None:
    """The directory holding the TensorBoard event files of an experiment's trials, as the
    host sees it, or None when its ``checkpoint_storage`` config keeps none there (or is
    missing or invalid; for remote ones see :func:`remote_tensorboard`). See
    :meth:`StorageManager.tensorboard_path` for the layout.
    """
    if not config:
        return None
    try:
        storage = build_storage(config)
    except ValueError:
        return None
    return storage.tensorboard_path(experiment_id)


#: Where a container sees a ``shared_fs`` storage's ``host_path``.
CONTAINER_SHARED_FS = "/det_hub_shared_fs"


def storage_mounts(config: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The bind mounts that show a task a ``shared_fs`` storage's ``host_path`` at the same
    path (a sandboxed local task); none for storages reached over the network."""
    if not config or config.get("type") != "shared_fs" or not config.get("host_path"):
        return []
    host = str(config["host_path"])
    return [{"host_path": host, "container_path": host, "read_only": False,
             "propagation": config.get("propagation") or "rprivate"}]


def storage_in_container(
    config: Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A ``checkpoint_storage`` config as a task in a container sees it, and the bind mounts
    that make it so.

    A ``shared_fs`` storage's ``host_path`` is a path on the host; the container gets it
    mounted at :data:`CONTAINER_SHARED_FS` and its config says so. Other types reach their
    storage over the network and pass through unchanged.
    """
    mounts = storage_mounts(config)
    if not mounts:
        return (dict(config) if config else None), []
    mounts[0]["container_path"] = CONTAINER_SHARED_FS
    return {**config, "host_path": CONTAINER_SHARED_FS}, mounts  # type: ignore[dict-item]
