"""Where work runs: agents own slots on a host and start tasks on them."""

from det_hub.agents._base import (
    PYTHON_NAMES,
    Agent,
    AgentUnreachable,
    ContainerSpec,
    ExitStatus,
    LogLine,
    TaskHandle,
    TaskSpec,
)
from det_hub.agents.slots import SlotInfo

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
