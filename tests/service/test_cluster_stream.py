"""The live cluster: a snapshot of the agents, pools, queue and allocations, then each change
wherever the master makes it (an agent disabled, a job queued, started, reprioritised or
ended), a burst of changes as one event with its last state; heartbeats, and the request to
reconnect.

Most of it against the master's manager (real store, a local agent running ``sleep``
commands), then the wire format and who may read it through a real master's HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
import requests
from test_experiment_list_stream import next_batch, sse, until  # this folder's own helpers

from det_hub.service import wire
from det_hub.service.events import Event, cluster_events
from det_hub.service.master import Master, Principal
from det_hub.service.pubsub import ClusterChanges
from det_hub.states import TaskType
from det_hub.testing import MasterProcess

#: A command that holds one slot until it is killed.
SLEEPER = "entrypoint: sleep 600\nresources:\n  slots: 1\n"


def cluster_with(check: Callable[[dict[str, Any]], bool]) -> Callable[[Event], bool]:
    """Whether an event is a ``cluster`` event whose parts satisfy ``check``."""
    return lambda e: e[0] == "cluster" and check(e[1])


def job_of(parts: dict[str, Any], job_id: str) -> dict[str, Any] | None:
    return next((j for j in parts.get("jobs", ()) if j["job_id"] == job_id), None)


async def test_a_snapshot_then_each_change_of_agents_and_jobs(
        master: Master, admin: Principal) -> None:
    [agent_id] = master.cluster.agents
    events = cluster_events(master, heartbeat=1, poll=0.05, min_interval=0)
    try:
        [(name, snapshot)] = await next_batch(events)
        assert name == "snapshot"
        wire.ClusterState.model_validate(snapshot)
        # The parts as their REST endpoints answer, and nothing queued yet.
        assert snapshot["agents"] == master.jobs.agents()
        assert snapshot["resource_pools"] == master.jobs.pools()
        assert (snapshot["jobs"], snapshot["allocations"]) == ([], [])
        [agent] = snapshot["agents"]
        assert agent["id"] == agent_id and agent["enabled"] and agent["connected"]
        slots = len(agent["slots"])
        assert slots >= 1 and snapshot["resource_pools"][0]["slots_used"] == 0

        # Disabled (drained): the agent's part alone.
        await master.jobs.set_agent_enabled(admin, agent_id, False, drain=True)
        [(_, parts)] = await until(events, lambda e: e[0] == "cluster")
        assert list(parts) == ["agents"] and parts["agents"][0]["enabled"] is False

        # A command queued, with nowhere to go: its job and its allocation, waiting.
        task = await master.tasks.create(admin, TaskType.COMMAND, SLEEPER)
        job_id = f"cmd-{task.id}"
        seen = await until(events, cluster_with(lambda p: job_of(p, job_id) is not None))
        parts = seen[-1][1]
        queued = job_of(parts, job_id)
        assert queued is not None and queued["state"] == "QUEUED"
        assert (queued["slots_requested"], queued["slots_allocated"]) == (1, 0)
        [alloc] = parts["allocations"]
        assert (alloc["job_id"], alloc["task_id"], alloc["owner"], alloc["state"]) == (
            job_id, task.id, "admin", "QUEUED")
        wire.ClusterAllocation.model_validate(alloc)

        # Enabled again: the command starts on a slot, which names its allocation.
        await master.jobs.set_agent_enabled(admin, agent_id, True)
        seen = await until(events, cluster_with(
            lambda p: (job_of(p, job_id) or {}).get("state") == "SCHEDULED"))
        agents = [p["agents"] for n, p in seen if "agents" in p][-1]
        assert agents[0]["enabled"] is True
        held = [s for s in agents[0]["slots"] if s["allocation_id"] == alloc["id"]]
        assert len(held) == 1
        await until(events, cluster_with(
            lambda p: any(a["state"] == "RUNNING" for a in p.get("allocations", ()))))
        assert master.jobs.state()["resource_pools"][0]["slots_used"] == 1

        # Its priority: the queue's part.
        await master.jobs.update(admin, job_id, wire.JobChanges(priority=7))
        [(_, parts)] = await until(events, lambda e: e[0] == "cluster")
        assert list(parts) == ["jobs"] and job_of(parts, job_id)["priority"] == 7  # type: ignore[index]

        # Killed: the job leaves the queue and the slot is free.
        await master.tasks.kill(admin, TaskType.COMMAND, task.id)
        seen = await until(events, cluster_with(lambda p: p.get("jobs") == []), timeout=30)
        last = master.jobs.state()
        assert last["allocations"] == [] and last["resource_pools"][0]["slots_used"] == 0
        assert all(s["allocation_id"] is None for s in last["agents"][0]["slots"])

        # Nothing new: a heartbeat, and nothing sent twice for a change that changed nothing.
        await asyncio.sleep(0.2)
        while (batch := await next_batch(events)) != [(None, "heartbeat")]:
            assert all(n == "cluster" for n, _ in batch)
        master.cluster_changes.publish()
        assert await next_batch(events) == [(None, "heartbeat")]
    finally:
        await events.aclose()
    assert master.cluster_changes.subscribers == 0


async def test_a_burst_of_changes_is_one_event_with_the_last_state(
        master: Master, admin: Principal) -> None:
    [agent_id] = master.cluster.agents
    events = cluster_events(master, heartbeat=30, poll=0.05, min_interval=0.3)
    try:
        await next_batch(events)
        # The first change is read at once; the next ones wait out the interval together.
        await master.jobs.set_agent_enabled(admin, agent_id, False)
        [(_, first)] = await next_batch(events)
        assert first["agents"][0]["enabled"] is False
        for enabled in (True, False, True, False, True):
            await master.jobs.set_agent_enabled(admin, agent_id, enabled)
        loop = asyncio.get_running_loop()
        started = loop.time()
        [(name, last)] = await next_batch(events)
        assert name == "cluster" and last["agents"][0]["enabled"] is True
        assert loop.time() - started >= 0.2
        # The burst's end was sent: nothing more comes.
        with pytest.raises(asyncio.TimeoutError):
            await next_batch(events, timeout=0.6)
    finally:
        await events.aclose()


async def test_a_stopping_master_tells_the_client_to_reconnect(master: Master) -> None:
    events = cluster_events(master, poll=0.05)
    await next_batch(events)
    master.stopping = True
    try:
        assert await next_batch(events) == [("reconnect", {})]
    finally:
        master.stopping = False
        await events.aclose()


async def test_every_subscriber_hears_of_a_change_once_until_it_reads() -> None:
    changes = ClusterChanges()
    sub, other = changes.subscribe(), changes.subscribe()
    changes.publish()
    changes.publish()
    assert sub.is_set() and other.is_set() and changes.subscribers == 2
    sub.clear()
    changes.unsubscribe(other)
    other.clear()
    changes.publish()
    assert sub.is_set() and not other.is_set()
    changes.unsubscribe(sub)
    assert changes.subscribers == 0


# --- through HTTP ------------------------------------------------------------------------------

class Reader:
    """Reads a streamed answer's events on a thread, into ``seen``, until :meth:`close`."""

    def __init__(self, response: requests.Response) -> None:
        self.seen: list[tuple[str, Any]] = []
        self._response = response
        self._closing = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in sse(self._response):
                self.seen.append(event)
        except Exception:
            if not self._closing:  # a read cut short by close() is no failure
                raise

    def close(self) -> None:
        self._closing = True
        self._response.close()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()


@pytest.mark.slow
def test_the_stream_over_http_for_an_admin_and_a_user(module_master: MasterProcess) -> None:
    m = module_master
    url = f"{m.url}/api/v1/cluster/stream"
    assert requests.get(url, timeout=10).status_code == 401
    assert m.api("GET", "/cluster/stream?heartbeat=0").status_code == 400
    made = m.api("POST", "/users", json={"username": "stream-bob"})
    assert made.status_code == 201, made.text
    bob = made.json()["token"]
    [agent] = m.get("/agents")["agents"]

    streams = [requests.get(url, params={"heartbeat": 1}, stream=True, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
               for token in (m.token, bob)]
    for response in streams:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
    admin, user = (Reader(r) for r in streams)
    try:
        m.wait(lambda: admin.seen and user.seen, timeout=10)
        # A user who is no admin sees what GET /agents, /resource_pools and /jobs show them:
        # all of it, as the admin does.
        for reader, token in ((admin, m.token), (user, bob)):
            name, snapshot = reader.seen[0]
            assert name == "snapshot"
            wire.ClusterState.model_validate(snapshot)
            for part, path in (("agents", "/agents"), ("resource_pools", "/resource_pools"),
                               ("jobs", "/jobs")):
                answer = m.api("GET", path, token=token)
                assert answer.status_code == 200 and snapshot[part] == answer.json()[part]

        # Disabled through the REST API: both streams say so; then enabled again.
        r = m.api("POST", f"/agents/{agent['id']}/disable", json={"drain": True})
        assert r.status_code == 200, r.text

        def told(reader: Reader, enabled: bool) -> bool:
            return any(n == "cluster" and "agents" in d and d["agents"][0]["enabled"] is enabled
                       for n, d in reader.seen)

        m.wait(lambda: told(admin, False) and told(user, False), timeout=10)
        assert m.api("POST", f"/agents/{agent['id']}/enable").status_code == 200
        m.wait(lambda: told(admin, True) and told(user, True), timeout=10)
        # Quiet: heartbeats.
        m.wait(lambda: user.seen[-1] == (":", "heartbeat"), timeout=10)
    finally:
        admin.close()
        user.close()

    # Listed in the OpenAPI document, with the snapshot's schema.
    doc = m.get("/openapi.json")
    assert doc["paths"]["/api/v1/cluster/stream"]["get"]["summary"].startswith(
        "Stream the cluster")
    assert {"ClusterState", "ClusterAllocation"} <= set(doc["components"]["schemas"])
