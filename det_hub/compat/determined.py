"""The top-level ``determined`` module, as det_hub serves it to Determined training code.

Loaded under the name ``determined`` by the import alias (see ``det_hub.compat``). It carries
what Determined scripts use from the top level, and reaches the subpackages lazily, so
``import determined as det`` stays cheap and ``det.pytorch`` needs torch only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

from det_hub import __version__
from det_hub.core import ClusterInfo, TrialInfo, get_cluster_info

# Determined's documented log format; its users pass it to logging.basicConfig.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

# Lets the alias tell this module from a real Determined that happens to be imported.
__det_hub_alias__ = True

_SUBPACKAGES = ("core", "pytorch", "launch", "exec", "common")

__all__ = [
    "LOG_FORMAT",
    "ClusterInfo",
    "TrialInfo",
    "__version__",
    "get_cluster_info",
]


def __getattr__(name: str) -> Any:
    """``det.core``, ``det.pytorch``, ... imported on first use."""
    if name in _SUBPACKAGES:
        # Under the alias, import by the alias name so sys.modules gets "determined.<name>" as
        # a plain import would; imported directly, go to det_hub's package.
        if __name__ == "determined":
            return importlib.import_module(f"determined.{name}")
        from det_hub.compat._alias import SUBPACKAGES

        return importlib.import_module(SUBPACKAGES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
