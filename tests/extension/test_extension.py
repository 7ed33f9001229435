"""The jupyter-server extension, between a real notebook server and a real master.

A ``jupyter_server`` subprocess (under a hub-like ``base_url``) with ``det_hub.extension``
enabled is told of a ``det-hub master`` through ``DET_HUB_MASTER``/``DET_HUB_TOKEN``; the tests
call it as a browser would, with the notebook server's token only. Two more servers stand for
a master that is down and for one that is not configured.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
import yaml

import det_hub
from det_hub.plotly_bundle import plotly_js, plotly_version
from det_hub.testing import TERMINAL, MasterProcess, free_port, pack

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "tests" / "e2e" / "contexts" / "steps"
#: Where the main server serves, as a hub's single-user server would.
BASE = "/user/alice/"


class NotebookServer:
    """``python -m jupyter_server`` on 127.0.0.1 with the det_hub extension enabled: by
    ``--ServerApp.jpserver_extensions`` (``enable="flag"``), or by the config file the wheel
    installs, found through ``JUPYTER_CONFIG_PATH`` (``enable="data-file"``)."""

    def __init__(self, root: Path, env: dict[str, str], base_url: str = "/",
                 enable: str = "flag") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.base_url = root, base_url
        self.log_path = root / "server.log"
        if enable != "flag":
            env = dict(env, JUPYTER_CONFIG_PATH=str(REPO / "jupyter-config"))
        self.env, self.enable = env, enable
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        self.token = f"nb-{self.port}-secret"
        self.url = f"http://127.0.0.1:{self.port}{self.base_url}"
        args = [
            sys.executable, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}",
            "--ServerApp.open_browser=False", f"--ServerApp.root_dir={self.root}",
            f"--ServerApp.base_url={self.base_url}", "--ServerApp.port_retries=0",
        ]
        if self.enable == "flag":
            args.append('--ServerApp.jpserver_extensions={"det_hub.extension": True}')
        if os.geteuid() == 0:
            args.append("--allow-root")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, env=self.env, cwd=self.root, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        # The free port may be taken by another process before the server binds it: then it
        # starts again on another.
        retries = 3
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and retries and \
                    "is not available" in self.log_path.read_text():
                retries -= 1
                self._start()
                continue
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if requests.get(self.url + "api/status", headers=self.auth, timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        raise AssertionError("the notebook server did not come up:\n"
                             + self.log_path.read_text())

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def call(self, method: str, path: str, authenticated: bool = True,
             **kwargs: Any) -> requests.Response:
        """``method`` on ``<base_url>det-hub/<path>``, with the server's token unless not."""
        headers = dict(self.auth if authenticated else {}, **kwargs.pop("headers", {}))
        return requests.request(method, f"{self.url}det-hub/{path}", headers=headers,
                                timeout=60, **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _server_env(data_dir: Path, **det_hub_env: str) -> dict[str, str]:
    """The environment without the caller's det_hub settings, plus ``det_hub_env``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    # No admin-token file of some local master may stand in for DET_HUB_TOKEN.
    env["DET_HUB_DATA_DIR"] = str(data_dir)
    env.update(det_hub_env)
    return env


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    """The module's master (tests/conftest.py)."""
    return module_master


@pytest.fixture(scope="module")
def servers(master: MasterProcess,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, NotebookServer]]:
    """The main server (``BASE``, told of ``master``), one whose master is down, one with no
    master set; started together. The last two find the extension through the config file
    that the wheel installs."""
    tmp = tmp_path_factory.mktemp("servers")
    started = {
        "main": NotebookServer(tmp / "main", _server_env(
            tmp / "empty", DET_HUB_MASTER=master.url, DET_HUB_TOKEN=master.token), BASE),
        "down": NotebookServer(tmp / "down", _server_env(
            tmp / "empty", DET_HUB_MASTER=f"http://127.0.0.1:{free_port()}",
            DET_HUB_TOKEN="unused"), enable="data-file"),
        "unset": NotebookServer(tmp / "unset", _server_env(tmp / "empty"), enable="data-file"),
    }
    try:
        for server in started.values():
            server.wait_ready()
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(scope="module")
def server(servers: dict[str, NotebookServer]) -> NotebookServer:
    return servers["main"]


def _steps_config(length: int, **hparams: Any) -> str:
    return yaml.safe_dump({
        "name": "through-the-extension", "entrypoint": "python3 train.py",
        "hyperparameters": hparams, "max_restarts": 0,
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
    })


def _connections_to(pid: int, port: int) -> int:
    """How many TCP connections process ``pid`` holds open to 127.0.0.1:``port``."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def test_get_is_the_masters_answer(server: NotebookServer, master: MasterProcess) -> None:
    master.create_ok(yaml.safe_load(_steps_config(5)), activate=False)
    r = server.call("GET", "api/v1/experiments")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json() == master.get("/experiments")
    assert [e["name"] for e in r.json()["experiments"]] == ["through-the-extension"]


def test_create_and_follow_logs_as_they_come(server: NotebookServer,
                                             master: MasterProcess) -> None:
    r = server.call("POST", "api/v1/experiments", json={
        "config": _steps_config(40, sleep=0.1, checkpoint_every=10),
        "context": pack(STEPS), "activate": True})
    assert r.status_code == 201, r.text
    eid = r.json()["experiment"]["id"]
    assert master.experiment(eid)["name"] == "through-the-extension"
    [trial] = master.wait(lambda: master.trials(eid))

    seen: list[str] = []
    with server.call("GET", f"api/v1/trials/{trial['id']}/logs?follow=true",
                     stream=True) as logs:
        assert logs.status_code == 200
        assert logs.headers["Content-Type"] == "application/x-ndjson"
        lines = logs.iter_lines()
        for line in lines:
            seen.append(json.loads(line)["message"])
            if seen[-1].startswith("checkpoint"):
                break
        # The first checkpoint (at batch 10 of 40) arrived while the trial was still running.
        assert master.trials(eid)[0]["state"] not in TERMINAL
        seen.extend(json.loads(line)["message"] for line in lines)
    # The stream ended with the trial, after its last line.
    assert seen[-1] == "done"
    assert sum(m.startswith("checkpoint") for m in seen) == 5
    assert master.wait_state(eid)["state"] == "COMPLETED"


def test_browser_leaving_closes_the_masters_stream(server: NotebookServer,
                                                   master: MasterProcess) -> None:
    # One line at the start, then silence: only the browser's leaving can end the stream.
    eid = master.create_ok(yaml.safe_load(_steps_config(1000, sleep=0.1, report_where=True)))
    [trial] = master.wait(lambda: master.trials(eid))
    with server.call("GET", f"api/v1/trials/{trial['id']}/logs?follow=true",
                     stream=True) as logs:
        lines = logs.iter_lines()  # dropping the iterator would close the connection
        assert json.loads(next(lines))["message"].startswith("in container")
        assert _connections_to(server.proc.pid, master.port) == 1
    master.wait(lambda: _connections_to(server.proc.pid, master.port) == 0, timeout=10)
    assert master.trials(eid)[0]["state"] not in TERMINAL
    master.api("POST", f"/experiments/{eid}/kill")
    master.wait_state(eid)


def test_server_sent_events_stream_through(server: NotebookServer,
                                           master: MasterProcess) -> None:
    paths = master.get("/openapi.json")["paths"]
    if not any(p.endswith("/metrics/stream") for p in paths):
        pytest.skip("this master has no metrics stream")
    eid = master.create_ok(yaml.safe_load(_steps_config(40, sleep=0.1, report_every=5)))
    events: list[str] = []
    with server.call("GET", f"api/v1/experiments/{eid}/metrics/stream", stream=True,
                     headers={"Accept": "text/event-stream"}) as stream:
        assert stream.status_code == 200
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        lines = stream.iter_lines(decode_unicode=True)
        for line in lines:
            if line.startswith("event: "):
                events.append(line[len("event: "):])
                if events[-1] == "metrics":
                    break
        # The first report (batch 5 of 40) came through while the trial was running.
        assert master.experiment(eid)["state"] not in TERMINAL
        events.extend(line[len("event: "):] for line in lines if line.startswith("event: "))
    assert events.count("metrics") >= 2 and events[-1] == "end"
    assert master.wait_state(eid)["state"] == "COMPLETED"


def test_large_context_passes(server: NotebookServer, master: MasterProcess) -> None:
    """A 30 MiB context (40 MiB of base64) is passed on whole."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in STEPS.iterdir():
            tar.add(path, path.name)
        blob = os.urandom(30 * 1024 * 1024)
        info = tarfile.TarInfo("weights.bin")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    r = server.call("POST", "api/v1/experiments", json={
        "config": _steps_config(5), "activate": False,
        "context": base64.b64encode(buf.getvalue()).decode()})
    assert r.status_code == 201, r.text
    assert master.experiment(r.json()["experiment"]["id"])["state"] == "PAUSED"


def test_the_notebook_servers_login_is_needed(server: NotebookServer,
                                              master: MasterProcess) -> None:
    before = len(master.get("/experiments")["experiments"])
    assert server.call("GET", "api/v1/experiments", authenticated=False).status_code == 403
    # The master's token is no key to the notebook server.
    r = server.call("GET", "api/v1/experiments", authenticated=False,
                    headers={"Authorization": f"Bearer {master.token}"})
    assert r.status_code == 403
    assert server.call("GET", "config", authenticated=False).status_code == 403
    r = server.call("POST", "api/v1/experiments", authenticated=False,
                    json={"config": _steps_config(5), "context": pack(STEPS)})
    assert r.status_code == 403
    assert r.json()["details"] == [] and r.json()["error"]

    # A browser session (the login cookie) needs the XSRF token to change anything.
    browser = requests.Session()
    assert browser.get(f"{server.url}api/status?token={server.token}", timeout=10).ok
    assert browser.cookies
    r = browser.post(f"{server.url}det-hub/api/v1/experiments", timeout=10,
                     json={"config": _steps_config(5), "context": pack(STEPS)})
    assert r.status_code == 403 and "xsrf" in r.json()["error"].lower()
    assert len(master.get("/experiments")["experiments"]) == before
    assert browser.get(f"{server.url}det-hub/api/v1/experiments", timeout=10).ok


def test_master_errors_pass_through(server: NotebookServer, master: MasterProcess) -> None:
    r = server.call("GET", "api/v1/experiments/987654")
    direct = master.api("GET", "/experiments/987654")
    assert (r.status_code, direct.status_code) == (404, 404)
    assert r.json() == direct.json()
    assert "987654" in r.json()["error"]

    r = server.call("POST", "api/v1/experiments", json={"config": "searcher: {}"})
    assert r.status_code == 400
    assert r.json() == master.api("POST", "/experiments", json={"config": "searcher: {}"}).json()

    # Dot segments, which requests would resolve before sending, are refused.
    for path in ("trials/1/../../../hub/api", "trials/%2e%2e/%2E%2E/me"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", f"{BASE}det-hub/api/v1/{path}", headers=server.auth)
        answer = conn.getresponse()
        assert answer.status == 400
        assert "leaves the master's API" in json.loads(answer.read())["error"]
        conn.close()


def test_config(server: NotebookServer, master: MasterProcess) -> None:
    r = server.call("GET", "config")
    assert r.status_code == 200
    assert r.json() == {"master": master.url, "user": master.get("/me")["user"],
                        "version": det_hub.__version__, "problem": None}


def test_master_down_is_502(servers: dict[str, NotebookServer]) -> None:
    down = servers["down"]
    r = down.call("GET", "api/v1/experiments")
    assert r.status_code == 502
    assert "cannot be reached" in r.json()["error"] and r.json()["details"]
    config = down.call("GET", "config").json()
    assert config["user"] is None and "cannot be reached" in config["problem"]


def test_master_not_set_is_503(servers: dict[str, NotebookServer]) -> None:
    unset = servers["unset"]
    r = unset.call("DELETE", "api/v1/experiments/1")
    assert r.status_code == 503
    assert "DET_HUB_MASTER is not set" in r.json()["error"]
    assert unset.call("GET", "config").json() == {
        "master": None, "user": None, "version": det_hub.__version__,
        "problem": r.json()["error"]}


def test_plotly_js_for_the_widgets_charts(server: NotebookServer) -> None:
    """The notebook widgets' charts load Plotly.js from the notebook server: gzip-compressed,
    kept by the browser when asked for under its digest, and only for the server's users."""
    path, version = plotly_js(), plotly_version()
    assert path is not None and version
    r = server.call("GET", "static/plotly.min.js", authenticated=False, allow_redirects=False)
    assert r.status_code in (302, 403), r.status_code
    r = server.call("GET", f"static/plotly.min.js?v={version}", stream=True,
                    headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200
    assert r.headers["Content-Encoding"] == "gzip"
    assert r.headers["Content-Type"].startswith("text/javascript")
    assert "immutable" in r.headers["Cache-Control"]
    assert gzip.decompress(r.raw.read(decode_content=False)) == path.read_bytes()
    again = server.call("GET", "static/plotly.min.js", headers={
        "Accept-Encoding": "gzip", "If-None-Match": r.headers["Etag"]})
    assert again.status_code == 304 and again.content == b""
    plain = server.call("GET", "static/plotly.min.js?v=another",
                        headers={"Accept-Encoding": "identity"})
    assert plain.content == path.read_bytes()
    assert plain.headers["Cache-Control"] == "no-cache"
