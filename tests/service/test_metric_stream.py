"""The live metric stream of an experiment against a real master: replay then live rows
without gaps or duplicates, resumption from an id, the end of the stream, and its token."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.client import Client
from det_hub.service import wire
from det_hub.service.events import experiment_events
from det_hub.service.handlers.streams import sse_frame
from det_hub.service.pubsub import MetricEvents
from det_hub.states import shown_experiment_state
from det_hub.store import Store
from det_hub.testing import MasterProcess

STEPS = Path(__file__).resolve().parents[1] / "e2e" / "contexts" / "steps"


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def stored_ids(master: MasterProcess, eid: int) -> list[int]:
    ids: list[int] = []
    for t in master.trials(eid):
        ids += [m["id"] for m in master.get(f"/trials/{t['id']}/metrics")["metrics"]]
    return sorted(ids)


@pytest.mark.slow
def test_replay_then_live_rows_arrive_once_and_the_stream_ends(
        master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=80, sleep=0.05))
    client = Client(master.url, master.token)
    # Join while the trial runs, once some rows are stored: they come from the replay, the
    # rest live.
    master.wait(lambda: master.trials(eid) and master.trials(eid)[0]["steps_completed"] >= 10,
                timeout=60)
    assert master.experiment(eid)["state"] == "RUNNING"
    events = list(client.stream_experiment_events(eid, heartbeat=1))
    rows = [data for name, data in events if name == "metrics"]
    states = [data for name, data in events if name == "state"]

    ids = [r["id"] for r in rows]
    assert ids == sorted(set(ids)), "rows must come once each, in order"
    assert ids == stored_ids(master, eid), "every stored row must be streamed"
    # 80 batches, a training row every 2 and one validation row at the end.
    assert len(rows) == 41
    assert {r["group"] for r in rows} == {"training", "validation"}
    first = rows[0]
    assert set(first) == {"id", "trial_id", "group", "steps_completed", "metrics",
                          "report_time"}
    assert first["metrics"] == {"loss": 1.0 / first["steps_completed"]}
    assert states and states[0]["experiment_id"] == eid
    # The stream ended by itself because the experiment completed.
    assert master.experiment(eid)["state"] == "COMPLETED"
    assert states[-1]["state"] == "COMPLETED"
    # Each state is what the wire schema (and the panel's types) say it is.
    for state in states:
        wire.ExperimentStreamState.model_validate(state)
    [trial] = states[-1]["trials"]
    assert trial["searcher_metric_value"] == master.trials(eid)[0]["searcher_metric_value"]
    assert trial["searcher_metric_value"] is not None


@pytest.mark.slow
def test_after_id_resumes_and_a_finished_experiment_ends_at_once(
    master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=20, sleep=0.0))
    master.wait_state(eid)
    ids = stored_ids(master, eid)
    assert len(ids) == 11
    client = Client(master.url, master.token)
    middle = ids[4]
    resumed = [r["id"] for r in client.stream_metrics(eid, after_id=middle)]
    assert resumed == ids[5:]
    assert list(client.stream_metrics(eid, after_id=ids[-1])) == []

    # The wire format: an id line on metric frames, and an end event.
    r = requests.get(f"{master.url}/api/v1/experiments/{eid}/metrics/stream",
                     params={"after_id": ids[-2]}, timeout=30,
                     headers={"Authorization": f"Bearer {master.token}"})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert f"id: {ids[-1]}\nevent: metrics\ndata: " in r.text
    assert "event: end\ndata: " in r.text and f'"after_id":{ids[-1]}' in r.text
    # The Last-Event-ID header resumes as after_id does.
    r = requests.get(f"{master.url}/api/v1/experiments/{eid}/metrics/stream", timeout=30,
                     headers={"Authorization": f"Bearer {master.token}",
                              "Last-Event-ID": str(ids[-2])})
    assert r.text.count("event: metrics") == 1


@pytest.mark.slow
def test_a_trial_restarted_from_its_checkpoint_streams_its_rollback(
        master: MasterProcess, steps_experiment: Any) -> None:
    """A follower applying the rollback event holds exactly the rows the master keeps."""
    config = steps_experiment(length=30, sleep=0.05, report_every=1)
    config["hyperparameters"].update(checkpoint_every=10, crash_once_at=15)
    eid = master.create_ok({**config, "max_restarts": 1})
    client = Client(master.url, master.token)
    held: dict[int, dict[str, Any]] = {}
    rollbacks: list[dict[str, Any]] = []
    for name, data in client.stream_experiment_events(eid, heartbeat=1):
        if name == "metrics":
            held[data["id"]] = data
        elif name == "rolled_back":
            rollbacks.append(data)
            held = {i: r for i, r in held.items() if r["trial_id"] != data["trial_id"]
                    or r["steps_completed"] <= data["steps_completed"]}
    [trial] = master.trials(eid)
    assert rollbacks == [{"trial_id": trial["id"], "run_id": 2, "steps_completed": 10}]
    assert sorted(held) == stored_ids(master, eid)
    assert sorted(r["steps_completed"] for r in held.values()
                  if r["group"] == "training") == list(range(1, 31))


@pytest.mark.slow
def test_the_stream_needs_a_token_and_an_experiment(master: MasterProcess) -> None:
    url = f"{master.url}/api/v1/experiments/1/metrics/stream"
    assert requests.get(url, timeout=10).status_code == 401
    bad = requests.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert bad.status_code == 401 and "error" in bad.json()
    missing = master.api("GET", "/experiments/999999/metrics/stream")
    assert missing.status_code == 404
    assert master.api("GET", "/experiments/1/metrics/stream?heartbeat=0").status_code == 400


@pytest.mark.slow
def test_stop_ends_a_quiet_stream_promptly(master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=20, sleep=0.0), activate=False)
    client = Client(master.url, master.token)
    stop = threading.Event()
    seen: list[str] = []

    def read() -> None:
        for name, _ in client.stream_experiment_events(eid, stop=stop, heartbeat=1):
            seen.append(name)

    reader = threading.Thread(target=read)
    reader.start()
    master.wait(lambda: seen, timeout=10)
    stop.set()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert seen == ["state"]
    master.api("POST", f"/experiments/{eid}/kill")


# --- without HTTP -----------------------------------------------------------------------------

def _row(i: int, trial_id: int = 1) -> dict[str, Any]:
    return {"id": i, "trial_id": trial_id, "group": "training", "steps_completed": i,
            "metrics": {"loss": 1.0 / i}, "report_time": None}


async def test_a_full_queue_marks_the_subscriber_overflowed() -> None:
    hub = MetricEvents(max_queue=3)
    slow, other = hub.subscribe(1), hub.subscribe(2)
    hub.publish(1, [_row(1), _row(2)])
    assert not slow.overflowed and slow.queue.qsize() == 2
    hub.publish(1, [_row(3), _row(4)])
    assert slow.overflowed and slow.queue.qsize() == 3
    assert other.queue.empty() and not other.overflowed
    hub.unsubscribe(slow)
    hub.unsubscribe(other)
    assert hub.subscribers(1) == hub.subscribers(2) == 0


class _Experiments:
    def __init__(self, store: Store, experiment: Any) -> None:
        self.store, self.experiment = store, experiment

    async def get(self, experiment_id: int) -> Any:
        return self.experiment

    async def trials(self, experiment_id: int) -> list[Any]:
        return await self.store.list_trials(experiment_id)

    def shown_state(self, row: Any) -> str:
        return shown_experiment_state(row.state, ())


class _Trials:
    def __init__(self, store: Store) -> None:
        self.metrics_after = store.experiment_metrics_after


class _Master:
    """The parts of the master that :func:`experiment_events` reads."""

    def __init__(self, store: Store, experiment: Any) -> None:
        self.experiments = _Experiments(store, experiment)
        self.trials = _Trials(store)
        self.metric_events = MetricEvents()
        self.stopping = False


async def test_a_slow_client_is_told_to_reconnect_from_its_last_row(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'db'}")
    try:
        user = await store.create_user("u")
        exp = await store.create_experiment(
            name="e", owner_id=user.id, config={}, original_config="", context=None,
            state="ACTIVE", searcher_metric="v", smaller_is_better=True)
        trial = await store.create_trial(experiment_id=exp.id, request_id="r", hparams={},
                                         seed=1, state="ACTIVE")
        master: Any = _Master(store, exp)
        hub = master.metric_events
        hub.max_queue = 5
        stored = await store.insert_metrics(trial.id, "training",
                                            [{"steps_completed": s, "metrics": {}}
                                             for s in range(3)])
        events = experiment_events(master, exp.id, 0, poll=0.05)
        replayed = await anext(events)
        assert [d["id"] for _, d in replayed] == [r["id"] for r in stored]
        assert (await anext(events))[0][0] == "state"
        # Rows the replay sent are dropped when they come live as well.
        hub.publish(exp.id, stored)
        more = await store.insert_metrics(trial.id, "training",
                                          [{"steps_completed": 3, "metrics": {}}])
        hub.publish(exp.id, more)
        assert [d["id"] for _, d in await anext(events)] == [more[0]["id"]]
        # The client falls behind by more than the queue holds.
        flood = await store.insert_metrics(trial.id, "training",
                                           [{"steps_completed": s, "metrics": {}}
                                            for s in range(4, 20)])
        hub.publish(exp.id, flood)
        batch = await asyncio.wait_for(anext(events), 5)
        assert batch == [("reconnect", {"after_id": more[0]["id"]})]
        await events.aclose()
        assert hub.subscribers(exp.id) == 0
    finally:
        await store.close()


def test_frames() -> None:
    assert sse_frame(None, "heartbeat") == ": heartbeat\n\n"
    assert sse_frame("metrics", {"id": 7}) == 'id: 7\nevent: metrics\ndata: {"id":7}\n\n'
    assert sse_frame("end", {"after_id": 7}) == 'event: end\ndata: {"after_id":7}\n\n'
