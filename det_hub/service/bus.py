"""The master's event bus: what happens on the cluster, told to whichever manager cares.

The cluster, the experiments' runs and the managers do not call one another back through
functions handed over at construction; they publish an event here, and each manager says at
construction which events it handles. Reading :class:`det_hub.service.master.Master`'s
constructor shows every subscription in one place.

Handlers run one after the other, in the order they subscribed, and the publisher waits for
them: an event is handled completely before the next one is published, and a handler's error
reaches the publisher, as with a direct call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from det_hub.agents import ExitStatus
    from det_hub.service.cluster import Allocation
    from det_hub.service.experiment import ExperimentRun
    from det_hub.states import AllocationState
    from det_hub.store import Trial

EventT = TypeVar("EventT")


@dataclass(frozen=True)
class AllocationStateChanged:
    """An allocation moved on: ``STARTING`` once placed, ``RUNNING`` once its processes run.

    Handed to agents that queue tasks of their own (Slurm), an allocation waits there first,
    and its trial or task shows as queued: it is announced ``STARTING`` only once they run it,
    just before ``RUNNING``. Announcements only move forward (``Cluster.announce``).
    """

    alloc: Allocation
    state: AllocationState


@dataclass(frozen=True)
class AllocationExited:
    """An allocation's processes are gone (exited, killed, or lost with their agent)."""

    alloc: Allocation
    status: ExitStatus


@dataclass(frozen=True)
class TrialsEnded:
    """Trials of one experiment reached a terminal state: one, or many at once when a search
    closes out; ``run`` is their experiment's."""

    run: ExperimentRun
    trials: tuple[Trial, ...]


@dataclass(frozen=True)
class MetricsRolledBack:
    """A new run of a trial trains on from ``steps_completed``: the metric rows its earlier
    runs reported past that were rolled back (they no longer count)."""

    experiment_id: int
    trial_id: int
    run_id: int
    steps_completed: int


class EventBus:
    """Subscriptions by event type, and their delivery (see the module's docstring)."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Callable[[Any], Awaitable[None]]]] = defaultdict(list)

    def subscribe(self, event_type: type[EventT],
                  handler: Callable[[EventT], Awaitable[None]]) -> None:
        """Call ``handler`` with every event of ``event_type`` published from now on."""
        self._handlers[event_type].append(handler)

    async def publish(self, event: object) -> None:
        """Hand ``event`` to each of its type's handlers in turn, and return once all have
        handled it; a handler's error stops the delivery and is raised here."""
        for handler in self._handlers.get(type(event), ()):
            await handler(event)


__all__ = ["AllocationExited", "AllocationStateChanged", "EventBus", "MetricsRolledBack",
           "TrialsEnded"]
