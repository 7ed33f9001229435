"""Notebooks, shells and TensorBoards on a real master and agent, used through the master's
proxy as a user would: JupyterLab and its kernels (over WebSockets), ``ssh`` through the
tunnel, TensorBoard over an experiment's metrics. Only the owner (or one holding the task's
token) gets in; an idle one is killed, a busy kernel is not idle."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from det_hub.testing import MasterProcess

from .conftest import steps_config
from .test_cluster_api import user_token

pytestmark = pytest.mark.slow


def task(master: MasterProcess, kind: str, tid: int) -> dict[str, Any]:
    return master.get(f"/{kind}s/{tid}")[kind]


def wait_state(master: MasterProcess, kind: str, tid: int, state: str,
               timeout: float = 60) -> dict[str, Any]:
    return master.wait(lambda: (t := task(master, kind, tid))["state"] == state and t, timeout)


def started_url(master: MasterProcess, done: subprocess.CompletedProcess[str]) -> str:
    """The URL ``notebook|tensorboard start --no-browser`` printed."""
    assert done.returncode == 0, done.stdout + done.stderr
    url = done.stdout.strip().splitlines()[-1]
    assert url.startswith(master.url + "/proxy/"), done.stdout
    return url


def execute(ws_url: str, cookie: str, code: str,
            headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run code in a kernel over its WebSocket (Jupyter's messaging protocol, JSON frames);
    the iopub messages until the kernel is idle again."""

    async def go() -> list[dict[str, Any]]:
        conn = await websocket_connect(HTTPRequest(
            ws_url, headers={"Cookie": cookie, **(headers or {})}))
        msg_id = uuid.uuid4().hex
        conn.write_message(json.dumps({
            "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        seen = []
        while True:
            raw = await asyncio.wait_for(conn.read_message(), 60)
            assert raw is not None, "the kernel's WebSocket closed"
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            seen.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                conn.close()
                return seen

    return asyncio.run(go())



def assert_serves_the_losses(master: MasterProcess, browser: requests.Session, base: str,
                             run: str) -> None:
    """The TensorBoard at ``base`` shows ``run``'s training loss as the steps trial reported
    it (1/step at steps 5, 10, 15 and 20), once it has read the event files."""

    def tags() -> Any:
        answer = browser.get(f"{base}/data/plugin/scalars/tags", timeout=10)
        return answer.status_code == 200 and answer.json().get(run)

    assert "training/loss" in master.wait(tags, timeout=60)
    points = browser.get(f"{base}/data/plugin/scalars/scalars",
                         params={"run": run, "tag": "training/loss"}, timeout=10).json()
    assert [(p[1], round(p[2], 4)) for p in points] == [
        (s, round(1.0 / s, 4)) for s in (5, 10, 15, 20)]


def test_a_notebook_serves_jupyterlab_and_its_kernels_to_its_owner_only(
        master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "work"
    context.mkdir()
    (context / "hello.txt").write_text("from the context\n")
    url = started_url(master, master.cli("notebook", "start", "--no-browser", "--context",
                                         str(context), "--config", "description=lab"))
    [listed] = master.get("/notebooks")["notebooks"]
    nid = listed["id"]
    assert (listed["state"], listed["ready"], listed["description"]) == ("RUNNING", True, "lab")
    assert listed["job_id"] == f"notebook-{nid}" and "token=" in listed["url"]

    # The printed URL opens JupyterLab and leaves a cookie for the notebook's path.
    browser = requests.Session()
    page = browser.get(url, timeout=30)
    assert page.status_code == 200 and "JupyterLab" in page.text, page.text[:500]
    cookie = f"det_hub_task_{nid}={browser.cookies.get(f'det_hub_task_{nid}')}"
    base = f"{master.url}/proxy/{nid}"
    assert browser.get(f"{base}/api/status", timeout=10).status_code == 200
    contents = browser.get(f"{base}/api/contents/hello.txt", timeout=10).json()
    assert contents["content"] == "from the context\n"

    # Without the token, the cookie or the owner's API token, nobody passes.
    assert requests.get(f"{base}/api/status", timeout=10).status_code == 401
    stranger = user_token(master, "stranger")
    assert requests.get(f"{base}/api/status", timeout=10, headers={
        "Authorization": f"Bearer {stranger}"}).status_code == 403
    assert "url" not in master.get(f"/notebooks/{nid}", token=stranger)["notebook"]
    assert requests.get(f"{base}/api/status", timeout=10, headers={
        "Authorization": f"Bearer {master.token}"}).status_code == 200
    assert requests.get(f"{base}/api/status?token=wrong", timeout=10).status_code == 401

    # A kernel started through the proxy runs code over its WebSocket.
    kernel = browser.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text
    ws_url = f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels"
    out = execute(ws_url, cookie, "print(6 * 7)")
    assert any(m["msg_type"] == "stream" and m["content"]["text"] == "42\n" for m in out), out
    with pytest.raises(HTTPClientError):  # a WebSocket needs a credential too
        execute(ws_url, "", "1")

    # A restarted master adopts the running notebook; the browser's cookie still lets it in.
    master.stop()
    master.start()
    assert browser.get(f"{base}/api/status", timeout=10).status_code == 200
    assert task(master, "notebook", nid)["state"] == "RUNNING"

    # Killed: the proxy says so, and the slot is free.
    assert master.cli("notebook", "kill", str(nid), check=True).stdout.startswith(
        f"Notebook {nid} is TERMINAT")
    ended = wait_state(master, "notebook", nid, "TERMINATED")
    assert ended["exit_reason"] == "killed by its owner or an admin"
    gone = browser.get(f"{base}/api/status", timeout=10)
    assert gone.status_code == 503 and "has ended" in gone.json()["error"]
    assert "the notebook ended" in master.cli("notebook", "logs", str(nid), check=True).stdout


def test_an_idle_notebook_is_killed_but_not_while_its_kernel_runs_a_cell(
        master: MasterProcess) -> None:
    done = master.cli("notebook", "start", "--no-browser", "--config", "idle_timeout=3")
    url = started_url(master, done)
    nid = int(url.split("/proxy/")[1].split("/")[0])
    browser = requests.Session()
    assert browser.get(url, timeout=30).status_code == 200
    base = f"{master.url}/proxy/{nid}"
    kernel = browser.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=60).json()
    ws_url = f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel['id']}/channels"
    cookie = f"det_hub_task_{nid}={browser.cookies.get(f'det_hub_task_{nid}')}"

    async def quiet_cell() -> None:
        # Sent, then nothing through the proxy while the cell sleeps twice the timeout.
        conn = await websocket_connect(HTTPRequest(ws_url, headers={"Cookie": cookie}))
        conn.write_message(json.dumps({
            "header": {"msg_id": "m1", "username": "t", "session": "s",
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": "import time; time.sleep(7)", "silent": False}}))
        while True:  # until the kernel says it is busy with it, as a notebook's page shows
            msg = json.loads(await asyncio.wait_for(conn.read_message(), 60))
            if msg["parent_header"].get("msg_id") == "m1" and msg["msg_type"] == "status" \
                    and msg["content"]["execution_state"] == "busy":
                break
        conn.close()

    asyncio.run(quiet_cell())
    # The kernel is busy for 7 s, more than twice the timeout: the notebook runs on.
    for _ in range(12):
        assert task(master, "notebook", nid)["state"] == "RUNNING"
        time.sleep(0.5)
    ended = wait_state(master, "notebook", nid, "TERMINATED", timeout=30)
    assert ended["exit_reason"] == ("killed after 3 s idle (no output and no use through the "
                                    "proxy; its idle_timeout)")


def test_a_shell_takes_ssh_through_the_master(master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "work"
    context.mkdir()
    (context / "notes.txt").write_text("shell context\n")
    first = master.cli("shell", "start", "--context", str(context),
                       "cat notes.txt; echo $DET_HUB_TASK_TYPE; exit 4")
    assert first.returncode == 4, first.stdout + first.stderr
    assert first.stdout.splitlines() == ["shell context", "SHELL"]
    [shell] = master.get("/shells")["shells"]
    sid = shell["id"]
    assert shell["state"] == "RUNNING" and shell["private_key"].startswith("-----BEGIN")
    assert shell["public_key"].startswith("ssh-ed25519 ")

    again = master.cli("shell", "open", str(sid), "echo", "again")
    assert (again.returncode, again.stdout) == (0, "again\n"), again.stderr
    shown = master.cli("shell", "show-ssh-command", str(sid), check=True).stdout
    assert shown.startswith("ssh -o 'ProxyCommand=") and f"shell-{sid}" in shown

    # The tunnel is the owner's (and admins'): a stranger's token gets nowhere.
    stranger = user_token(master, "stranger")
    assert "private_key" not in master.get(f"/shells/{sid}", token=stranger)["shell"]
    for headers in ({}, {"Authorization": f"Bearer {stranger}"}):
        async def dial(h: dict[str, str] = headers) -> None:
            await websocket_connect(HTTPRequest(
                f"{master.url.replace('http', 'ws', 1)}/proxy/{sid}/", headers=h))
        with pytest.raises(HTTPClientError) as refused:
            asyncio.run(dial())
        assert refused.value.code in (401, 403)
    plain = requests.get(f"{master.url}/proxy/{sid}/", timeout=10,
                         headers={"Authorization": f"Bearer {master.token}"})
    assert plain.status_code == 400 and "SSH tunnel" in plain.json()["error"]

    master.cli("shell", "kill", str(sid), check=True)
    assert wait_state(master, "shell", sid, "TERMINATED")["exit_reason"] == \
        "killed by its owner or an admin"
    closed = master.cli("shell", "open", str(sid), "true")
    assert closed.returncode == 1 and "ended before it served" in closed.stderr


def test_a_tensorboard_shows_the_metrics_an_experiment_reported(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config("tb", length=20, report_every=5))
    assert master.wait_state(eid)["state"] == "COMPLETED"
    [trial] = master.trials(eid)

    refused = master.api("POST", "/tensorboards", json={"experiment_ids": [eid, 999]})
    assert refused.status_code == 400 and "experiment 999 not found" in refused.text
    assert master.api("POST", "/tensorboards", json={}).status_code == 400

    url = started_url(master, master.cli("tensorboard", "start", str(eid), "--no-browser"))
    [board] = master.get("/tensorboards")["tensorboards"]
    assert board["experiment_ids"] == [eid]
    assert board["description"] == f"TensorBoard (experiment {eid})"
    browser = requests.Session()
    assert browser.get(url, timeout=30).status_code == 200
    base = f"{master.url}/proxy/{board['id']}"
    assert_serves_the_losses(master, browser, base, f"experiment_{eid}/trial/{trial['id']}")
    master.cli("tensorboard", "kill", str(board["id"]), check=True)
    wait_state(master, "tensorboard", board["id"], "TERMINATED")


def test_bad_task_requests_get_clear_errors(master: MasterProcess) -> None:
    for kind, body, text in (
            ("notebooks", {"config": "entrypoint: x"}, "unknown key"),
            ("shells", {"config": yaml.safe_dump({"resources": {"slots": 99}})},
             "resources.slots"),
            ("notebooks", {"experiment_ids": [1]}, "only a TensorBoard shows experiments"),
            ("tensorboards", {"experiment_ids": ["x"]}, "must be a list of experiment ids")):
        answer = master.api("POST", f"/{kind}", json=body)
        assert answer.status_code == 400 and text in answer.text, (kind, answer.text)
    assert master.api("GET", "/notebooks/12345").status_code == 404
    assert requests.get(f"{master.url}/proxy/12345/", timeout=10).status_code == 404
    assert master.get("/notebooks")["notebooks"] == []
