"""Checkpoint storage backends and the checkpoint garbage-collection policy."""

from det_hub.storage._base import (
    CheckpointIntegrityError,
    StorageManager,
    check_uuid,
    directory_resources,
    verify_resources,
)
from det_hub.storage._build import (
    CONTAINER_SHARED_FS,
    build_storage,
    remote_tensorboard,
    storage_in_container,
    storage_mounts,
    tensorboard_dir,
)
from det_hub.storage.directory import DirectoryStorage
from det_hub.storage.gc import CheckpointRecord, checkpoints_to_delete, checkpoints_to_keep
from det_hub.storage.s3 import S3Storage
from det_hub.storage.shared_fs import SharedFSStorage

__all__ = [
    "CONTAINER_SHARED_FS",
    "storage_in_container",
    "storage_mounts",
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
    "tensorboard_dir",
    "verify_resources",
]
