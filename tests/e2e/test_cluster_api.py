"""The cluster over HTTP: agents, resource pools, the job queue and reordering it, on a real
master whose local agent has exactly one slot, so that a second experiment has to wait."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.service.openapi import dereference
from det_hub.testing import MasterProcess, reap_tasks

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow

#: Batches a trial that must hold its slot until the test kills it trains for.
FOREVER = 1_000_000


@pytest.fixture
def master(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    """A master whose local agent has one slot: all the host's cores, no GPU."""
    proc = MasterProcess(tmp_path / "data", sqlite_url,
                         ["--cpu-slot-cores=4096", "--LocalAgent.use_gpus=False"])
    proc.default_context = STEPS
    proc.cli_cwd = REPO
    proc.start()
    yield proc
    proc.stop()
    reap_tasks(tmp_path)


def jobs(master: MasterProcess, **params: str) -> list[dict[str, Any]]:
    return master.get("/jobs", params=params)["jobs"]


def order(master: MasterProcess) -> list[str]:
    return [j["job_id"] for j in jobs(master)]


def user_token(master: MasterProcess, name: str) -> str:
    made = master.api("POST", "/users", json={"username": name})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def busy(master: MasterProcess, name: str = "busy") -> int:
    """An experiment that holds the only slot until killed; returns once it does."""
    eid = master.create_ok(steps_config(name, length=FOREVER, sleep=0.05))
    master.wait(lambda: any(j["job_id"] == f"exp-{eid}" and j["state"] == "SCHEDULED"
                            for j in jobs(master)))
    return eid


def kill_all(master: MasterProcess, *ids: int) -> None:
    for eid in ids:
        master.api("POST", f"/experiments/{eid}/kill")


def test_agents_and_resource_pools(master: MasterProcess) -> None:
    [agent] = master.get("/agents")["agents"]
    assert agent["type"] == "local" and agent["resource_pool"] == "default"
    assert agent["enabled"] is True and agent["connected"] is True
    assert [s["allocation_id"] for s in agent["slots"]] == [None]
    assert master.get(f"/agents/{agent['id']}")["agent"] == agent
    missing = master.api("GET", "/agents/no-such-agent")
    assert missing.status_code == 404 and "no-such-agent" in missing.json()["error"]

    [pool] = master.get("/resource_pools")["resource_pools"]
    assert {k: pool[k] for k in ("name", "agents", "slots_total", "slots_used", "scheduler",
                                 "preemption", "default")} == {
        "name": "default", "agents": 1, "slots_total": 1, "slots_used": 0,
        "scheduler": "priority", "preemption": False, "default": True}

    assert jobs(master) == [] and jobs(master, resource_pool="default") == []
    r = master.api("GET", "/jobs", params={"resource_pool": "gpu"})
    assert r.status_code == 404 and "gpu" in r.json()["error"]
    document = master.get("/openapi.json")
    doc = document["paths"]
    assert dereference(document, doc["/api/v1/jobs/{job_id}"]["patch"]["requestBody"]["content"][
        "application/json"]["schema"])["properties"].keys() == {"priority", "weight", "ahead_of"}
    assert set(doc["/api/v1/agents/{agent_id}/disable"]) == {"post"}


def test_queue_shows_waiting_jobs_and_reordering_changes_what_runs_next(
        master: MasterProcess) -> None:
    a = busy(master, "a")
    b = master.create_ok(steps_config("b", length=FOREVER, sleep=0.05))
    c = master.create_ok(steps_config("c", length=FOREVER, sleep=0.05))
    master.wait(lambda: len(jobs(master)) == 3)

    rows = {j["job_id"]: j for j in jobs(master)}
    assert [rows[f"exp-{e}"]["queue_position"] for e in (a, b, c)] == [1, 2, 3]
    assert [(rows[f"exp-{e}"]["state"], rows[f"exp-{e}"]["slots_allocated"],
             rows[f"exp-{e}"]["slots_requested"]) for e in (a, b, c)] == [
        ("SCHEDULED", 1, 1), ("QUEUED", 0, 1), ("QUEUED", 0, 1)]
    assert rows[f"exp-{b}"]["name"] == "b" and rows[f"exp-{b}"]["owner"] == "admin"
    assert rows[f"exp-{b}"]["experiment_id"] == b and rows[f"exp-{b}"]["priority"] == 42
    # A bare experiment id names its job too.
    assert master.get(f"/jobs/{b}")["job"] == rows[f"exp-{b}"]

    # c moves ahead of b, taking its priority.
    r = master.api("PATCH", f"/jobs/exp-{c}", json={"ahead_of": f"exp-{b}"})
    assert r.status_code == 200, r.text
    assert r.json()["job"]["queue_position"] == 2 and r.json()["job"]["priority"] == 42
    assert order(master) == [f"exp-{a}", f"exp-{c}", f"exp-{b}"]

    # b's smaller priority number puts it first, ahead of the running a.
    r = master.api("PATCH", f"/jobs/exp-{b}", json={"priority": 10, "weight": 2})
    assert r.status_code == 200, r.text
    assert r.json()["job"]["priority"] == 10 and r.json()["job"]["weight"] == 2.0
    assert order(master) == [f"exp-{b}", f"exp-{a}", f"exp-{c}"]
    # The same through the CLI, which prints the job's new row.
    done = master.cli("job", "update", f"exp-{c}", "--ahead-of", f"exp-{b}", check=True)
    assert done.stdout.splitlines()[2].split()[:5] == ["1", f"exp-{c}", "EXPERIMENT", "c", "10"]
    assert order(master) == [f"exp-{c}", f"exp-{b}", f"exp-{a}"]
    table = master.cli("job", "list", check=True).stdout.splitlines()[2:]
    assert [(line.split()[1], line.split()[-3]) for line in table] == [
        (f"exp-{c}", "0/1"), (f"exp-{b}", "0/1"), (f"exp-{a}", "1/1")]

    # The changes are stored on the experiments.
    assert [master.experiment(e)["priority"] for e in (a, b, c)] == [42, 10, 10]

    # When a's slot frees, c, now first, gets it; b waits.
    kill_all(master, a)
    master.wait(lambda: [(j["job_id"], j["state"]) for j in jobs(master)] == [
        (f"exp-{c}", "SCHEDULED"), (f"exp-{b}", "QUEUED")], timeout=30)
    kill_all(master, b, c)


def test_job_update_refusals(master: MasterProcess) -> None:
    a = busy(master)
    job = f"/jobs/exp-{a}"
    bob = user_token(master, "bob")
    assert master.api("GET", "/jobs", token=bob).status_code == 200
    r = master.api("PATCH", job, token=bob, json={"priority": 1})
    assert r.status_code == 403 and "owner" in r.json()["error"]

    for body, message in [
        ({"priority": 0}, "priority: must be between 1 and 99"),
        ({"priority": 100}, "priority: must be between 1 and 99"),
        ({"priority": "high"}, "priority: must be an integer"),
        ({"priority": 2.5}, "priority: must be an integer"),
        ({"weight": 0}, "weight: must be a number greater than 0"),
        ({"weight": "heavy"}, "weight: must be a number"),
        ({"ahead_of": 7}, "ahead_of: must be a job id"),
        ({"ahead_of": f"exp-{a}"}, "ahead_of: a job cannot move ahead of itself"),
        ({"priority": 5, "ahead_of": "exp-1"}, "priority: cannot be given with ahead_of"),
        ({"prio": 3}, "prio: unknown field"),
        ({}, "nothing to change: give priority, weight or ahead_of"),
    ]:
        r = master.api("PATCH", job, json=body)
        assert r.status_code == 400 and r.json()["error"].startswith(message), (body, r.text)
    r = master.api("PATCH", job, data=b"{not json")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]

    for path in ("/jobs/exp-999", "/jobs/999", "/jobs/nonsense"):
        assert master.api("GET", path).status_code == 404, path
        r = master.api("PATCH", path, json={"priority": 5})
        assert r.status_code == 404 and "not in the queue" in r.json()["error"], path

    # Nothing was changed by the refused requests.
    assert master.get(job)["job"]["priority"] == 42 and master.experiment(a)["priority"] == 42
    kill_all(master, a)


def test_disabled_agent_starts_no_new_work(master: MasterProcess) -> None:
    agent_id = master.get("/agents")["agents"][0]["id"]
    bob = user_token(master, "bob")
    for verb in ("disable", "enable"):
        r = master.api("POST", f"/agents/{agent_id}/{verb}", token=bob)
        assert r.status_code == 403 and "admin" in r.json()["error"], r.text
    r = master.api("POST", f"/agents/{agent_id}/disable", json={"drain": "yes"})
    assert r.status_code == 400 and r.json()["error"] == "drain: must be true or false"
    assert master.api("POST", "/agents/nope/disable", json={}).status_code == 404

    r = master.api("POST", f"/agents/{agent_id}/disable", json={"drain": True})
    assert r.status_code == 200 and r.json()["agent"]["enabled"] is False
    assert master.get(f"/agents/{agent_id}")["agent"]["enabled"] is False

    eid = master.create_ok(steps_config("waits", length=5))
    [trial] = master.wait(lambda: [t for t in master.trials(eid) if t["run_state"] == "QUEUED"])
    master.wait(lambda: jobs(master))
    # Give the scheduler several rounds to (wrongly) place it.
    for _ in range(10):
        assert master.trials(eid)[0]["run_state"] == "QUEUED"
        [row] = jobs(master)
        assert (row["state"], row["slots_allocated"], row["slots_requested"]) == ("QUEUED", 0, 1)
        time.sleep(0.2)

    r = master.api("POST", f"/agents/{agent_id}/enable")
    assert r.status_code == 200 and r.json()["agent"]["enabled"] is True
    assert master.wait_state(eid, timeout=30)["state"] == "COMPLETED"
    assert master.trials(eid)[0]["id"] == trial["id"]


def test_disabling_without_drain_moves_the_running_trial(master: MasterProcess) -> None:
    """With one agent there is nowhere to move to: the trial checkpoints, waits in the queue,
    and resumes from its checkpoint once the agent is enabled again."""
    eid = busy(master)
    agent_id = master.get("/agents")["agents"][0]["id"]
    r = master.api("POST", f"/agents/{agent_id}/disable", json={"drain": False})
    assert r.status_code == 200 and r.json()["agent"]["enabled"] is False
    master.wait(lambda: [(j["state"], j["slots_allocated"]) for j in jobs(master)] == [
        ("QUEUED", 0)], timeout=30)
    [trial] = master.trials(eid)
    assert trial["run_state"] == "QUEUED" and trial["latest_checkpoint"]
    assert master.get("/agents")["agents"][0]["slots"][0]["allocation_id"] is None

    master.api("POST", f"/agents/{agent_id}/enable")
    master.wait(lambda: any(m.startswith("resumed at") for m in master.logs(trial["id"])),
                timeout=30)
    kill_all(master, eid)
