"""A checkpoint's files as one ``.tar.gz``, for the JupyterLab panel's download link.

The notebook server reads the checkpoint from its storage as :func:`det_hub.load_checkpoint`
does in a notebook (a ``shared_fs`` storage must be mounted on the server at the same path;
S3 is read with the server's credentials) and packs it into a file, which the handler sends in
chunks.
"""

from __future__ import annotations

import tarfile
from typing import IO, Any

from det_hub.client import Checkpoint
from det_hub.extension.errors import BadRequest, NotFound
from det_hub.storage import CheckpointIntegrityError, build_storage, check_uuid


def checked_uuid(uuid: str) -> str:
    """``uuid`` if it is a checkpoint uuid.

    Raises:
        BadRequest: It is not.
    """
    try:
        return check_uuid(uuid)
    except ValueError as e:
        raise BadRequest(str(e)) from e


def write_checkpoint_archive(checkpoint: dict[str, Any], target: IO[bytes]) -> None:
    """Writes the checkpoint's files to ``target`` as a ``.tar.gz`` whose top directory is
    the checkpoint's uuid. Reads and packs the files: call it off the event loop.

    Args:
        checkpoint: The master's checkpoint object.
        target: A binary file open for writing.

    Raises:
        BadRequest: The checkpoint is not complete, or its storage cannot be read from here.
        NotFound: Its files are not where its storage says, as seen from this server.
    """
    found = Checkpoint.from_json(checkpoint)
    if found.state != "COMPLETED":
        raise BadRequest(f"checkpoint {found.uuid} is {found.state}, not COMPLETED")
    try:
        storage = build_storage(found.storage)
    except ValueError as e:
        raise BadRequest(f"checkpoint {found.uuid}'s storage cannot be read from this server",
                         [str(e)]) from e
    try:
        with storage.restore_path(found.uuid, resources=found.resources or None) as directory, \
                tarfile.open(fileobj=target, mode="w:gz") as tar:
            tar.add(directory, arcname=found.uuid)
    except CheckpointIntegrityError as e:
        raise NotFound(f"checkpoint {found.uuid} is not whole in its storage", [str(e)]) from e
    except FileNotFoundError as e:
        where = found.storage.get("host_path") or "its storage"
        raise NotFound(f"checkpoint {found.uuid} is not in {where} as seen from this server",
                       ["a shared_fs storage must be mounted on the notebook server at the "
                        "same path"]) from e


__all__ = ["checked_uuid", "write_checkpoint_archive"]
