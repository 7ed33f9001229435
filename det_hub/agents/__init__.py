"""Where work runs: agents own slots on a host and start tasks on them.

The names below are imported from their modules on first use (PEP 562):
:mod:`det_hub.agents.local_runner`, which starts each task of the local agent in a fresh
interpreter, lives in this package and must not pay for the agents themselves (traitlets, the
slot probes) every time a task starts.
"""

from __future__ import annotations

from det_hub._lazy import lazy_exports

TYPE_CHECKING = False  # typing is left unimported too (see det_hub._lazy)
if TYPE_CHECKING:
    from ._base import (
        PYTHON_NAMES,
        Agent,
        AgentUnreachable,
        ContainerSpec,
        ExitStatus,
        LogLine,
        TaskHandle,
        TaskSpec,
    )
    from .slots import SlotInfo

_EXPORTS = {
    **dict.fromkeys(("PYTHON_NAMES", "Agent", "AgentUnreachable", "ContainerSpec", "ExitStatus",
                     "LogLine", "TaskHandle", "TaskSpec"), "_base"),
    "SlotInfo": "slots",
}

__all__ = [
    "PYTHON_NAMES",
    "Agent",
    "AgentUnreachable",
    "ContainerSpec",
    "ExitStatus",
    "LogLine",
    "SlotInfo",
    "TaskHandle",
    "TaskSpec",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
