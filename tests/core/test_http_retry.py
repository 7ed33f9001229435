"""The Core API waits out a master that answers 503 (its database restarting, its disk full):
it follows Retry-After, within bounds, keeps trying up to its deadline, and neither drops nor
duplicates what training code reported."""

from __future__ import annotations

import email.utils
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from det_hub.core._http import MAX_RETRY_AFTER_S, MasterError, MasterSession, retry_after_seconds
from det_hub.core._metric_sender import MetricSender

TRIAL = 3
UNAVAILABLE = {"error": "the database is unavailable (PostgreSQL: the database system is "
                        "starting up); try again in 1 s", "details": []}


class Outage:
    """A stand-in master whose database is away for the next ``refusals`` calls (or until
    ``over`` is set): those are answered 503 with ``Retry-After``. Metric batches it takes are
    kept once per idempotency key, as the master does."""

    def __init__(self, refusals: int, retry_after: str | None = "1") -> None:
        self.refusals = refusals
        self.retry_after = retry_after
        self.over = threading.Event()
        self.lock = threading.Lock()
        self.answers: list[tuple[str, int]] = []
        self.batches: dict[str, dict[str, Any]] = {}
        self.progress: list[float | None] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def statuses(self, path: str) -> list[int]:
        with self.lock:
            return [status for p, status in self.answers if p == path]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outage = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                path = self.path.removeprefix("/api/v1")
                with outage.lock:
                    refuse = outage.refusals > 0 and not outage.over.is_set()
                    outage.refusals -= refuse
                    outage.answers.append((path, 503 if refuse else 200))
                    if not refuse and path.endswith("/metrics"):
                        outage.batches.setdefault(body["key"], body)
                    if not refuse and path.endswith("/progress"):
                        outage.progress.append(body.get("progress"))
                if refuse:
                    data = json.dumps(UNAVAILABLE).encode()
                    self.send_response(503)
                    if outage.retry_after is not None:
                        self.send_header("Retry-After", outage.retry_after)
                else:
                    data = b'{"count": 1}'
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def outage() -> Iterator[Outage]:
    server = Outage(refusals=2)
    yield server
    server.close()


def test_a_retried_call_waits_as_long_as_retry_after_says(outage: Outage) -> None:
    waits: list[float] = []
    session = MasterSession(outage.url, "t", sleep=waits.append)
    assert session.post("/trials/3/progress", {"progress": 0.5}, retry=True) == {"count": 1}
    assert outage.statuses("/trials/3/progress") == [503, 503, 200]
    assert waits == [1.0, 1.0]  # the header's, not the 0.25 s the backoff starts with


def test_a_call_not_safe_to_repeat_gets_the_503_and_its_reason(outage: Outage) -> None:
    session = MasterSession(outage.url, "t", sleep=lambda s: None)
    with pytest.raises(MasterError) as raised:
        session.post("/trials/3/alerts", {"title": "x"})
    assert raised.value.status == 503
    assert raised.value.error.startswith("the database is unavailable (PostgreSQL: the "
                                         "database system is starting up)")
    assert outage.statuses("/trials/3/alerts") == [503]


def test_retry_after_is_bounded_by_the_limit_and_the_deadline() -> None:
    server = Outage(refusals=2, retry_after="3600")
    try:
        waits: list[float] = []
        session = MasterSession(server.url, "t", sleep=waits.append, retry_deadline=600)
        session.post("/trials/3/progress", {}, retry=True)
        assert waits == [MAX_RETRY_AFTER_S, MAX_RETRY_AFTER_S]

        server.refusals = 1
        waits.clear()
        short = MasterSession(server.url, "t", sleep=waits.append, retry_deadline=4)
        short.post("/trials/3/progress", {}, retry=True)
        assert len(waits) == 1 and 3.5 < waits[0] <= 4.0
    finally:
        server.close()


def test_without_retry_after_the_backoff_doubles() -> None:
    server = Outage(refusals=3, retry_after=None)
    try:
        waits: list[float] = []
        MasterSession(server.url, "t", sleep=waits.append).post("/x", {}, retry=True)
        assert waits == [0.25, 0.5, 1.0]
    finally:
        server.close()


def test_a_master_that_stays_away_fails_the_call_at_the_deadline() -> None:
    server = Outage(refusals=10**6, retry_after="1")
    try:
        session = MasterSession(server.url, "t", retry_deadline=1.5)
        began = time.monotonic()
        with pytest.raises(MasterError) as raised:
            session.post("/trials/3/progress", {}, retry=True)
        assert raised.value.status == 503
        assert 1.4 < time.monotonic() - began < 10
        # Tried at the start, after the 1 s asked for, and once more at the deadline.
        assert server.statuses("/trials/3/progress") == [503, 503, 503]
    finally:
        server.close()


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("100000") == MAX_RETRY_AFTER_S
    soon = email.utils.formatdate(time.time() + 10, usegmt=True)
    found = retry_after_seconds(soon)
    assert found is not None and 8 <= found <= 10
    assert retry_after_seconds(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("-5") is None


def test_metric_batches_wait_out_the_outage_and_are_stored_once() -> None:
    server = Outage(refusals=3, retry_after="1")
    try:
        session = MasterSession(server.url, "t")
        sender = MetricSender(session, TRIAL, batch_interval=0.05, max_batch=4)
        for step in range(1, 11):
            sender.put("training", {"steps_completed": step, "metrics": {"loss": 1 / step}})
        sender.flush(timeout=30)
        sender.close()
        statuses = server.statuses(f"/trials/{TRIAL}/metrics")
        assert statuses.count(503) == 3 and statuses[-1] == 200
        steps = [step for batch in server.batches.values() for step in batch["steps"]]
        assert sorted(steps) == list(range(1, 11))  # every row, each once
        keys = list(server.batches)
        assert all(k.rsplit(":", 1)[0] == keys[0].rsplit(":", 1)[0] for k in keys)
    finally:
        server.close()


def test_frequent_reports_cost_no_request_each() -> None:
    """A training loop reporting metrics and progress every few milliseconds (a Trainer's
    reports on fast batches) makes at most one request of each kind per batch interval: each
    request's work on the sender's thread takes time from the loop. Flushing sends the latest
    progress at once."""
    server = Outage(refusals=0)
    interval = 0.5
    try:
        sender = MetricSender(MasterSession(server.url, "t"), TRIAL, batch_interval=interval)
        started = time.monotonic()
        for step in range(1, 201):
            sender.put("training", {"steps_completed": step, "metrics": {"loss": 1.0}})
            sender.set_progress(step / 200)
            time.sleep(0.003)
        sender.flush(timeout=30)
        elapsed = time.monotonic() - started
        sender.close()
        most = int(elapsed / interval) + 2  # one per interval, and the flush's
        assert 1 <= len(server.statuses(f"/trials/{TRIAL}/progress")) <= most, elapsed
        assert 1 <= len(server.statuses(f"/trials/{TRIAL}/metrics")) <= most, elapsed
        assert server.progress[-1] == 1.0
        steps = sorted(step for batch in server.batches.values() for step in batch["steps"])
        assert steps == list(range(1, 201))
    finally:
        server.close()


def test_reporting_blocks_when_the_queue_is_full_and_loses_nothing() -> None:
    server = Outage(refusals=10**6, retry_after="1")
    try:
        sender = MetricSender(MasterSession(server.url, "t"), TRIAL, batch_interval=0.01,
                              max_batch=2, max_queued=4)
        reported: list[int] = []

        def train() -> None:
            for step in range(1, 9):
                sender.put("training", {"steps_completed": step, "metrics": {"loss": 1.0}})
                reported.append(step)

        training = threading.Thread(target=train, daemon=True)
        training.start()
        time.sleep(1.5)
        # The master refuses everything: four rows wait, and the fifth report waits for room.
        assert reported == [1, 2, 3, 4]
        assert training.is_alive()
        server.over.set()
        training.join(timeout=30)
        assert reported == list(range(1, 9))
        sender.close(timeout=30)
        steps = sorted(step for batch in server.batches.values() for step in batch["steps"])
        assert steps == list(range(1, 9))
    finally:
        server.close()


def test_training_batches_go_to_the_ingest_workers_and_fall_back_to_the_master() -> None:
    ingest = Outage(refusals=1)  # refuses the first batch only
    master = Outage(refusals=0)
    path = f"/trials/{TRIAL}/metrics"
    try:
        sender = MetricSender(MasterSession(master.url, "t"), TRIAL, batch_interval=0.01,
                              max_batch=2, ingest=MasterSession(ingest.url, "t"))
        for step in range(1, 7):
            sender.put("training", {"steps_completed": step, "metrics": {"loss": 1.0}})
            sender.flush(timeout=30)
        sender.put("validation", {"steps_completed": 6, "metrics": {"loss": 1.0}})
        sender.flush(timeout=30)
        sender.close()
        assert ingest.statuses(path) == [503, 200, 200, 200, 200, 200]
        # The refused batch went to the master under its key; validations only go there.
        assert master.statuses(path) == [200, 200]
        assert [b["group"] for b in master.batches.values()] == ["training", "validation"]
        stored = [*ingest.batches.values(), *master.batches.values()]
        assert sorted(s for b in stored if b["group"] == "training"
                      for s in b["steps"]) == list(range(1, 7))
    finally:
        ingest.close()
        master.close()


def test_unreachable_ingest_workers_are_left_alone_for_a_while() -> None:
    master = Outage(refusals=0)
    dead = Outage(refusals=0)
    dead.close()  # nothing listens there any more
    path = f"/trials/{TRIAL}/metrics"
    try:
        sender = MetricSender(MasterSession(master.url, "t"), TRIAL, batch_interval=0.01,
                              ingest=MasterSession(dead.url, "t"))
        for step in range(1, 4):
            sender.put("training", {"steps_completed": step, "metrics": {"loss": 1.0}})
            sender.flush(timeout=30)
        sender.close()
        assert master.statuses(path) == [200, 200, 200]
        assert sender._ingest_after > time.monotonic() + 20  # not tried again for 30 s
    finally:
        master.close()
