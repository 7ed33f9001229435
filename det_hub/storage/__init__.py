"""Checkpoint storage backends and the checkpoint garbage-collection policy."""

from det_hub.storage._base import StorageManager, check_uuid, directory_resources
from det_hub.storage._build import build_storage
from det_hub.storage.gc import CheckpointRecord, checkpoints_to_delete, checkpoints_to_keep
from det_hub.storage.shared_fs import SharedFSStorage

__all__ = [
    "CheckpointRecord",
    "SharedFSStorage",
    "StorageManager",
    "build_storage",
    "check_uuid",
    "checkpoints_to_delete",
    "checkpoints_to_keep",
    "directory_resources",
]
