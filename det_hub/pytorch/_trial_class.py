"""Importing a trial class by the ``module:Class`` name a config's ``entrypoint`` gives.

The harness imports the class it trains with it, and loading a checkpoint the class that wrote
it.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from det_hub.pytorch._trial import PyTorchTrial


class EntrypointError(Exception):
    """The entrypoint does not name an importable trial class."""


def load_trial_class(
    entrypoint: str, directory: str | os.PathLike[str] | None = None
) -> type[PyTorchTrial]:
    """Import the class named by ``"module:Class"`` (``"pkg.mod:Outer.Inner"`` works too).

    Args:
        entrypoint: The config's ``entrypoint``.
        directory: Put first on ``sys.path`` (default: the working directory).

    Raises:
        EntrypointError: The entrypoint is malformed, its module cannot be imported, or it
            names no PyTorchTrial subclass.
    """
    module_name, sep, qualname = entrypoint.strip().partition(":")
    if not sep or not module_name or not qualname:
        raise EntrypointError(f"entrypoint {entrypoint!r} must look like 'module:TrialClass'")
    root = str(Path(directory) if directory is not None else Path.cwd())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise EntrypointError(
            f"cannot import module {module_name!r} of entrypoint {entrypoint!r} from {root}: "
            f"{detail}"
        ) from exc
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise EntrypointError(
                f"entrypoint {entrypoint!r}: module {module_name!r} has no {qualname!r}"
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not issubclass(obj, PyTorchTrial):
        raise EntrypointError(
            f"entrypoint {entrypoint!r} names {obj!r}, not a det_hub.pytorch.PyTorchTrial subclass"
        )
    return obj


__all__ = ["EntrypointError", "load_trial_class"]
