"""Checkpoint storage backends and the checkpoint garbage-collection policy.

The names below are imported from their modules on first use (PEP 562): a trial's
``import det_hub.core`` loads the backend its storage uses, not every backend and the
garbage-collection policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from det_hub._lazy import lazy_exports

if TYPE_CHECKING:
    from ._base import (
        CheckpointIntegrityError,
        StorageManager,
        check_uuid,
        directory_resources,
        verify_resources,
    )
    from ._build import (
        CONTAINER_SHARED_FS,
        build_storage,
        remote_tensorboard,
        storage_in_container,
        storage_mounts,
        tensorboard_dir,
    )
    from .directory import DirectoryStorage
    from .gc import CheckpointRecord, checkpoints_to_delete, checkpoints_to_keep
    from .s3 import S3Storage
    from .shared_fs import SharedFSStorage

_EXPORTS = {
    **dict.fromkeys(("CheckpointIntegrityError", "StorageManager", "check_uuid",
                     "directory_resources", "verify_resources"), "_base"),
    **dict.fromkeys(("CONTAINER_SHARED_FS", "build_storage", "remote_tensorboard",
                     "storage_in_container", "storage_mounts", "tensorboard_dir"), "_build"),
    "DirectoryStorage": "directory",
    **dict.fromkeys(("CheckpointRecord", "checkpoints_to_delete", "checkpoints_to_keep"), "gc"),
    "S3Storage": "s3",
    "SharedFSStorage": "shared_fs",
}

__all__ = [
    "CONTAINER_SHARED_FS",
    "CheckpointIntegrityError",
    "CheckpointRecord",
    "DirectoryStorage",
    "S3Storage",
    "SharedFSStorage",
    "StorageManager",
    "build_storage",
    "check_uuid",
    "checkpoints_to_delete",
    "checkpoints_to_keep",
    "directory_resources",
    "remote_tensorboard",
    "storage_in_container",
    "storage_mounts",
    "tensorboard_dir",
    "verify_resources",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
