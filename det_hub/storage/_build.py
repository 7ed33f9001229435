"""Making a storage backend from an experiment's ``checkpoint_storage`` config."""

from __future__ import annotations

from collections.abc import Mapping
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
