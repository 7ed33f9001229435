"""Run Determined training code unchanged: ``import determined`` served by det_hub.

When the real ``determined`` package is not installed, :func:`install` puts an import alias in
place so that::

    import determined as det
    from determined import core
    import determined.pytorch
    python3 -m determined.launch.torch_distributed python3 train.py

resolve to det_hub's modules (``determined.core is det_hub.core``). Trial processes get it before
user code runs through the ``sitecustomize`` in :data:`SITE_DIR`, which the agent puts first on
the trial's ``PYTHONPATH``.
"""

from __future__ import annotations

from pathlib import Path

from det_hub.compat._alias import SUBPACKAGES, install, real_determined_available, uninstall

#: Put this directory first on a trial's PYTHONPATH: its ``sitecustomize`` calls :func:`install`
#: at interpreter start-up, then runs any other ``sitecustomize`` found later on ``sys.path``.
SITE_DIR: Path = Path(__file__).resolve().parent / "site"

__all__ = ["SITE_DIR", "SUBPACKAGES", "install", "real_determined_available", "uninstall"]
