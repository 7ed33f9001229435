"""Live metric events: an in-process publish/subscribe of stored metric rows, and the event
sequence one streaming client of an experiment receives.

The master publishes each batch of metric rows once the store has committed it
(:meth:`MetricEvents.publish`); every stream of that experiment holds a bounded
:class:`Subscription`. :func:`experiment_events` turns a subscription plus the store into a
gap-free sequence: it subscribes first, replays the stored rows after the client's last id, then
passes live rows on, dropping those the replay already sent.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from det_hub.service.serialize import iso
from det_hub.states import ExperimentState

if TYPE_CHECKING:
    from det_hub.service.master import Master

#: Rows a subscriber may fall behind by before it is told to reconnect.
DEFAULT_QUEUE_ROWS = 10_000
#: Rows read from the store per replay query.
REPLAY_BATCH = 1_000


def metric_json(row: Any) -> dict[str, Any]:
    """A stored metric row (an ORM row or the mapping :meth:`Store.insert_metrics` answers) as
    the stream sends it."""
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

    def publish(self, experiment_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Hand committed rows to every subscriber of the experiment; never blocks."""
        subs = self._subscribers.get(experiment_id)
        if not subs or not rows:
            return
        events = [metric_json(r) for r in rows]
        for sub in subs:
            if sub.overflowed:
                continue
            for event in events:
                try:
                    sub.queue.put_nowait(event)
                except asyncio.QueueFull:
                    sub.overflowed = True
                    sub.wake.set()
                    break


_HUBS: weakref.WeakKeyDictionary[Master, MetricEvents] = weakref.WeakKeyDictionary()


def metric_events(master: Master) -> MetricEvents:
    """The master's :class:`MetricEvents`, made on first use."""
    hub = _HUBS.get(master)
    if hub is None:
        hub = _HUBS[master] = MetricEvents()
    return hub


#: One item of the stream: an event name and its JSON data, or ``(None, text)`` for a comment.
Event = tuple[str | None, Any]


async def experiment_events(
    master: Master,
    experiment_id: int,
    after_id: int = 0,
    *,
    heartbeat: float = 15.0,
    poll: float = 0.5,
) -> AsyncGenerator[list[Event], None]:
    """The events one client streaming an experiment gets, in batches to send together.

    Events: ``metrics`` (a row, see :func:`metric_json`) for every row with an id above
    ``after_id``, each once, ascending per trial; ``state`` (``{"experiment_id", "state",
    "progress", "trials": [{"id", "state", "steps_completed", "progress"}]}``) first and
    whenever it changes; a comment at least every ``heartbeat`` seconds; and last either ``end``
    (``{"after_id", "state"}``: the experiment is over and every row was sent) or ``reconnect``
    (``{"after_id"}``: the client fell too far behind, or the master is stopping; resume from
    that id).

    Args:
        poll: how often the experiment's state (and the master stopping) is looked at.
    """
    hub = metric_events(master)
    sub = hub.subscribe(experiment_id)
    # The last id sent per trial: ids grow in commit order within a trial, which reports one
    # batch at a time, so this drops exactly the rows the replay sent already.
    sent: dict[int, int] = {}
    last = after_id

    def fresh(rows: list[dict[str, Any]]) -> list[Event]:
        nonlocal last
        out: list[Event] = []
        for r in rows:
            if r["id"] <= sent.get(r["trial_id"], after_id):
                continue
            sent[r["trial_id"]] = r["id"]
            last = max(last, r["id"])
            out.append(("metrics", r))
        return out

    async def replay() -> AsyncIterator[list[Event]]:
        cursor = last
        while True:
            rows = await master.store.experiment_metrics_after(experiment_id, cursor,
                                                               REPLAY_BATCH)
            if not rows:
                return
            cursor = rows[-1].id
            batch = fresh([metric_json(r) for r in rows])
            if batch:
                yield batch
            if len(rows) < REPLAY_BATCH:
                return

    try:
        async for batch in replay():
            yield batch
        snapshot = await _state(master, experiment_id)
        yield [("state", snapshot)]
        sent_at = checked_at = time.monotonic()
        while True:
            if sub.overflowed or master.stopping:
                yield [("reconnect", {"after_id": last})]
                return
            rows = await _next_rows(sub, poll)
            batch = fresh(rows)
            now = time.monotonic()
            if now - checked_at >= poll or not rows:
                checked_at = now
                current = await _state(master, experiment_id)
                if current != snapshot:
                    snapshot = current
                    batch.append(("state", current))
                if ExperimentState(current["state"]).terminal:
                    # Rows committed after the last one published are read from the store.
                    async for more in replay():
                        batch.extend(more)
                    batch.append(("end", {"after_id": last, "state": current["state"]}))
                    yield batch
                    return
            if not batch and now - sent_at >= heartbeat:
                batch.append((None, "heartbeat"))
            if batch:
                sent_at = now
                yield batch
    finally:
        hub.unsubscribe(sub)


async def _next_rows(sub: Subscription, timeout: float) -> list[dict[str, Any]]:
    """Every row waiting in the subscription, after waiting up to ``timeout`` for the first."""
    rows: list[dict[str, Any]] = []
    if sub.queue.empty():
        getter = asyncio.ensure_future(sub.queue.get())
        waker = asyncio.ensure_future(sub.wake.wait())
        done, _ = await asyncio.wait({getter, waker}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        waker.cancel()
        if getter in done:
            rows.append(getter.result())
        else:
            getter.cancel()
            # A row may have been taken just as the wait gave up; keep it.
            if getter.done() and not getter.cancelled():
                rows.append(getter.result())
    while not sub.queue.empty():
        rows.append(sub.queue.get_nowait())
    return rows


async def _state(master: Master, experiment_id: int) -> dict[str, Any]:
    """What ``state`` events carry: read from the live run where there is one."""
    row = await master.get_experiment(experiment_id)
    run = master.runs.get(experiment_id)
    trials = list(run.trials.values()) if run is not None \
        else await master.store.list_trials(experiment_id)
    return {
        "experiment_id": experiment_id, "state": row.state, "progress": row.progress,
        "trials": [{"id": t.id, "state": t.state, "steps_completed": t.steps_completed,
                    "progress": t.progress} for t in sorted(trials, key=lambda t: t.id)],
    }


__all__ = [
    "DEFAULT_QUEUE_ROWS",
    "MetricEvents",
    "Subscription",
    "experiment_events",
    "metric_events",
    "metric_json",
]
