"""``det_hub.load_model``: what a version of a registered model holds, ready to use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from det_hub.client import Client
from det_hub.notebook.checkpoint import load_checkpoint

if TYPE_CHECKING:
    import torch


def load_model(
    name: str, version: int | str = "latest", *, path: str | os.PathLike[str] | None = None,
    client: Client | None = None,
) -> Path | torch.nn.Module | list[torch.nn.Module]:
    """Loads the checkpoint of a version of a model in the registry, as
    :func:`det_hub.load_checkpoint` does: a PyTorchTrial's trained model (in eval mode), or a
    Core API checkpoint's directory.

    Args:
        name: The model's name.
        version: The version number, or ``"latest"`` (the highest number).
        path: A directory to copy the checkpoint's files into (see ``load_checkpoint``).
        client: The master's client (default: ``Client()``).

    Raises:
        ValueError: ``version`` is neither a number nor ``"latest"``.
        MasterError: 404 for an unknown model or version, or a model without versions.
        Anything :func:`det_hub.load_checkpoint` raises.
    """
    if version == "latest":
        number = None
    elif isinstance(version, int) and not isinstance(version, bool) or (
            isinstance(version, str) and version.isdigit()):
        number = int(version)
    else:
        raise ValueError(f"version: {version!r} is neither a version number nor 'latest'")
    owned = client is None
    client = client or Client()
    try:
        uuid = client.get_model_version(name, number).checkpoint.uuid
        return load_checkpoint(uuid, path=path, client=client)
    finally:
        if owned:
            client.close()
