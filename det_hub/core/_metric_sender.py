"""Sends reported metrics to the master from a background thread, in batches.

Reporting must never stall training, and the master may be down for a while (it restarts in
the middle of experiments), so rows are queued here and a single thread posts them in order.
A batch stays at the head of the queue until the master has acknowledged it, so rows are not
dropped while the master is away or answers 503 (its database restarting, its disk full);
each batch carries a key the master stores with it, so a batch retried after its answer was
lost is stored once. The queue is bounded: when it is full, reporting waits for room rather
than dropping rows.

Where the master runs ingest workers, training batches go to them (``ingest``) and validations
to the master, whose searcher acts on them. A batch the workers do not take (they are
restarting, or refuse it) goes to the master instead, under the same key: it is stored once
either way, and the master's answer is the one that counts.

The master's answer to a batch says what it decided on it (``preempt``: the trial must stop,
as a searcher decides at a rung); ``on_answer`` hears every answer before the batch counts as
sent, so a report that waits for its batch (:meth:`MetricSender.flush`) knows the decision
when it returns.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from det_hub.core._http import MasterError, MasterSession

logger = logging.getLogger("det_hub.core")

#: Seconds batches go to the master once the ingest workers could not be reached.
INGEST_PAUSE_S = 30.0


class MetricSender:
    """A queue of metric rows and the thread that posts them to ``/trials/{id}/metrics``.

    Args:
        session: The master session; its ``retry_deadline`` bounds how long one batch is retried.
        trial_id: The trial the rows belong to.
        batch_interval: Seconds a row may wait for companions before it is sent.
        max_batch: The most rows sent in one request.
        max_queued: The most rows waiting to be sent; :meth:`put` blocks while this many are.
        on_answer: Called on the sender's thread with a batch's group and the master's answer
            to it, before the batch counts as sent.
        ingest: A session with the master's ingest workers, which take every batch but
            validations (see the module's docstring).
    """

    def __init__(
        self,
        session: MasterSession,
        trial_id: int,
        *,
        batch_interval: float = 1.0,
        max_batch: int = 500,
        max_queued: int = 100_000,
        on_answer: Callable[[str, Any], None] | None = None,
        ingest: MasterSession | None = None,
    ) -> None:
        self._session = session
        self._ingest = ingest
        # After the workers could not be reached, batches go to the master until then.
        self._ingest_after = 0.0
        self._trial_id = trial_id
        self._batch_interval = batch_interval
        self._max_batch = max_batch
        self._max_queued = max(max_queued, max_batch)
        self._on_answer = on_answer
        self._cond = threading.Condition()
        self._rows: deque[tuple[str, dict[str, Any], float]] = deque()
        self._progress: float | None = None
        self._progress_sent_at = 0.0  # monotonic; the first update goes at once
        self._queued = 0  # rows ever queued
        self._done = 0  # rows ever sent (or given up on)
        self._urgent = False
        self._closing = False
        self._error: MasterError | None = None
        # Each batch carries this sender's key and its number, so that a batch sent again
        # after an answer was lost (a timeout, the master restarting) is stored once.
        self._run_key = uuid.uuid4().hex
        self._batches_sent = 0
        self._thread = threading.Thread(target=self._run, name="det-hub-metrics", daemon=True)
        self._thread.start()

    def put(self, group: str, row: dict[str, Any], *, urgent: bool = False) -> None:
        """Queue one row of ``group``; ``urgent`` sends everything queued without waiting.

        Blocks while ``max_queued`` rows wait already (the master has not taken them for a
        while), until the sender has delivered some.

        Raises:
            MasterError: A batch was refused by the master or could not be delivered.
        """
        self.raise_error()
        with self._cond:
            if len(self._rows) >= self._max_queued:
                logger.warning("%d metric rows wait to be sent; reporting waits for room",
                               len(self._rows))
                self._urgent = True
                self._cond.notify_all()
            while len(self._rows) >= self._max_queued and self._error is None:
                if not self._thread.is_alive():
                    raise RuntimeError("the metric sender thread has stopped")
                self._cond.wait(1.0)
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            if self._closing:
                raise RuntimeError("metrics reported after the context was closed")
            self._rows.append((group, row, time.monotonic()))
            self._queued += 1
            self._urgent = self._urgent or urgent
            self._cond.notify_all()

    def set_progress(self, progress: float) -> None:
        """Queue a progress update; only the latest one is sent, at most one per
        ``batch_interval`` (sooner on :meth:`flush`), so that frequent updates cost the
        training loop no request each."""
        self.raise_error()
        with self._cond:
            self._progress = progress
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything queued so far has been sent.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            MasterError: A batch was refused by the master or could not be delivered.
        """
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._queued
            self._urgent = True
            self._cond.notify_all()
            while self._done < target or self._progress is not None:
                if not self._thread.is_alive():
                    break
                remaining = None if end is None else end - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{target - self._done} metric rows not yet sent")
                self._cond.wait(remaining)
        self.raise_error()

    def close(self, timeout: float | None = None) -> None:
        """Send everything still queued, then stop the thread."""
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._thread.join(timeout=5)
            if self._ingest is not None:
                self._ingest.close()

    def raise_error(self) -> None:
        """Raise (once) the error that made the thread give up on a batch."""
        with self._cond:
            err, self._error = self._error, None
        if err is not None:
            raise err

    def _next_work(self) -> tuple[str, list[dict[str, Any]]] | tuple[None, float] | None:
        """Under the lock: a batch to send, progress to send, or None to stop. Waits as needed."""
        while True:
            due = self._urgent or self._closing
            if self._rows:
                oldest = self._rows[0][2]
                wait = oldest + self._batch_interval - time.monotonic()
                if due or len(self._rows) >= self._max_batch or wait <= 0:
                    group = self._rows[0][0]
                    batch: list[dict[str, Any]] = []
                    for g, row, _ in self._rows:
                        # One POST carries one group; keep order by stopping at a group change.
                        if g != group or len(batch) >= self._max_batch:
                            break
                        batch.append(row)
                    return group, batch
            elif self._progress is not None:
                wait = self._progress_sent_at + self._batch_interval - time.monotonic()
                if due or wait <= 0:
                    return None, self._progress
            else:
                self._urgent = False
                if self._closing:
                    return None
                self._cond.wait()
                continue
            self._cond.wait(wait)

    def _run(self) -> None:
        path = f"/trials/{self._trial_id}/metrics"
        while True:
            with self._cond:
                work = self._next_work()
            if work is None:
                return
            first, payload = work
            if first is None:
                assert isinstance(payload, float)
                self._send_progress(payload)
                continue
            assert isinstance(payload, list)
            error: MasterError | None = None
            self._batches_sent += 1
            body = batch_body(first, payload, f"{self._run_key}:{self._batches_sent}")
            answer: Any = None
            try:
                answer = self._post(path, first, body)
            except MasterError as exc:
                error = exc
                logger.error("could not send %d %s metric rows: %s", len(payload), first, exc)
            except Exception as exc:  # never let the sender thread die silently
                error = MasterError(0, f"unexpected error sending metrics: {exc!r}")
                logger.exception("could not send metrics")
            if error is None and self._on_answer is not None:
                try:
                    self._on_answer(first, answer)
                except Exception:  # the rows are stored; only what the answer said is lost
                    logger.exception("could not take the master's answer to a metrics batch")
            with self._cond:
                for _ in payload:
                    self._rows.popleft()
                self._done += len(payload)
                if error is not None and self._error is None:
                    self._error = error
                self._cond.notify_all()

    def _post(self, path: str, group: str, body: dict[str, Any]) -> Any:
        """Post a batch: to the ingest workers first, unless it is a validation or they could
        not be reached in the last :data:`INGEST_PAUSE_S`; to the master, retried, when they
        do not take it."""
        if self._ingest is not None and group != "validation" \
                and time.monotonic() >= self._ingest_after:
            try:
                return self._ingest.post(path, body, retry=False)
            except MasterError as exc:
                if exc.status == 0:
                    self._ingest_after = time.monotonic() + INGEST_PAUSE_S
                logger.info("the ingest workers did not take %d %s metric rows (%s); sending "
                            "them to the master", len(body.get("steps") or body["metrics"]),
                            group, exc)
        return self._session.post(path, body, retry=True)

    def _send_progress(self, progress: float) -> None:
        self._progress_sent_at = time.monotonic()
        try:
            self._session.post(
                f"/trials/{self._trial_id}/progress", {"progress": progress}, retry=True
            )
        except Exception as exc:  # progress is advisory: a lost update is replaced by the next
            logger.warning("could not send progress %.3f: %s", progress, exc)
        with self._cond:
            if self._progress == progress:
                self._progress = None
            self._cond.notify_all()


def batch_body(group: str, rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The body that reports ``rows`` of one group: as columns (one list of steps, one list
    per metric, the report times as seconds since the epoch) when every row has the same
    metrics, which is smaller and what the master stores as it comes; else as rows."""
    names = list(rows[0]["metrics"]) if rows else []
    if not rows or not all(len(r["metrics"]) == len(names)
                           and all(n in r["metrics"] for n in names) for r in rows):
        return {"group": group, "metrics": rows, "key": key}
    body: dict[str, Any] = {
        "group": group, "key": key, "steps": [r["steps_completed"] for r in rows],
        "metrics": {n: [r["metrics"][n] for r in rows] for n in names}}
    times = [r.get("report_time") for r in rows]
    if all(isinstance(t, str) for t in times):
        body["report_times"] = [
            datetime.datetime.fromisoformat(str(t).replace("Z", "+00:00")).timestamp()
            for t in times]
    return body
