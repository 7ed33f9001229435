"""Making a storage backend from an experiment's ``checkpoint_storage`` config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_hub.storage._base import StorageManager
from det_hub.storage.shared_fs import SharedFSStorage

SUPPORTED_TYPES = ("shared_fs",)


def build_storage(config: Mapping[str, Any]) -> StorageManager:
    """The storage backend a ``checkpoint_storage`` config describes.

    Args:
        config: For example ``{"type": "shared_fs", "host_path": "/data", "storage_path": None}``
            (Determined's other shared_fs keys, such as ``propagation``, are accepted and have
            no effect here).

    Raises:
        ValueError: The type is missing or not supported, or a required key is missing.
    """
    kind = config.get("type")
    if kind == "shared_fs":
        host_path = config.get("host_path")
        if not host_path:
            raise ValueError("checkpoint_storage.host_path: required for type shared_fs")
        return SharedFSStorage(str(host_path), config.get("storage_path"))
    raise ValueError(
        f"checkpoint_storage.type: {kind!r} is not supported; supported types: "
        + ", ".join(SUPPORTED_TYPES)
    )


def tensorboard_dir(experiment_id: int, config: Mapping[str, Any] | None) -> Path | None:
    """The directory holding the TensorBoard event files of an experiment's trials, as the
    host sees it, or None when its ``checkpoint_storage`` config keeps none (or is missing or
    invalid). See :meth:`StorageManager.tensorboard_path` for the layout.
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


def storage_in_container(
    config: Mapping[str, Any] | None,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A ``checkpoint_storage`` config as a task in a container sees it, and the bind mounts
    that make it so.

    A ``shared_fs`` storage's ``host_path`` is a path on the host; the container gets it
    mounted at :data:`CONTAINER_SHARED_FS` and its config says so. Other types reach their
    storage over the network and pass through unchanged.
    """
    if not config or config.get("type") != "shared_fs" or not config.get("host_path"):
        return (dict(config) if config else None), []
    mount = {"host_path": str(config["host_path"]), "container_path": CONTAINER_SHARED_FS,
             "read_only": False, "propagation": config.get("propagation") or "rprivate"}
    return {**config, "host_path": CONTAINER_SHARED_FS}, [mount]
