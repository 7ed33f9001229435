"""The live experiment list: a snapshot, then each change of an experiment's summary wherever
the master makes it, filtered as the list is; heartbeats, and the request to reconnect.

Most of it against the master's manager (real store, a local agent that runs nothing: the
experiments here are created paused), then the wire format through a real master's HTTP.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml

from det_hub.service import wire
from det_hub.service.events import Event, ExperimentFilter, experiment_list_events
from det_hub.service.master import Master, Principal
from det_hub.service.pubsub import ExperimentChanges
from det_hub.testing import MasterProcess

CONFIG = yaml.safe_dump({
    "name": "listed", "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}})


async def next_batch(events: Any, timeout: float = 5.0) -> list[Event]:
    batch: list[Event] = await asyncio.wait_for(anext(events), timeout)
    return batch


async def until(events: Any, done: Any, timeout: float = 10.0) -> list[Event]:
    """Batches' events (heartbeats left out) until one satisfies ``done``."""
    seen: list[Event] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not any(done(e) for e in seen):
        seen += [e for e in await next_batch(events, deadline - loop.time()) if e[0]]
    return seen


def experiment_with(eid: int, **fields: Any) -> Any:
    return lambda e: e[0] == "experiment" and e[1]["id"] == eid and all(
        e[1][k] == v for k, v in fields.items())


async def test_a_snapshot_then_every_change_of_a_listed_experiment(
        master: Master, admin: Principal) -> None:
    first = await master.experiments.create(admin, CONFIG, None, activate=False)
    events = experiment_list_events(master, ExperimentFilter(archived=False),
                                    heartbeat=1, poll=0.05, min_interval=0)
    try:
        [(name, snapshot)] = await next_batch(events)
        assert name == "snapshot" and snapshot["total"] == 1
        [listed] = snapshot["experiments"]
        assert listed == (await master.experiments.to_json([first]))[0]
        assert (listed["state"], listed["best_searcher_metric"]) == ("PAUSED", None)

        # Created.
        second = await master.experiments.create(admin, CONFIG, None, activate=False)
        seen = await until(events, experiment_with(second.id, state="PAUSED"))
        assert all(e[1]["id"] == second.id for e in seen)
        # Its job's priority.
        await master.jobs.update(admin, f"exp-{second.id}", wire.JobChanges(priority=7))
        await until(events, experiment_with(second.id, priority=7))
        # Its state, to the end.
        await master.experiments.kill(admin, second.id)
        await until(events, experiment_with(second.id, state="CANCELED"))
        # Archived: no longer in an unarchived list.
        await master.experiments.set_archived(admin, second.id, True)
        assert await until(events, lambda e: e[0] == "removed") == [
            ("removed", {"id": second.id})]

        # A trial's searcher metric changes the best, written straight to the store.
        trial = await master.store.create_trial(experiment_id=first.id, request_id="r",
                                                hparams={}, seed=1, state="ACTIVE")
        await until(events, experiment_with(first.id, num_trials=1))
        await master.store.update_trial(trial.id, searcher_metric_value=0.25)
        await until(events, experiment_with(first.id, best_searcher_metric=0.25))

        # Nothing new: a heartbeat, and nothing sent twice.
        assert await next_batch(events) == [(None, "heartbeat")]
        master.experiment_changes.publish(first.id)
        assert await next_batch(events) == [(None, "heartbeat")]
    finally:
        await events.aclose()
    assert master.experiment_changes.subscribers == 0


async def test_the_filters_of_the_list_apply(master: Master, admin: Principal) -> None:
    _, token = await master.users.create(admin, "bob", admin=False)
    bob = await master.users.authenticate(token)
    assert bob is not None and bob.user is not None
    mine = await master.experiments.create(bob, CONFIG, None, activate=False)
    events = experiment_list_events(
        master, ExperimentFilter(owner_id=bob.user.id, states=frozenset({"PAUSED"})),
        poll=0.05, min_interval=0)
    try:
        [(_, snapshot)] = await next_batch(events)
        assert [e["id"] for e in snapshot["experiments"]] == [mine.id]
        # The admin's experiment is not bob's; bob's leaves the list once not PAUSED.
        await master.experiments.create(admin, CONFIG, None, activate=False)
        await master.experiments.kill(bob, mine.id)
        seen = await until(events, lambda e: e[0] == "removed")
        assert seen == [("removed", {"id": mine.id})]
    finally:
        await events.aclose()


async def test_a_client_behind_or_a_stopping_master_is_told_to_reconnect(
        master: Master, admin: Principal) -> None:
    master.experiment_changes.max_pending = 2
    events = experiment_list_events(master, poll=0.05, min_interval=0)
    await next_batch(events)
    # More experiments change than the subscription holds before the client reads them.
    for eid in (101, 102, 102, 103):
        master.experiment_changes.publish(eid)
    assert await next_batch(events) == [("reconnect", {})]
    await events.aclose()

    master.experiment_changes.max_pending = 1000
    events = experiment_list_events(master, poll=0.05)
    await next_batch(events)
    master.stopping = True
    try:
        assert await next_batch(events) == [("reconnect", {})]
    finally:
        master.stopping = False
        await events.aclose()


def test_changes_are_kept_once_per_experiment_and_bounded() -> None:
    changes = ExperimentChanges(max_pending=2)
    sub, other = changes.subscribe(), changes.subscribe()
    for eid in (3, 1, 3):
        changes.publish(eid)
    assert sub.pending == {1, 3} and sub.wake.is_set() and not sub.overflowed
    assert sub.take() == [1, 3] and not sub.pending and not sub.wake.is_set()
    changes.unsubscribe(other)
    for eid in (1, 2, 3):
        changes.publish(eid)
    assert sub.overflowed and sub.pending == {1, 2}
    assert other.pending == {1, 3}, "an unsubscribed one hears nothing more"
    changes.unsubscribe(sub)
    assert changes.subscribers == 0


# --- through HTTP ------------------------------------------------------------------------------

def sse(response: requests.Response) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` of a streamed answer; comments as ``(":", text)``."""
    name, data = "message", ""
    for line in response.iter_lines(chunk_size=None, decode_unicode=True):
        if line.startswith(":"):
            yield ":", line[1:].strip()
        elif line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
        elif not line and data:
            yield name, json.loads(data)
            name, data = "message", ""


@pytest.mark.slow
def test_the_stream_over_http(module_master: MasterProcess,
                              steps_experiment: Any) -> None:
    m = module_master
    url = f"{m.url}/api/v1/experiments/stream"
    assert requests.get(url, timeout=10).status_code == 401
    assert m.api("GET", "/experiments/stream?state=NOPE").status_code == 400
    assert m.api("GET", "/experiments/stream?heartbeat=0").status_code == 400
    assert m.api("GET", "/experiments/stream?limit=0").status_code == 400

    seen: list[tuple[str, Any]] = []
    stop = threading.Event()
    with requests.get(url, params={"archived": "false", "owner": "admin", "heartbeat": 1},
                      headers={"Authorization": f"Bearer {m.token}"}, stream=True,
                      timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")

        def read() -> None:
            for event in sse(response):
                seen.append(event)
                if stop.is_set():
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        m.wait(lambda: seen, timeout=10)
        assert seen[0][0] == "snapshot"
        before = {e["id"] for e in seen[0][1]["experiments"]}
        # 0.2 s a batch: the stream reads changes at most every 0.25 s, and a trial forked
        # from a warm interpreter may otherwise end before the first read after its creation.
        eid = m.create_ok(steps_experiment(length=6, sleep=0.2, name="streamed"))
        assert eid not in before
        m.wait(lambda: any(d["id"] == eid and d["state"] == "COMPLETED" and d["progress"] == 1.0
                           for n, d in seen if n == "experiment"), timeout=60)
        mine = [d for n, d in seen if n == "experiment" and d["id"] == eid]
        # Each event is the experiment as the list shows it, and each differs from the last.
        assert mine[-1] == m.experiment(eid)
        assert mine[-1]["best_searcher_metric"] == pytest.approx(1 / 6)
        assert all(a != b for a, b in zip(mine, mine[1:], strict=False))
        # Seen before its end, in whichever state the stream's first event caught it.
        assert mine[0]["state"] in ("QUEUED", "STARTING", "RUNNING", "STOPPING_COMPLETED") \
            and mine[-1]["progress"] == 1.0
        m.wait(lambda: seen[-1][0] == ":", timeout=10)
        assert seen[-1] == (":", "heartbeat")
        stop.set()
        reader.join(timeout=10)
        assert not reader.is_alive()
