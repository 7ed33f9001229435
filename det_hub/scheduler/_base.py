"""What a scheduling policy sees and what it decides.

A policy is handed a snapshot (agents with their slots, the requests waiting, the allocations
running) and returns assignments and preemptions. It keeps no state between calls and reads no
clock: times come in on the requests.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Slot:
    """One schedulable unit on an agent: a GPU, or a group of CPU cores."""

    id: int
    kind: str = "cpu"  # "cpu" or "cuda"
    allocation_id: str | None = None

    @property
    def free(self) -> bool:
        return self.allocation_id is None


@dataclasses.dataclass(frozen=True)
class Agent:
    id: str
    slots: tuple[Slot, ...]
    enabled: bool = True

    def free_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.free] if self.enabled else []


@dataclasses.dataclass(frozen=True)
class Request:
    """An allocation waiting for slots.

    ``priority`` follows Determined: 1 is the most important, 99 the least, 42 the default.
    ``queued_at`` is any monotonically comparable time the caller chooses.
    """

    allocation_id: str
    slots: int
    priority: int = 42
    queued_at: float = 0.0
    owner: str = ""
    group: str = ""


@dataclasses.dataclass(frozen=True)
class Assignment:
    allocation_id: str
    agent_id: str
    slot_ids: tuple[int, ...]


@dataclasses.dataclass
class Decision:
    assignments: list[Assignment] = dataclasses.field(default_factory=list)
    preemptions: list[str] = dataclasses.field(default_factory=list)


class Scheduler(abc.ABC):
    """Base class of scheduling policies."""

    @abc.abstractmethod
    def schedule(self, agents: Sequence[Agent], pending: Sequence[Request]) -> Decision:
        """Decide which pending requests start now and where."""


__all__ = ["Agent", "Assignment", "Decision", "Request", "Scheduler", "Slot"]
