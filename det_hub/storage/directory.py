"""``type: directory``: checkpoints in a directory that tasks see at one path, mounted there by
other means (a ``bind_mounts`` entry of the experiment, an NFS mount in the image)."""

from __future__ import annotations

import os

from det_hub.storage.shared_fs import SharedFSStorage


class DirectoryStorage(SharedFSStorage):
    """Checkpoints as directories ``container_path/<uuid>``, TensorBoard files under
    ``container_path/tensorboard/``: the layout of ``shared_fs``, but det_hub mounts nothing,
    so the path is the same for every process that uses it.

    The master removes a checkpoint's files only where it sees ``container_path`` itself (a
    local agent, or the same mount on its host); elsewhere :meth:`delete` says so and the
    files stay where the tasks wrote them.
    """

    def __init__(self, container_path: str | os.PathLike[str]) -> None:
        super().__init__(container_path)

    def delete(self, storage_id: str) -> None:
        if not self.base_path.is_dir():
            raise FileNotFoundError(
                f"checkpoint_storage.container_path {str(self.base_path)!r} is not mounted "
                f"here: the files of checkpoint {storage_id} stay where the tasks wrote them")
        super().delete(storage_id)

    def __repr__(self) -> str:
        return f"DirectoryStorage({str(self.base_path)!r})"
