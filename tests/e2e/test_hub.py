"""det_hub behind a real JupyterHub, started as ``det-hub up`` starts it: the master is a hub
service, browsers sign in through the hub's OAuth flow, hub tokens are API tokens, hub users
are det_hub users (each may change only their own work) and hub admins are det_hub admins."""

from __future__ import annotations

import contextlib
import os
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
    container_python_mounts,
    free_port,
    pack,
    remove_agent_containers,
    required_env,
    write_docker_config,
)

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow

SERVICE = "/services/det-hub"


class Hub:
    """``det-hub up`` on free ports, with its data directory in a test's tmp_path."""

    def __init__(self, data_dir: Path, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}{SERVICE}/api/v1"
        self.log = data_dir / "up.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        ports = [str(free_port()) for _ in range(3)]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "det_hub.cli.main", "up", "--data-dir", str(data_dir),
                 "--port", str(self.port), "--hub-port", ports[0], "--proxy-api-port",
                 ports[1], "--master-port", ports[2], *(extra_args or [])],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        self.wait(lambda: self._answers(f"{self.api}/health"), 90)
        self.password = (data_dir / "hub-password").read_text().strip()

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait(self, what: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"det-hub up exited:\n{self.log.read_text()[-4000:]}")
            value = what()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out; det-hub up log:\n{self.log.read_text()[-4000:]}")

    def login(self, name: str) -> requests.Session:
        """A browser session signed in to the hub as ``name``."""
        browser = requests.Session()
        browser.get(f"{self.url}/hub/login", timeout=10)
        done = browser.post(f"{self.url}/hub/login", timeout=30, data={
            "username": name, "password": self.password,
            "_xsrf": browser.cookies.get("_xsrf", path="/hub/")}, allow_redirects=False)
        assert done.status_code == 302, done.text[:500]
        return browser

    def token(self, name: str) -> str:
        """A hub API token of ``name``'s, made as a user makes one on the hub's token page."""
        browser = self.login(name)
        made = browser.post(f"{self.url}/hub/api/users/{name}/tokens", timeout=10,
                            json={"note": "test"}, headers={
                                "X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/")})
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    def call(self, method: str, path: str, token: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{self.api}{path}", timeout=30,
                                headers={"Authorization": f"token {token}"}, **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    running = Hub(tmp_path / "hub")
    yield running
    running.stop()


def test_browsers_sign_in_through_the_hub_and_see_the_service(hub: Hub) -> None:
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


def test_hub_tokens_are_api_tokens_and_only_owners_and_admins_change_work(hub: Hub) -> None:
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


def test_a_users_notebook_server_reaches_the_master_as_that_user(hub: Hub) -> None:
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


SPAWNER_CONFIG = """
import sys
c.JupyterHub.spawner_class = "det_hub.spawner.DetSpawner"
c.DockerSpawner.image = {image!r}
c.DockerSpawner.remove = True
c.DockerSpawner.name_template = "det-hub-test-{{username}}"
c.DockerSpawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser", "--allow-root"]
c.DockerSpawner.mounts = {mounts!r}
c.DetSpawner.queue_timeout = 120
c.DetSpawner.poll_interval = 0.5
"""


@pytest.fixture
def docker_hub(tmp_path: Path) -> Iterator[Hub]:
    """``det-hub up`` with DetSpawner, on one Docker engine of a single slot."""
    host, image = required_env("DET_HUB_TEST_DOCKER_HOST", "DET_HUB_TEST_IMAGE")
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    master_config = write_docker_config(
        tmp_path / "det_hub_config.py", [host], image, ["host-a"],
        [f"c.DockerAgent.cpu_slot_cores = {os.cpu_count() or 1}"])
    data = tmp_path / "hub"
    data.mkdir()
    mounts = [{"type": "bind", "source": m["host_path"], "target": m["container_path"],
               "read_only": True} for m in container_python_mounts()]
    (data / "jupyterhub_config.local.py").write_text(
        SPAWNER_CONFIG.format(image=image, mounts=mounts))
    running = Hub(data, ["--master-config", str(master_config)])
    yield running
    running.stop()
    remove_agent_containers([host], ["host-a"])
    from docker.client import DockerClient

    with contextlib.closing(DockerClient(base_url=host, version="auto")) as engine:
        for container in engine.containers.list(all=True, filters={"name": "det-hub-test-"}):
            container.remove(force=True)


def server_ready(hub: Hub, user: str, token: str) -> bool:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", timeout=10,
                         headers={"Authorization": f"token {token}"}).json()
    return bool(model["servers"].get("", {}).get("ready"))


def test_detspawner_servers_take_slots_from_the_scheduler(docker_hub: Hub) -> None:
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
