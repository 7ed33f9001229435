"""det_hub behind a real JupyterHub, started as ``det-hub up`` starts it: the master is a hub
service, browsers sign in through the hub's OAuth flow, hub tokens are API tokens, hub users
are det_hub users (each may change only their own work) and hub admins are det_hub admins."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det_hub.hub.up import find_proxy
from det_hub.testing import (
    SERVICE,
    HubProcess,
    detspawner_config,
    pack,
    remove_agent_containers,
    required_env,
    write_docker_config,
)

from .conftest import STEPS, steps_config

pytestmark = pytest.mark.slow

@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    running = HubProcess(tmp_path / "hub")
    yield running
    running.stop()


def test_browsers_sign_in_through_the_hub_and_see_the_service(hub: HubProcess) -> None:
    # Not signed in: sent to the hub's OAuth flow, and on to its login page.
    first = requests.get(f"{hub.url}{SERVICE}/", timeout=10, allow_redirects=False)
    assert first.status_code == 302 and "/hub/api/oauth2/authorize" in first.headers["Location"]

    browser = hub.login("alice")
    page = browser.get(f"{hub.url}{SERVICE}/", timeout=30)
    assert page.status_code == 200, page.text[:500]
    assert page.url == f"{hub.url}{SERVICE}/"
    assert "Signed in as alice." in page.text
    boss = hub.login("admin").get(f"{hub.url}{SERVICE}/", timeout=30)
    assert "Signed in as admin (admin)." in boss.text

    # Ctrl-C stops it all: the hub, its proxy and the master.
    hub.stop(signal.SIGINT)
    assert hub.proc.returncode == 0, hub.log.read_text()[-3000:]
    deadline = time.monotonic() + 30
    while hub.listening() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hub.listening() == []


def test_hub_tokens_are_api_tokens_and_only_owners_and_admins_change_work(hub: HubProcess) -> None:
    alice, bob, admin = hub.token("alice"), hub.token("bob"), hub.token("admin")
    made = hub.call("POST", "/experiments", alice, json={
        "config": yaml.safe_dump(steps_config("alice's", length=1000, sleep=0.05)),
        "context": pack(STEPS)})
    assert made.status_code == 201, made.text
    experiment = made.json()["experiment"]
    assert experiment["owner"] == "alice"

    # Everyone reads everything; bob may not kill alice's experiment; a hub admin may.
    listed = hub.call("GET", "/experiments", bob).json()["experiments"]
    assert [e["id"] for e in listed] == [experiment["id"]]
    refused = hub.call("POST", f"/experiments/{experiment['id']}/kill", bob)
    assert refused.status_code == 403, refused.text
    users = {u["username"]: u["admin"] for u in hub.call("GET", "/users", admin).json()["users"]}
    assert users["alice"] is False and users["admin"] is True
    killed = hub.call("POST", f"/experiments/{experiment['id']}/kill", admin)
    assert killed.status_code == 200, killed.text

    assert hub.call("GET", "/experiments", "not-a-token").status_code == 401
    # The CLI takes a hub token like any other, with the service's URL as the master.
    env = dict(os.environ, DET_HUB_MASTER=f"{hub.url}{SERVICE}", DET_HUB_TOKEN=alice)
    listing = subprocess.run([sys.executable, "-m", "det_hub.cli.main", "experiment", "list"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert listing.returncode == 0 and "alice's" in listing.stdout, listing.stderr


def test_the_cli_signs_in_through_the_hub(hub: HubProcess, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(DET_HUB_MASTER=f"{hub.url}{SERVICE}", DET_HUB_DATA_DIR=str(tmp_path / "cli"))

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "det_hub.cli.main", *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=60)

    wrong = cli("user", "login", "dave", "--password-stdin", stdin="not it\n")
    assert wrong.returncode == 1 and "wrong name or password" in wrong.stderr, wrong.stderr
    signed = cli("user", "login", "dave", "--password-stdin", stdin=hub.password + "\n")
    assert signed.returncode == 0, signed.stderr
    assert signed.stdout.startswith(f"Signed in as dave on {hub.url}{SERVICE}")
    saved = tmp_path / "cli" / "tokens.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    assert "You are dave" in cli("user", "whoami").stdout
    assert cli("user", "logout").returncode == 0
    assert cli("user", "whoami").returncode != 0


def test_a_users_notebook_server_reaches_the_master_as_that_user(hub: HubProcess) -> None:
    token = hub.token("carol")
    started = requests.post(f"{hub.url}/hub/api/users/carol/server", timeout=60,
                            headers={"Authorization": f"token {token}"})
    assert started.status_code in (201, 202), started.text
    hub.wait(lambda: requests.get(f"{hub.url}/hub/api/users/carol", timeout=10, headers={
        "Authorization": f"token {token}"}).json()["servers"][""]["ready"], 90)
    # Code in carol's notebook runs the CLI (on the PATH) with the environment the hub gave
    # her server: the master's URL and her server's hub token.
    server = f"{hub.url}/user/carol"
    auth = {"Authorization": f"token {token}"}
    script = hub.data_dir / "users" / "carol" / "whoami.py"
    script.write_text(
        "import subprocess, sys\n"
        "done = subprocess.run(['det-hub', 'user', 'whoami'],\n"
        "                      capture_output=True, text=True)\n"
        "open('whoami.out', 'w').write(done.stdout + done.stderr)\n")
    kernel = requests.post(f"{server}/api/kernels", timeout=60, headers=auth,
                           json={"name": "python3"})
    assert kernel.status_code == 201, kernel.text
    from .test_proxied_tasks import execute

    execute(f"{server.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels",
            "", "exec(open('whoami.py').read())", headers=auth)
    out = (hub.data_dir / "users" / "carol" / "whoami.out").read_text()
    assert "carol" in out, out
    # Her first server opened with the quickstart notebook and the examples in its root.
    root = requests.get(f"{server}/api/contents", timeout=30, headers=auth).json()
    names = {item["name"] for item in root["content"]}
    assert {"quickstart.ipynb", "examples"} <= names, names
    config = requests.get(f"{server}/api/contents/examples/core_api/const.yaml", timeout=30,
                          headers=auth)
    assert config.status_code == 200 and "entrypoint" in config.json()["content"]




@pytest.fixture
def docker_hub(tmp_path: Path) -> Iterator[HubProcess]:
    """``det-hub up`` with DetSpawner, on one Docker engine of a single slot."""
    host, image = required_env("DET_HUB_TEST_DOCKER_HOST", "DET_HUB_TEST_IMAGE")
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    master_config = write_docker_config(
        tmp_path / "det_hub_config.py", [host], image, ["host-a"],
        [f"c.DockerAgent.cpu_slot_cores = {os.cpu_count() or 1}"])
    data = tmp_path / "hub"
    data.mkdir()
    (data / "jupyterhub_config.local.py").write_text(
        detspawner_config(image, "det-hub-test-")
        + "c.DetSpawner.queue_timeout = 120\nc.DetSpawner.poll_interval = 0.5\n")
    running = HubProcess(data, ["--master-config", str(master_config)])
    yield running
    running.stop()
    remove_agent_containers([host], ["host-a"])
    from docker.client import DockerClient

    with contextlib.closing(DockerClient(base_url=host, version="auto")) as engine:
        for container in engine.containers.list(all=True, filters={"name": "det-hub-test-"}):
            container.remove(force=True)


def server_ready(hub: HubProcess, user: str, token: str) -> bool:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", timeout=10,
                         headers={"Authorization": f"token {token}"}).json()
    return bool(model["servers"].get("", {}).get("ready"))


def test_detspawner_servers_take_slots_from_the_scheduler(docker_hub: HubProcess) -> None:
    hub = docker_hub
    admin = hub.token("admin")
    dana, erin = hub.token("dana"), hub.token("erin")
    for user, token in (("dana", dana),):
        started = requests.post(f"{hub.url}/hub/api/users/{user}/server", timeout=60,
                                headers={"Authorization": f"token {token}"})
        assert started.status_code in (201, 202), started.text
    hub.wait(lambda: server_ready(hub, "dana", dana), 120)
    # Reached through the hub's proxy, in a container on the agent's engine.
    status = requests.get(f"{hub.url}/user/dana/api/status", timeout=10,
                          headers={"Authorization": f"token {dana}"})
    assert status.status_code == 200, status.text
    # The server opened with det_hub's quickstart notebook and examples, copied in as it
    # started.
    contents = requests.get(f"{hub.url}/user/dana/api/contents", timeout=10,
                            headers={"Authorization": f"token {dana}"})
    assert contents.status_code == 200, contents.text
    names = {item["name"] for item in contents.json()["content"]}
    assert {"quickstart.ipynb", "examples"} <= names, names
    [held] = hub.call("GET", "/hub_servers", admin).json()["hub_servers"]
    assert (held["owner"], held["state"], held["job_id"]) == (
        "dana", "RUNNING", f"hub-server-{held['id']}")
    assert held["placement"]["agent_id"] == "host-a" and held["placement"]["cpus"]
    busy = [s for a in hub.call("GET", "/agents", admin).json()["agents"] for s in a["slots"]
            if s["allocation_id"]]
    assert len(busy) == 1

    # The only slot is taken: erin's server waits in the queue, and the spawn page says so.
    started = requests.post(f"{hub.url}/hub/api/users/erin/server", timeout=60,
                            headers={"Authorization": f"token {erin}"})
    assert started.status_code == 202, started.text
    with requests.get(f"{hub.url}/hub/api/users/erin/server/progress", stream=True,
                      timeout=60, headers={"Authorization": f"token {erin}"}) as events:
        news = next(line for line in events.iter_lines(decode_unicode=True)
                    if "place" in (line or ""))
    assert "Waiting for 1 slot(s) in resource pool default: place" in news
    jobs = {j["job_id"]: j for j in hub.call("GET", "/jobs", admin).json()["jobs"]}
    [waiting] = [j for j in jobs.values() if j["owner"] == "erin"]
    assert (waiting["type"], waiting["state"], waiting["preemptible"]) == (
        "HUB_SERVER", "QUEUED", False)

    # Dana stops hers: its slot goes to erin's.
    stopped = requests.delete(f"{hub.url}/hub/api/users/dana/server", timeout=60,
                              headers={"Authorization": f"token {dana}"})
    assert stopped.status_code in (202, 204), stopped.text
    hub.wait(lambda: server_ready(hub, "erin", erin), 120)
    servers = {s["owner"]: s for s in hub.call("GET", "/hub_servers", admin).json()[
        "hub_servers"]}
    assert servers["dana"]["state"] == "TERMINATED" and servers["erin"]["state"] == "RUNNING"
    requests.delete(f"{hub.url}/hub/api/users/erin/server", timeout=60,
                    headers={"Authorization": f"token {erin}"})
    hub.wait(lambda: all(s["state"] == "TERMINATED" for s in hub.call(
        "GET", "/hub_servers", admin).json()["hub_servers"]), 60)


OPERATORS = """
c.Authenticator.allowed_users = {"ops"}
c.JupyterHub.load_roles.append({"name": "det-hub-operators", "users": ["ops"],
                                "scopes": ["custom:det-hub:manage", "custom:det-hub:cluster"]})
"""


def test_hub_scopes_grant_det_hub_powers_and_idle_servers_are_culled(tmp_path: Path) -> None:
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    data = tmp_path / "hub"
    data.mkdir()
    (data / "jupyterhub_config.local.py").write_text(OPERATORS)
    hub = HubProcess(data, ["--cull-idle", "4"])
    try:
        alice, bob, ops = hub.token("alice"), hub.token("bob"), hub.token("ops")
        made = hub.call("POST", "/experiments", alice, json={
            "config": yaml.safe_dump(steps_config("alice's", length=1000, sleep=0.05)),
            "context": pack(STEPS)})
        assert made.status_code == 201, made.text
        eid = made.json()["experiment"]["id"]
        # custom:det-hub:manage: anyone's work; custom:det-hub:cluster: agents and the queue.
        assert hub.call("POST", f"/experiments/{eid}/pause", bob).status_code == 403
        assert hub.call("POST", f"/experiments/{eid}/pause", ops).status_code == 200
        for token, status in ((bob, 403), (ops, 200)):
            answer = hub.call("POST", "/agents/local/disable", token, json={"drain": True})
            assert answer.status_code == status, answer.text
        assert hub.call("POST", "/agents/local/enable", ops).status_code == 200
        # Not an admin for all that: creating users stays an admin's.
        assert hub.call("POST", "/users", ops, json={"username": "x"}).status_code == 403
        assert hub.call("POST", f"/experiments/{eid}/kill", ops).status_code == 200

        # An idle server is stopped by the hub's culler (4 s here).
        started = requests.post(f"{hub.url}/hub/api/users/alice/server", timeout=60,
                                headers={"Authorization": f"token {alice}"})
        assert started.status_code in (201, 202), started.text

        def server() -> dict[str, Any]:
            model = requests.get(f"{hub.url}/hub/api/users/alice", timeout=10,
                                 headers={"Authorization": f"token {alice}"}).json()
            return dict(model["servers"].get("", {}))

        hub.wait(lambda: server().get("ready"), 90)
        hub.wait(lambda: not server(), 60)
    finally:
        hub.stop()
