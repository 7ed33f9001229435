"""Installs the ``determined`` import alias when a trial's interpreter starts.

The agent puts this directory first on the trial's ``PYTHONPATH``; Python's ``site`` module then
imports this file before any user code runs. Because it hides every ``sitecustomize`` later on
``sys.path`` (a distribution's, a virtual environment's or the user's own), it runs the next one
it finds, so theirs still takes effect.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _install_alias() -> None:
    try:
        from det_hub.compat import install
    except ImportError:
        # This interpreter cannot import det_hub (the directory was put on the path of some
        # other Python): there is nothing to alias to, so start up as if we were not here.
        return
    install()


def _same_dir(entry: str, here: str) -> bool:
    try:
        return os.path.samefile(entry or os.curdir, here)
    except OSError:
        return False


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if not _same_dir(entry, here)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # The chained module takes over the name, as if site had imported it directly.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install_alias()
_run_next_sitecustomize()
