"""A checkpoint's files on this machine, read from whatever storage holds them: what
:meth:`Checkpoint.download <det_hub.client.Checkpoint.download>`, ``det_hub.load_checkpoint``
and the checkpoint browser widget open checkpoints with."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._objects import Checkpoint


def checkpoint_directory(checkpoint: Checkpoint,
                         path: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint's files as a local directory: in place, or copied to ``path`` (to a new
    temporary directory when the storage has no place of its own on this machine).

    Raises:
        ValueError: The storage type is not one this machine can read.
        FileNotFoundError: The files are not where the storage says.
        det_hub.storage.CheckpointIntegrityError: A file is missing or of another size.
    """
    # Imported when first needed, so that the CLI's start does not load the storage backends.
    from det_hub.storage import build_storage

    storage = build_storage(checkpoint.storage)
    resources = checkpoint.resources or None
    try:
        if path is None:
            if storage.restores_in_place:
                with storage.restore_path(checkpoint.uuid, resources=resources) as found:
                    return Path(found)
            path = tempfile.mkdtemp(prefix=f"det_hub_checkpoint_{checkpoint.uuid}_")
        target = Path(path).expanduser()
        storage.download(checkpoint.uuid, target, resources=resources)
        return target
    except FileNotFoundError:
        if not storage.restores_in_place:
            raise  # the storage's own message names the bucket and key
        where = checkpoint.storage.get("host_path", "its storage")
        raise FileNotFoundError(
            f"checkpoint {checkpoint.uuid} is not in {where} as seen from this machine; "
            "its storage must be mounted here at the same path") from None


__all__ = ["checkpoint_directory"]
