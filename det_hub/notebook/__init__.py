"""det_hub in notebooks: the ``%det_experiment`` magics and :func:`load_checkpoint`.

``%load_ext det_hub`` registers the magics (IPython is needed for them only)::

    %det_experiment create const.yaml model_def --follow
    %det_experiment list

and ``det_hub.load_checkpoint(uuid)`` gives back a trained model or a checkpoint directory.
"""

from __future__ import annotations

from typing import Any

from det_hub.notebook.checkpoint import load_checkpoint
from det_hub.notebook.model import load_model


def load_ipython_extension(ipython: Any) -> None:
    """Registers the ``%det_experiment`` magics; IPython calls this for ``%load_ext``."""
    from det_hub.notebook.magics import load_ipython_extension as register

    register(ipython)


__all__ = ["load_checkpoint", "load_ipython_extension", "load_model"]
