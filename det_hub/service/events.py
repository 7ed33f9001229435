"""The event sequences one streaming client receives, built on :mod:`det_hub.service.pubsub`.

:func:`experiment_events` turns a subscription to an experiment's metric rows into a gap-free
sequence: it subscribes first, replays the stored rows after the client's last id, then passes
live rows on, dropping those the replay already sent. :func:`experiment_list_events` subscribes
to experiment changes, sends a snapshot of the list, then the summary of each changed
experiment, read again from the store, whenever it differs from what that client was last
sent. :func:`cluster_events` does the same for the cluster's agents, pools, queue and
allocations, read from the master's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from det_hub.service.pubsub import Subscription, metric_json
from det_hub.states import ExperimentState, shown_trial_state

#: Rows read from the store per replay query.
REPLAY_BATCH = 1_000

if TYPE_CHECKING:
    from det_hub.service.master import Master
    from det_hub.store import Experiment

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
    ``after_id``, each once, ascending per trial; ``rolled_back`` (``{"trial_id", "run_id",
    "steps_completed"}``) when a new run of a trial rolled back the rows its earlier runs
    reported past ``steps_completed``, so that a client drops those it has; ``state`` (``{"experiment_id", "state",
    "shown_state", "progress", "trials": [{"id", "state", "shown_state", "steps_completed",
    "progress", "hparams", "searcher_metric_value", "restarts", "latest_checkpoint"}]}``) first and
    whenever it changes; a comment at least every ``heartbeat`` seconds; and last either ``end``
    (``{"after_id", "state"}``: the experiment is over and every row was sent) or ``reconnect``
    (``{"after_id"}``: the client fell too far behind, or the master is stopping; resume from
    that id).

    Args:
        poll: how often the experiment's state (and the master stopping) is looked at.
    """
    hub = master.metric_events
    sub = hub.subscribe(experiment_id)
    # The last id sent per trial: ids grow in commit order within a trial, which reports one
    # batch at a time, so this drops exactly the rows the replay sent already.
    sent: dict[int, int] = {}
    last = after_id

    def fresh(rows: list[dict[str, Any]]) -> list[Event]:
        nonlocal last
        out: list[Event] = []
        for r in rows:
            if "rolled_back" in r:
                out.append(("rolled_back", r["rolled_back"]))
                continue
            if r["id"] <= sent.get(r["trial_id"], after_id):
                continue
            sent[r["trial_id"]] = r["id"]
            last = max(last, r["id"])
            out.append(("metrics", r))
        return out

    async def replay() -> AsyncIterator[list[Event]]:
        cursor = last
        while True:
            rows = await master.trials.metrics_after(experiment_id, cursor, REPLAY_BATCH)
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
    row = await master.experiments.get(experiment_id)
    trials = await master.experiments.trials(experiment_id)
    return {
        "experiment_id": experiment_id, "state": row.state,
        "shown_state": master.experiments.shown_state(row), "progress": row.progress,
        "trials": [{"id": t.id, "state": t.state,
                    "shown_state": shown_trial_state(t.state, t.run_state),
                    "steps_completed": t.steps_completed, "progress": t.progress,
                    "hparams": t.hparams, "searcher_metric_value": t.searcher_metric_value,
                    "restarts": t.restarts, "latest_checkpoint": t.latest_checkpoint}
                   for t in trials],
    }


# --- the experiment list ---------------------------------------------------------------------

@dataclass(frozen=True)
class ExperimentFilter:
    """Which experiments a list stream shows: the filters of ``GET /experiments``; ``None``
    leaves one out."""

    owner_id: int | None = None
    archived: bool | None = None
    states: frozenset[str] | None = None

    def matches(self, row: Experiment, shown_state: str) -> bool:
        """Whether the list shows ``row``, whose state the REST API shows as
        ``shown_state``."""
        return ((self.owner_id is None or row.owner_id == self.owner_id)
                and (self.archived is None or bool(row.archived) == self.archived)
                and (self.states is None or row.state in self.states
                     or shown_state in self.states))


async def experiment_list_events(
    master: Master,
    where: ExperimentFilter = ExperimentFilter(),
    *,
    limit: int = 100,
    heartbeat: float = 15.0,
    poll: float = 0.5,
    min_interval: float = 0.25,
) -> AsyncGenerator[list[Event], None]:
    """The events one client streaming the experiment list gets, in batches to send together.

    Events: ``snapshot`` (``{"experiments": [...], "total"}``: the newest ``limit`` experiments
    that match, as ``GET /experiments`` lists them) first; then ``experiment`` (an experiment's
    summary, the same JSON) for each matching experiment created or changed, whenever its
    summary differs from what this client was last sent; ``removed`` (``{"id"}``) when one it
    was sent matches no more (archived, under ``archived=false``); a comment at least every
    ``heartbeat`` seconds; and last, ``reconnect`` (``{}``) when more experiments changed than
    the subscription holds before the client read them, or the master is stopping: connect
    again for a fresh snapshot.

    Args:
        poll: how often, at the least, the master stopping and the heartbeat are looked at.
        min_interval: the least time between two reads of changed experiments, so that a
            burst of changes (trials reporting progress) costs one read per client.
    """
    changes = master.experiment_changes
    # Subscribed before the snapshot is read: what changes meanwhile is read again after it.
    sub = changes.subscribe()
    try:
        rows, total = await master.experiments.query(
            states=where.states, archived=where.archived, owner_id=where.owner_id, limit=limit)
        summaries = await master.experiments.to_json(rows)
        sent: dict[int, dict[str, Any]] = {e["id"]: e for e in summaries}
        yield [("snapshot", {"experiments": summaries, "total": total})]
        sent_at = read_at = time.monotonic()
        while True:
            if sub.overflowed or master.stopping:
                yield [("reconnect", {})]
                return
            if not sub.pending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sub.wake.wait(), poll)
            batch: list[Event] = []
            if sub.pending and not sub.overflowed:
                wait = read_at + min_interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                read_at = time.monotonic()
                batch = await _changed(master, where, sub.take(), sent)
            now = time.monotonic()
            if not batch and now - sent_at >= heartbeat:
                batch.append((None, "heartbeat"))
            if batch:
                sent_at = now
                yield batch
    finally:
        changes.unsubscribe(sub)


async def _changed(master: Master, where: ExperimentFilter, ids: list[int],
                   sent: dict[int, dict[str, Any]]) -> list[Event]:
    """The events for experiments that may have changed, as the store has them now; ``sent``
    (what the client was sent last, by id) is brought up to date."""
    rows = [row for row in [await master.experiments.stored(i) for i in ids]
            if row is not None]
    shown = [row for row in rows if where.matches(row, master.experiments.shown_state(row))]
    events: list[Event] = []
    for summary in await master.experiments.to_json(shown):
        if sent.get(summary["id"]) != summary:
            sent[summary["id"]] = summary
            events.append(("experiment", summary))
    for row in rows:
        still_shown = where.matches(row, master.experiments.shown_state(row))
        if not still_shown and sent.pop(row.id, None) is not None:
            events.append(("removed", {"id": row.id}))
    return events


# --- the cluster -------------------------------------------------------------------------------

async def cluster_events(
    master: Master,
    *,
    heartbeat: float = 15.0,
    poll: float = 0.5,
    min_interval: float = 0.15,
) -> AsyncGenerator[list[Event], None]:
    """The events one client streaming the cluster gets, in batches to send together.

    Events: ``snapshot`` first, the whole cluster (:meth:`JobQueue.state
    <det_hub.service.jobs.JobQueue.state>`: ``{"agents", "resource_pools", "jobs",
    "allocations"}``); then ``cluster`` whenever any of it changes (an agent enabled, disabled
    or unreachable, a slot assigned or freed, a job queued, started or ended, its priority,
    weight or place changed), with each of those four parts that differs from what this
    client was last sent, whole; a comment at least every ``heartbeat`` seconds; and last,
    ``reconnect`` (``{}``) when the master is stopping: connect again for a fresh snapshot.

    Only the cluster's own notifications (:class:`~det_hub.service.pubsub.ClusterChanges`)
    make it read the cluster again.

    Args:
        poll: how often, at the least, the master stopping and the heartbeat are looked at.
        min_interval: the least time between two reads of the cluster, so that a burst of
            changes (a round of the scheduler placing many allocations) is one event. What
            changes during the pause is read after it: the last state is always sent.
    """
    changes = master.cluster_changes
    # Subscribed before the snapshot is read: what changes meanwhile is read again after it.
    sub = changes.subscribe()
    try:
        sent = master.jobs.state()
        yield [("snapshot", sent)]
        sent_at = read_at = time.monotonic()
        while True:
            if master.stopping:
                yield [("reconnect", {})]
                return
            if not sub.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sub.wait(), poll)
            batch: list[Event] = []
            if sub.is_set():
                wait = read_at + min_interval - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                # Cleared before the read: a change after it sets it again, and is read next.
                sub.clear()
                read_at = time.monotonic()
                current = master.jobs.state()
                parts = {key: value for key, value in current.items() if sent[key] != value}
                if parts:
                    sent = current
                    batch.append(("cluster", parts))
            now = time.monotonic()
            if not batch and now - sent_at >= heartbeat:
                batch.append((None, "heartbeat"))
            if batch:
                sent_at = now
                yield batch
    finally:
        changes.unsubscribe(sub)


__all__ = [
    "Event",
    "ExperimentFilter",
    "cluster_events",
    "experiment_events",
    "experiment_list_events",
]
