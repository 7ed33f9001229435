"""Live streams for UIs: an experiment's metrics as Server-Sent Events."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from tornado.iostream import StreamClosedError

from det_hub.service.errors import BadRequest
from det_hub.service.events import experiment_events
from det_hub.service.handlers.base import APIHandler

ID = r"(?P<experiment_id>\d+)"


def sse_frame(name: str | None, data: Any) -> str:
    """One Server-Sent Events frame; a ``None`` name makes a comment line (a heartbeat).
    Metric rows carry their id as the event id, so a browser's ``EventSource`` resumes from
    it by itself (``Last-Event-ID``)."""
    if name is None:
        return f": {data}\n\n"
    head = f"id: {data['id']}\n" if name == "metrics" else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class ExperimentMetricStreamHandler(APIHandler):
    query = {"get": {
        "after_id": ("integer", "only metric rows with a greater id (default: the "
                                "Last-Event-ID header, else 0)"),
        "heartbeat": ("number", "seconds between comment lines on a quiet stream, 1 to 60 "
                                "(default 15)"),
    }}
    answers = {"get": "text/event-stream: metrics, state, end and reconnect events"}
    #: Seconds between comment lines on a quiet stream, which keep proxies from closing it.
    heartbeat = 15.0
    #: Seconds between looks at the experiment's state while no row arrives.
    poll = 0.5

    _gone = False

    async def get(self, experiment_id: str) -> None:
        """Stream the metrics of the experiment's trials as Server-Sent Events until it ends."""
        eid = int(experiment_id)
        await self.master.get_experiment(eid)
        after = self._after_id()
        heartbeat = self._heartbeat()
        self.set_header("Content-Type", "text/event-stream; charset=UTF-8")
        # Asks nginx-style proxies (the hub's included) not to hold events back.
        self.set_header("X-Accel-Buffering", "no")
        events = experiment_events(self.master, eid, after, heartbeat=heartbeat,
                                   poll=self.poll)
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

    def _heartbeat(self) -> float:
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

    def _after_id(self) -> int:
        if self.get_query_argument("after_id", None) is not None:
            return self.int_arg("after_id", 0)
        header = self.request.headers.get("Last-Event-ID", "").strip()
        if not header:
            return 0
        if not header.isdigit():
            raise BadRequest("Last-Event-ID: must be a metric row id")
        return int(header)


routes = [
    (rf"/experiments/{ID}/metrics/stream", ExperimentMetricStreamHandler),
]
