"""In-process publish/subscribe for the live streams: stored metric rows by experiment
(:class:`MetricEvents`), the ids of experiments that changed (:class:`ExperimentChanges`), and
that the cluster changed (:class:`ClusterChanges`).

Publishing never blocks and never grows memory without bound: each subscriber has a bounded
queue (or set), and one that falls behind is marked overflowed and told nothing more, so that
its stream (:mod:`det_hub.service.events`) tells the client to reconnect and catch up from the
store. Nothing here reads the store or knows the master.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from det_hub.service.serialize import iso

#: Rows a subscriber may fall behind by before it is told to reconnect.
DEFAULT_QUEUE_ROWS = 10_000
#: Distinct experiments that may change before a list subscriber reads them, past which it is
#: told to reconnect (and take a fresh snapshot).
DEFAULT_PENDING_EXPERIMENTS = 1_000


def metric_json(row: Any) -> dict[str, Any]:
    """A stored metric row (a :class:`~det_hub.store.MetricRow` or the mapping
    :meth:`Store.insert_metrics` answers) as the stream sends it."""
    get = row.get if isinstance(row, Mapping) else lambda k: getattr(row, k)
    report_time = get("report_time")
    return {
        "id": get("id"), "trial_id": get("trial_id"), "group": get("group"),
        "steps_completed": get("steps_completed"), "metrics": get("metrics"),
        "report_time": report_time if isinstance(report_time, str) else iso(report_time),
    }


@dataclass(eq=False)
class Subscription:
    """One subscriber's bounded queue of metric rows (as :func:`metric_json` gives them)."""

    experiment_id: int
    queue: asyncio.Queue[dict[str, Any]]
    #: Set when a row did not fit: rows were lost, so the subscriber must resume from the store.
    overflowed: bool = False
    #: Set on overflow, so a waiting subscriber wakes at once.
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class MetricEvents:
    """Subscribers of each experiment's metric rows.

    Args:
        max_queue: the most rows one subscriber may have waiting; past that it is marked
            overflowed and gets nothing more, so a slow client cannot grow memory.
    """

    def __init__(self, max_queue: int = DEFAULT_QUEUE_ROWS) -> None:
        self.max_queue = max_queue
        self._subscribers: dict[int, set[Subscription]] = {}

    def subscribe(self, experiment_id: int) -> Subscription:
        """A new subscription to the rows of one experiment's trials."""
        sub = Subscription(experiment_id, asyncio.Queue(self.max_queue))
        self._subscribers.setdefault(experiment_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.experiment_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subscribers[sub.experiment_id]

    def subscribers(self, experiment_id: int) -> int:
        """How many subscriptions the experiment has."""
        return len(self._subscribers.get(experiment_id, ()))

    def publish_rollback(self, experiment_id: int, rolled_back: Mapping[str, Any]) -> None:
        """Tell every subscriber of the experiment, after the rows already handed over, that
        a trial's rows past a step were rolled back (``{"trial_id", "run_id",
        "steps_completed"}``); never blocks."""
        self._offer(experiment_id, [{"rolled_back": dict(rolled_back)}])

    def publish(self, experiment_id: int, rows: Sequence[Any]) -> None:
        """Hand committed rows to every subscriber of the experiment; never blocks."""
        if rows and self._subscribers.get(experiment_id):
            self._offer(experiment_id, [metric_json(r) for r in rows])

    def lost(self) -> None:
        """Rows may have been stored that no subscriber will be handed: every subscriber is
        marked overflowed (and woken), so that its stream resumes from the store."""
        for subs in self._subscribers.values():
            for sub in subs:
                sub.overflowed = True
                sub.wake.set()

    def _offer(self, experiment_id: int, events: list[dict[str, Any]]) -> None:
        """Queue ``events`` for each subscriber of the experiment; one that has no room is
        marked overflowed, and woken."""
        for sub in self._subscribers.get(experiment_id, ()):
            if sub.overflowed:
                continue
            for event in events:
                try:
                    sub.queue.put_nowait(event)
                except asyncio.QueueFull:
                    sub.overflowed = True
                    sub.wake.set()
                    break


@dataclass(eq=False)
class ChangeSubscription:
    """One list subscriber's experiments changed since it last looked: a set, since only the
    latest summary of each matters, bounded by ``max_pending``."""

    max_pending: int
    pending: set[int] = field(default_factory=set)
    #: Set when an id did not fit: changes were lost, so the subscriber must start again.
    overflowed: bool = False
    #: Set on every change and on overflow, so a waiting subscriber wakes at once.
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> list[int]:
        """The changed experiments' ids, ascending; the set is empty afterwards."""
        ids = sorted(self.pending)
        self.pending.clear()
        self.wake.clear()
        return ids


class ExperimentChanges:
    """Subscribers of experiment changes (the experiment list stream).

    :meth:`publish` is one of the store's ``experiment_listeners``: it is called with an
    experiment's id after every committed write that may change its summary.

    Args:
        max_pending: the most distinct experiments a subscriber may have unread; past that it
            is marked overflowed and gets nothing more.
    """

    def __init__(self, max_pending: int = DEFAULT_PENDING_EXPERIMENTS) -> None:
        self.max_pending = max_pending
        self._subscribers: set[ChangeSubscription] = set()

    def subscribe(self) -> ChangeSubscription:
        sub = ChangeSubscription(self.max_pending)
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: ChangeSubscription) -> None:
        self._subscribers.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self, experiment_id: int) -> None:
        """Tell every subscriber that the experiment may have changed; never blocks."""
        for sub in self._subscribers:
            if sub.overflowed:
                continue
            if experiment_id not in sub.pending and len(sub.pending) >= sub.max_pending:
                sub.overflowed = True
            else:
                sub.pending.add(experiment_id)
            sub.wake.set()


class ClusterChanges:
    """Subscribers of changes to the cluster: its agents (enabled, reachable), the job queue
    and the allocations holding or waiting for slots.

    The :class:`~det_hub.service.cluster.Cluster` holds one (``changes``) and calls
    :meth:`publish` after every change it makes. A subscription is an event that is set by a
    change and cleared by its reader; many changes before a read are one, since a reader reads
    the whole cluster again, so nothing queues up and no subscriber can fall behind.
    """

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Event] = set()

    def subscribe(self) -> asyncio.Event:
        sub = asyncio.Event()
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: asyncio.Event) -> None:
        self._subscribers.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def publish(self) -> None:
        """Tell every subscriber that the cluster changed; never blocks."""
        for sub in self._subscribers:
            sub.set()


__all__ = [
    "DEFAULT_PENDING_EXPERIMENTS",
    "DEFAULT_QUEUE_ROWS",
    "ChangeSubscription",
    "ClusterChanges",
    "ExperimentChanges",
    "MetricEvents",
    "Subscription",
    "metric_json",
]
