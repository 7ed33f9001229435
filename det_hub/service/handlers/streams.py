"""Live streams for UIs as Server-Sent Events: an experiment's metrics, the experiment list,
and the cluster."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from tornado.iostream import StreamClosedError
from tornado.web import RequestHandler

from det_hub import nonfinite
from det_hub.service.errors import BadRequest
from det_hub.service.events import (
    Event,
    ExperimentFilter,
    cluster_events,
    experiment_events,
    experiment_list_events,
)
from det_hub.service.handlers.base import APIHandler

ID = r"(?P<experiment_id>\d+)"

HEARTBEAT_QUERY = ("number", "seconds between comment lines on a quiet stream, 1 to 60 "
                             "(default 15)")


def sse_frame(name: str | None, data: Any) -> str:
    """One Server-Sent Events frame; a ``None`` name makes a comment line (a heartbeat).
    Metric rows carry their id as the event id, so a browser's ``EventSource`` resumes from
    it by itself (``Last-Event-ID``)."""
    if name is None:
        return f": {data}\n\n"
    head = f"id: {data['id']}\n" if name == "metrics" else ""
    return f"{head}event: {name}\ndata: {nonfinite.dumps(data, separators=(',', ':'))}\n\n"


class EventSender(RequestHandler):
    """Answers with Server-Sent Events from an async generator of batches (for the REST API's
    streams and the pages' alike)."""

    #: Seconds between comment lines on a quiet stream, which keep proxies from closing it.
    heartbeat = 15.0
    #: Seconds between looks at what the stream follows (and the master stopping) while
    #: nothing arrives.
    poll = 0.5

    _gone = False

    async def send_events(self, events: AsyncGenerator[list[Event], None]) -> None:
        """Send each batch of ``events`` as it comes, until it ends or the client goes."""
        self.set_header("Content-Type", "text/event-stream; charset=UTF-8")
        # Asks nginx-style proxies (the hub's included) not to hold events back.
        self.set_header("X-Accel-Buffering", "no")
        async with contextlib.aclosing(events):
            try:
                async for batch in events:
                    if self._gone:
                        return
                    self.write("".join(sse_frame(name, data) for name, data in batch))
                    await self.flush()
            except StreamClosedError:
                return
        self.finish()

    def on_connection_close(self) -> None:
        self._gone = True
        super().on_connection_close()


class EventStreamHandler(EventSender, APIHandler):
    """A REST API endpoint answering with Server-Sent Events."""

    def heartbeat_arg(self) -> float:
        raw = self.get_query_argument("heartbeat", None)
        if raw is None or raw == "":
            return self.heartbeat
        try:
            value = float(raw)
        except ValueError:
            raise BadRequest("heartbeat: must be a number of seconds") from None
        if not 1.0 <= value <= 60.0:
            raise BadRequest("heartbeat: must be between 1 and 60 seconds")
        return value


class ExperimentMetricStreamHandler(EventStreamHandler):
    query = {"get": {
        "after_id": ("integer", "only metric rows with a greater id (default: the "
                                "Last-Event-ID header, else 0)"),
        "heartbeat": HEARTBEAT_QUERY,
    }}
    answers = {"get": "text/event-stream: metrics, state, end and reconnect events"}

    async def get(self, experiment_id: str) -> None:
        """Stream the metrics of the experiment's trials as Server-Sent Events until it ends."""
        eid = int(experiment_id)
        await self.master.experiments.get(eid)
        after = self._after_id()
        heartbeat = self.heartbeat_arg()
        await self.send_events(experiment_events(self.master, eid, after, heartbeat=heartbeat,
                                                 poll=self.poll))

    def _after_id(self) -> int:
        if self.get_query_argument("after_id", None) is not None:
            return self.int_arg("after_id", 0)
        header = self.request.headers.get("Last-Event-ID", "").strip()
        if not header:
            return 0
        if not header.isdigit():
            raise BadRequest("Last-Event-ID: must be a metric row id")
        return int(header)


class ExperimentListStreamHandler(EventStreamHandler):
    query = {"get": {
        "state": ("string", "only experiments in this state (repeat for several)"),
        "archived": ("boolean", "only archived (true) or unarchived (false) experiments"),
        "owner": ("string", "only experiments of this user"),
        "limit": ("integer", "experiments in the first snapshot (default 100, at most 1000)"),
        "heartbeat": HEARTBEAT_QUERY,
    }}
    answers = {"get": "text/event-stream: snapshot, experiment, removed and reconnect events"}

    async def get(self) -> None:
        """Stream the experiment list as Server-Sent Events: a snapshot, then every change."""
        states, owner_id = await self.experiment_filters()
        where = ExperimentFilter(owner_id=owner_id, archived=self.bool_arg("archived"),
                                 states=frozenset(states) if states else None)
        limit = self.int_arg("limit", 100, 1, 1000)
        heartbeat = self.heartbeat_arg()
        await self.send_events(experiment_list_events(self.master, where, limit=limit,
                                                      heartbeat=heartbeat, poll=self.poll))


class ClusterStreamHandler(EventStreamHandler):
    query = {"get": {"heartbeat": HEARTBEAT_QUERY}}
    answers = {"get": "text/event-stream: snapshot (a ClusterState), cluster (the parts of a "
                      "ClusterState that changed) and reconnect events"}

    async def get(self) -> None:
        """Stream the cluster as Server-Sent Events: its agents, pools, job queue and
        allocations, then every change."""
        heartbeat = self.heartbeat_arg()
        # Every user sees it all, as GET /agents, /resource_pools and /jobs show it.
        await self.send_events(cluster_events(self.master, heartbeat=heartbeat, poll=self.poll))


routes = [
    (r"/cluster/stream", ClusterStreamHandler),
    (r"/experiments/stream", ExperimentListStreamHandler),
    (rf"/experiments/{ID}/metrics/stream", ExperimentMetricStreamHandler),
]
