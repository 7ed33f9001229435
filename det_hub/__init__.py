"""det_hub: a deep-learning training platform that lives in JupyterHub."""

from __future__ import annotations

# Every task's first process imports this package (det_hub.exec.task_start); it imports
# nothing, not even typing, so that a task's start pays only for what it uses.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from pathlib import Path
    from typing import Any

    from det_hub.client import Client

__version__ = "0.1.0"


def load_ipython_extension(ipython: Any) -> None:
    """Registers the ``%det_experiment`` magics: ``%load_ext det_hub``."""
    from det_hub.notebook import load_ipython_extension as register

    register(ipython)


def load_checkpoint(
    uuid: str, *, path: str | os.PathLike[str] | None = None, client: Client | None = None
) -> Path | Any:
    """Loads a checkpoint: the trained model (a ``torch.nn.Module``, in eval mode) of a
    PyTorchTrial, else the checkpoint's directory (a :class:`~pathlib.Path`); see
    :func:`det_hub.notebook.load_checkpoint` for exactly what is returned when."""
    from det_hub.notebook import load_checkpoint as load

    return load(uuid, path=path, client=client)


def load_model(
    name: str, version: int | str = "latest", *, path: str | os.PathLike[str] | None = None,
    client: Client | None = None,
) -> Path | Any:
    """Loads a version (``"latest"`` by default) of a model in the registry, as
    :func:`load_checkpoint` loads its checkpoint: a PyTorchTrial's trained model, else the
    checkpoint's directory; see :func:`det_hub.notebook.load_model`."""
    from det_hub.notebook import load_model as load

    return load(name, version, path=path, client=client)


# Subpackages reached as attributes after a bare ``import det_hub`` (``det_hub.core.init()``),
# imported on first use so that the CLI's start does not pay for torch or requests.
_LAZY_SUBPACKAGES = frozenset({"core", "pytorch", "client", "launch"})


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBPACKAGES:
        import importlib

        return importlib.import_module(f"det_hub.{name}")
    raise AttributeError(f"module 'det_hub' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBPACKAGES})


__all__ = ["__version__", "load_checkpoint", "load_ipython_extension", "load_model"]
