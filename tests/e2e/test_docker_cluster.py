"""A master whose agents are two real Docker engines (two hosts): trials run in containers,
a trial larger than one host spans both, a restarted master adopts running containers, and
a trial on an engine that dies moves to the other one.

The engines and the offline-built test image come from ``scripts/test-services.sh start``;
containers get this checkout's Python through read-only bind mounts (see
:func:`det_hub.testing.container_python_mounts`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.testing import (
    MasterProcess,
    remove_agent_containers,
    required_env,
    write_docker_config,
)

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow

DIST = Path(__file__).parent / "contexts" / "multi_host"
ENGINES = ("DET_HUB_TEST_DOCKER_HOST", "DET_HUB_TEST_DOCKER_HOST_2", "DET_HUB_TEST_IMAGE")


@pytest.fixture
def engines() -> tuple[str, str, str]:
    host_a, host_b, image = required_env(*ENGINES)
    return host_a, host_b, image


PREEMPTING_POOL = ("c.MasterApp.resource_pools = [{'name': 'default', "
                   "'scheduler': {'type': 'priority', 'preemption': True}}]")


@pytest.fixture
def master(request: pytest.FixtureRequest, tmp_path: Path, sqlite_url: str,
           engines: tuple[str, str, str]) -> Iterator[MasterProcess]:
    """A master with the two engines as agents host-a and host-b; a test marked
    ``preempting`` gets a default pool that preempts."""
    hosts, image = list(engines[:2]), engines[2]
    extra = ["c.MasterApp.agent_timeout = 4.0"]
    if request.node.get_closest_marker("preempting"):
        extra.append(PREEMPTING_POOL)
    config = write_docker_config(tmp_path / "det_hub_config.py", hosts, image,
                                 ["host-a", "host-b"], extra)
    proc = MasterProcess(tmp_path / "data", sqlite_url, ["--config", str(config)])
    proc.default_context = STEPS
    proc.cli_cwd = REPO
    proc.start()
    yield proc
    proc.stop()
    remove_agent_containers(hosts, ["host-a", "host-b"])


def trial_of(master: MasterProcess, eid: int) -> dict[str, Any]:
    [trial] = master.wait(lambda: master.trials(eid))
    return trial


def test_a_trial_runs_in_a_container_and_checkpoints_to_the_host(
        master: MasterProcess, tmp_path: Path) -> None:
    agents = master.get("/agents")["agents"]
    assert [(a["id"], a["type"], a["connected"], len(a["slots"])) for a in agents] == [
        ("host-a", "docker", True, 2), ("host-b", "docker", True, 2)]
    eid = master.create_ok(steps_config(length=10, report_where=True, checkpoint_every=5))
    assert master.wait_state(eid)["state"] == "COMPLETED"
    trial = trial_of(master, eid)
    logs = master.logs(trial["id"])
    assert any(m.startswith("in container True on agent host-") for m in logs), logs
    assert logs[-1] == "done"
    checkpoints = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    # Saved at batches 5 and 10 and at the end; garbage collection kept the latest.
    assert sorted(c["steps_completed"] for c in checkpoints) == [5, 10, 10]
    assert checkpoints[0]["state"] == "COMPLETED" and checkpoints[0]["steps_completed"] == 10
    # The container wrote through the shared_fs mount into the master's storage on the host.
    for c in checkpoints:
        state = tmp_path / "data" / "checkpoints" / "admin" / c["uuid"] / "state.json"
        assert state.is_file() == (c["state"] == "COMPLETED")
        assert c["state"] == "DELETED" or state.read_text() == '{"step": 10}'


def test_a_trial_larger_than_one_host_trains_across_both_engines(master: MasterProcess) -> None:
    config = steps_config("dist", length=1)
    config["entrypoint"] = "python3 -m det_hub.launch.torch_distributed -- python3 train.py"
    config["resources"] = {"slots_per_trial": 4}
    eid = master.create_ok(config, context=DIST)
    assert master.wait_state(eid, timeout=180)["state"] == "COMPLETED", \
        master.logs(trial_of(master, eid)["id"])
    trial = trial_of(master, eid)
    lines = [line for line in master.get_logs(trial["id"]) if "sum" in line["message"]]
    assert sorted(line["rank"] for line in lines) == [0, 1, 2, 3]
    for line in lines:
        rank = line["rank"]
        assert line["message"].startswith(
            f"rank {rank} of 4 on node {rank // 2} in container True agent {rank // 2} ")
        assert line["message"].endswith("sum 6")  # 0 + 1 + 2 + 3, across both engines
    assert trial["latest_validation"]["metrics"]["validation_loss"] == pytest.approx(1 / 7)
    [checkpoint] = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert sorted(checkpoint["resources"]) == ["metadata.json", *(f"rank{r}.txt" for r in range(4))]


def test_a_restarted_master_adopts_the_running_container(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=40, sleep=0.1, report_every=2,
                                        report_where=True))
    master.wait(lambda: trial_of(master, eid)["steps_completed"] >= 4)
    master.stop()
    time.sleep(1.0)
    master.start()
    assert master.wait_state(eid)["state"] == "COMPLETED"
    trial = trial_of(master, eid)
    assert trial["restarts"] == 0 and trial["steps_completed"] == 40
    lines = master.get_logs(trial["id"])
    assert len({line["allocation_id"] for line in lines if line["allocation_id"]}) == 1
    messages = [line["message"] for line in lines]
    assert sum(m.startswith("in container True") for m in messages) == 1
    assert not any(m.startswith("resumed at") for m in messages)


def test_a_trial_on_an_engine_that_dies_moves_to_the_other(
        master: MasterProcess, engines: tuple[str, str, str]) -> None:
    # Only host-b takes new work, so the trial starts there.
    assert master.api("POST", "/agents/host-a/disable", json={"drain": True}).ok
    eid = master.create_ok(steps_config(length=60, sleep=0.1, report_every=2,
                                        checkpoint_every=5, report_where=True,
                                        max_restarts=1))
    master.wait(lambda: trial_of(master, eid)["steps_completed"] >= 10, timeout=90)
    assert master.api("POST", "/agents/host-a/enable").ok
    pidfile = Path(engines[1].removeprefix("unix://")).parent / "dockerd.pid"
    try:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
        agents = {a["id"]: a for a in master.get("/agents")["agents"]}
        assert agents["host-b"]["connected"] is False
    finally:
        subprocess.run([str(REPO / "scripts" / "test-services.sh"), "start"], check=True,
                       stdout=subprocess.DEVNULL, timeout=180)
    trial = trial_of(master, eid)
    assert trial["restarts"] == 1 and trial["steps_completed"] == 60
    messages = master.logs(trial["id"])
    assert "in container True on agent host-b" in messages
    assert "in container True on agent host-a" in messages
    assert any("agent host-b stopped answering" in m for m in messages), messages
    resumed = [m for m in messages if m.startswith("resumed at")]
    assert resumed and int(resumed[0].split()[-1]) >= 10


@pytest.mark.preempting
def test_a_more_important_experiment_preempts_a_container_which_resumes(
        master: MasterProcess) -> None:
    # One engine takes work, so the two experiments compete for its two slots.
    assert master.api("POST", "/agents/host-b/disable", json={"drain": True}).ok
    low_config = steps_config("low", length=30, sleep=0.1, report_every=2, report_where=True)
    low_config["resources"] = {"slots_per_trial": 2, "priority": 60}
    low = master.create_ok(low_config)
    master.wait(lambda: trial_of(master, low)["steps_completed"] >= 4)
    high_config = steps_config("high", length=5)
    high_config["resources"] = {"slots_per_trial": 2, "priority": 10}
    high = master.create_ok(high_config)
    assert master.wait_state(high)["state"] == "COMPLETED"
    assert master.wait_state(low, timeout=120)["state"] == "COMPLETED"
    trial = trial_of(master, low)
    assert trial["restarts"] == 0 and trial["steps_completed"] == 30
    assert trial["latest_validation"]["metrics"]["validation_loss"] == pytest.approx(1 / 30)
    messages = master.logs(trial["id"])
    at = int(next(m for m in messages if m.startswith("preempted at ")).split()[-1])
    assert f"resumed at {at}" in messages
    # Two containers, both on host-a: the first checkpointed and the second resumed.
    assert messages.count("in container True on agent host-a") == 2
    assert trial_of(master, high)["ended_at"] < trial["ended_at"]


def test_notebooks_shells_and_tensorboards_run_in_containers(master: MasterProcess) -> None:
    from .test_proxied_tasks import execute, started_url, wait_state

    eid = master.create_ok(steps_config("tb", length=10, report_every=5))
    assert master.wait_state(eid)["state"] == "COMPLETED"

    url = started_url(master, master.cli("notebook", "start", "--no-browser"))
    nid = int(url.split("/proxy/")[1].split("/")[0])
    browser = requests.Session()
    assert browser.get(url, timeout=30).status_code == 200
    base = f"{master.url}/proxy/{nid}"
    kernel = browser.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text
    out = execute(f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels",
                  f"det_hub_task_{nid}={browser.cookies.get(f'det_hub_task_{nid}')}",
                  "import os; print(os.path.exists('/.dockerenv'))")
    assert any(m["msg_type"] == "stream" and m["content"]["text"] == "True\n" for m in out), out

    shell = master.cli("shell", "start", "test -f /.dockerenv && echo in a container")
    assert (shell.returncode, shell.stdout) == (0, "in a container\n"), shell.stderr

    board_url = started_url(master, master.cli("tensorboard", "start", str(eid), "--no-browser"))
    bid = int(board_url.split("/proxy/")[1].split("/")[0])
    assert browser.get(board_url, timeout=30).status_code == 200
    [trial] = master.trials(eid)
    run = f"experiment_{eid}/trial/{trial['id']}"
    tags = master.wait(lambda: (r := browser.get(f"{master.url}/proxy/{bid}/data/plugin/scalars/"
                                                 "tags", timeout=10)).ok and r.json().get(run))
    assert "training/loss" in tags

    for kind, tid in (("notebook", nid), ("shell", master.get("/shells")["shells"][0]["id"]),
                      ("tensorboard", bid)):
        master.api("POST", f"/{kind}s/{tid}/kill")
        wait_state(master, kind, tid, "TERMINATED")
