"""Webhooks: registering them over the REST API of an in-process master, and real deliveries
to receivers listening on 127.0.0.1, for experiment state changes and trials' alerts."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import json
import logging
import stat
import tarfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application, RequestHandler
from traitlets.config import Config

from det_hub.agents.local import LocalAgent
from det_hub.service.app import MasterApp, make_app
from det_hub.service.errors import BadRequest
from det_hub.service.master import Master
from det_hub.service.openapi import dereference
from det_hub.service.webhooks import (
    WebhookManager,
    default_payload,
    parse_alert,
    parse_webhook,
    sign,
    slack_payload,
    trigger_matches,
)
from det_hub.store import Store

# --- the pure parts -------------------------------------------------------------------------


def test_a_webhook_body_is_checked_field_by_field() -> None:
    spec = parse_webhook({"url": "https://hooks.example.test/x", "webhook_type": "SLACK",
                          "name": "ops", "triggers": [
                              {"trigger_type": "EXPERIMENT_STATE_CHANGE",
                               "condition": {"state": "COMPLETED"}},
                              {"trigger_type": "CUSTOM"}]})
    assert spec.triggers == (("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}), ("CUSTOM", {}))
    assert (spec.webhook_type, spec.name, spec.mode) == ("SLACK", "ops", "WORKSPACE")

    with pytest.raises(BadRequest) as caught:
        parse_webhook({"url": "ftp://x", "webhook_type": "TEAMS", "mode": "TEAM",
                       "triggers": [{"trigger_type": "TASK_LOG"},
                                    {"trigger_type": "EXPERIMENT_STATE_CHANGE",
                                     "condition": {"state": "DONE"}}]})
    assert [d["path"] for d in caught.value.details] == [
        "url", "webhook_type", "mode", "triggers[0].trigger_type",
        "triggers[1].condition.state"]
    assert "'TASK_LOG' is not one of EXPERIMENT_STATE_CHANGE, CUSTOM" in caught.value.message
    with pytest.raises(BadRequest, match="triggers: must be a non-empty list"):
        parse_webhook({"url": "http://127.0.0.1:1/", "triggers": []})


def test_an_alert_body_is_checked_and_defaults_filled() -> None:
    alert = parse_alert({"title": "loss is NaN"})
    assert (alert.title, alert.description, alert.level) == ("loss is NaN", "", "info")
    with pytest.raises(BadRequest) as caught:
        parse_alert({"title": "", "level": "fatal", "extra": 1})
    assert [d["path"] for d in caught.value.details] == ["extra", "title", "level"]


def test_triggers_match_on_type_and_every_condition_key() -> None:
    done = {"state": "COMPLETED"}
    assert trigger_matches("EXPERIMENT_STATE_CHANGE", done, "EXPERIMENT_STATE_CHANGE", done)
    assert not trigger_matches("EXPERIMENT_STATE_CHANGE", done, "EXPERIMENT_STATE_CHANGE",
                               {"state": "ERROR"})
    assert not trigger_matches("CUSTOM", {}, "EXPERIMENT_STATE_CHANGE", done)
    assert trigger_matches("CUSTOM", {}, "CUSTOM", {"level": "warn"})
    assert not trigger_matches("CUSTOM", {"level": "error"}, "CUSTOM", {"level": "warn"})


def test_payloads_have_determineds_shape_and_slacks() -> None:
    data = {"experiment": {"id": 4, "state": "COMPLETED", "name": "mnist", "owner": "ann",
                           "slots_per_trial": 2, "duration": 41, "resource_pool": "default"}}
    body = default_payload("e-1", "EXPERIMENT_STATE_CHANGE", 1665689991,
                           {"state": "COMPLETED"}, data)
    assert body == {"event_id": "e-1", "event_type": "EXPERIMENT_STATE_CHANGE",
                    "timestamp": 1665689991, "condition": {"state": "COMPLETED"},
                    "event_data": data}
    slack = slack_payload("EXPERIMENT_STATE_CHANGE", data)
    assert slack["text"] == "Experiment 4 (mnist) is COMPLETED"
    assert slack["blocks"][0] == {"type": "section",
                                  "text": {"type": "mrkdwn", "text": slack["text"]}}
    assert "*Duration:* 41 s" in [f["text"] for f in slack["blocks"][1]["fields"]]
    alert = slack_payload("CUSTOM", {"title": "NaN", "description": "at step 7",
                                     "level": "error", "experiment_id": 4, "trial_id": 9})
    assert alert["text"] == "[ERROR] NaN\nat step 7"


# --- receivers ------------------------------------------------------------------------------


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that keeps what is POSTed to it: ``/ok`` answers 200,
    ``/flaky`` 500 to its first two requests and 200 after."""

    url: str
    got: dict[str, list[Any]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    #: Per path, each delivery's signature headers and raw body.
    signed: dict[str, list[tuple[str, str, bytes]]] = field(default_factory=dict)

    async def wait(self, path: str, count: int = 1, timeout: float = 20) -> list[Any]:
        for _ in range(int(timeout / 0.02)):
            if len(self.got.get(path, [])) >= count:
                return self.got[path]
            await asyncio.sleep(0.02)
        raise AssertionError(f"{path} got {self.got.get(path)} (hits {self.hits})")


class _Record(RequestHandler):
    def initialize(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def post(self, name: str) -> None:
        r = self.receiver
        r.hits[name] = r.hits.get(name, 0) + 1
        if name == "flaky" and r.hits[name] <= 2:
            self.set_status(500)
            return
        assert self.request.headers["Content-Type"] == "application/json; charset=UTF-8"
        r.got.setdefault(name, []).append(json.loads(self.request.body))
        r.signed.setdefault(name, []).append((
            self.request.headers.get("X-Determined-AI-Signature-Timestamp", ""),
            self.request.headers.get("X-Determined-AI-Signature", ""), self.request.body))


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    sock, port = bind_unused_port()
    rec = Receiver(f"http://127.0.0.1:{port}")
    server = HTTPServer(Application([(r"/(\w+)", _Record, {"receiver": rec})]))
    server.add_sockets([sock])
    yield rec
    server.stop()


@pytest.fixture
async def silent() -> AsyncIterator[str]:
    """The URL of a server that takes connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/never"
    for w in held:
        w.close()
    server.close()


# --- an in-process master over HTTP ---------------------------------------------------------


@dataclass
class Api:
    url: str
    token: str
    master: Master

    async def call(self, method: str, path: str, body: Any = None,
                   token: str | None = None) -> HTTPResponse:
        return await AsyncHTTPClient().fetch(
            f"{self.url}/api/v1{path}", method=method, raise_error=False,
            headers={"Authorization": f"Bearer {token or self.token}"},
            body=None if body is None else json.dumps(body), request_timeout=30)

    async def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        r = await self.call(method, path, body)
        assert r.code == status, r.body
        return json.loads(r.body)

    async def hook(self, url: str, *conditions: str, webhook_type: str = "DEFAULT",
                   custom: bool = False) -> int:
        triggers: list[dict[str, Any]] = [
            {"trigger_type": "EXPERIMENT_STATE_CHANGE", "condition": {"state": s}}
            for s in conditions]
        if custom:
            triggers.append({"trigger_type": "CUSTOM", "condition": {}})
        body = await self.ok("POST", "/webhooks", {"url": url, "webhook_type": webhook_type,
                                                   "triggers": triggers}, status=201)
        return int(body["webhook"]["id"])

    async def run(self, script: str, **settings: Any) -> dict[str, Any]:
        """Run a one-trial experiment of this script (its config's other ``settings`` added)
        to its end; its final row."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("train.py")
            info.size = len(script.encode())
            tar.addfile(info, io.BytesIO(script.encode()))
        config = yaml.safe_dump({
            "name": "hooked", "entrypoint": "python3 train.py", "max_restarts": 0,
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
            **settings})
        made = await self.ok("POST", "/experiments", {
            "config": config, "context": base64.b64encode(buf.getvalue()).decode()},
            status=201)
        eid = made["experiment"]["id"]
        run = self.master.experiments.runs.get(eid)
        if run is not None:
            await asyncio.wait_for(run.done.wait(), 60)
        return dict((await self.ok("GET", f"/experiments/{eid}"))["experiment"])


@pytest.fixture
async def api(sqlite_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    store = await Store.open(sqlite_url)
    sock, port = bind_unused_port()
    url = f"http://127.0.0.1:{port}"
    hooks = WebhookManager(store, retries=2, backoff_seconds=0.05, timeout_seconds=1.0)
    master = Master(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False),
                    master_url=url, data_dir=tmp_path, kill_grace_seconds=2,
                    poll_interval=0.05, webhooks=hooks)
    await master.start()
    token = await master.users.ensure_admin_token(tmp_path / "admin-token")
    server = HTTPServer(make_app(master))
    server.add_sockets([sock])
    try:
        yield Api(url, token, master)
    finally:
        server.stop()
        for run in list(master.experiments.runs.values()):
            await run.kill()
        await master.stop()
        await store.close()


async def test_a_completed_experiment_is_posted_to_the_webhooks_of_that_state(
        api: Api, receiver: Receiver) -> None:
    await api.hook(f"{receiver.url}/done", "COMPLETED")
    await api.hook(f"{receiver.url}/flaky", "COMPLETED")
    await api.hook(f"{receiver.url}/failed", "ERROR", "CANCELED")
    row = await api.run("print('hello')\n")
    assert row["state"] == "COMPLETED"

    [body] = await receiver.wait("done")
    assert set(body) == {"event_id", "event_type", "timestamp", "condition", "event_data"}
    assert body["event_type"] == "EXPERIMENT_STATE_CHANGE"
    assert body["condition"] == {"state": "COMPLETED"}
    experiment = body["event_data"]["experiment"]
    assert (experiment["id"], experiment["state"], experiment["name"]) == (
        row["id"], "COMPLETED", "hooked")
    assert experiment["owner"] == "admin" and experiment["slots_per_trial"] == 1
    assert isinstance(experiment["duration"], int) and experiment["duration"] >= 0

    # Answered 500 twice, then 200: the third attempt delivers the same event.
    [retried] = await receiver.wait("flaky")
    assert receiver.hits["flaky"] == 3
    assert retried["event_id"] == body["event_id"]

    # The ERROR/CANCELED webhook heard nothing: no state it names was reached.
    assert await api.master.webhooks.drain(10)
    assert "failed" not in receiver.hits


async def test_a_trials_alert_reaches_custom_webhooks_default_and_slack(
        api: Api, receiver: Receiver) -> None:
    await api.hook(f"{receiver.url}/plain", custom=True)
    await api.hook(f"{receiver.url}/slack", webhook_type="SLACK", custom=True)
    await api.hook(f"{receiver.url}/states", "ERROR")
    script = (
        "import json, os, urllib.request\n"
        "url = (os.environ['DET_HUB_MASTER'] + '/api/v1/trials/'\n"
        "       + os.environ['DET_HUB_TRIAL_ID'] + '/alerts')\n"
        "body = {'title': 'loss is NaN', 'description': 'at batch 7', 'level': 'error'}\n"
        "req = urllib.request.Request(url, data=json.dumps(body).encode(), method='POST',\n"
        "    headers={'Authorization': 'Bearer ' + os.environ['DET_HUB_ALLOCATION_TOKEN'],\n"
        "             'Content-Type': 'application/json'})\n"
        "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
        "print('alert answered', opener.open(req).status)\n")
    row = await api.run(script)
    assert row["state"] == "COMPLETED"
    [trial] = (await api.ok("GET", f"/experiments/{row['id']}/trials"))["trials"]
    logs = [line.message for line in await api.master.store.get_logs(trial["id"])]
    assert "alert answered 200" in logs

    [plain] = await receiver.wait("plain")
    assert plain["event_type"] == "CUSTOM" and plain["condition"] == {}
    assert {k: plain["event_data"][k] for k in
            ("title", "description", "level", "experiment_id", "trial_id")} == {
        "title": "loss is NaN", "description": "at batch 7", "level": "error",
        "experiment_id": row["id"], "trial_id": trial["id"]}
    [slack] = await receiver.wait("slack")
    assert set(slack) == {"text", "blocks"}
    assert slack["text"] == "[ERROR] loss is NaN\nat batch 7"
    assert f"*Trial:* {trial['id']}" in [f["text"] for f in slack["blocks"][1]["fields"]]
    assert await api.master.webhooks.drain(10)
    assert "states" not in receiver.hits

    # A user may alert for their own trials only; a bad body names its field.
    bob = (await api.ok("POST", "/users", {"username": "bob"}, status=201))["token"]
    r = await api.call("POST", f"/trials/{trial['id']}/alerts", {"title": "x"}, token=bob)
    assert r.code == 403, r.body
    r = await api.call("POST", f"/trials/{trial['id']}/alerts", {"title": "x", "level": "fatal"})
    assert r.code == 400, r.body
    assert json.loads(r.body)["details"][0]["path"] == "level"
    r = await api.call("POST", "/trials/999999/alerts", {"title": "x"})
    assert r.code == 404, r.body


async def test_a_receiver_that_never_answers_holds_nothing_up(
        api: Api, silent: str, caplog: pytest.LogCaptureFixture) -> None:
    await api.hook(silent, "COMPLETED")
    caplog.set_level(logging.WARNING, logger="det_hub.webhooks")
    row = await api.run("print('hello')\n")
    assert row["state"] == "COMPLETED"
    # The master answers while the delivery waits on the silent receiver.
    assert (await api.ok("GET", "/health"))["status"] == "ok"
    # Three attempts of one second each, and the backoff between them.
    assert await api.master.webhooks.drain(15)
    [line] = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert "EXPERIMENT_STATE_CHANGE" in line and silent in line and "3 attempt(s)" in line


async def test_only_admins_manage_webhooks_and_bad_input_names_the_field(
        api: Api, receiver: Receiver) -> None:
    hook_id = await api.hook(f"{receiver.url}/ok", "COMPLETED")
    bob = (await api.ok("POST", "/users", {"username": "bob"}, status=201))["token"]
    body = {"url": f"{receiver.url}/ok", "triggers": [{"trigger_type": "CUSTOM"}]}
    for method, path, sent in [("POST", "/webhooks", body), ("GET", "/webhooks", None),
                               ("DELETE", f"/webhooks/{hook_id}", None),
                               ("POST", f"/webhooks/{hook_id}/test", {}),
                               ("GET", "/webhooks/signing_key", None)]:
        r = await api.call(method, path, sent, token=bob)
        assert r.code == 403, (method, path, r.body)
        assert "only admins" in json.loads(r.body)["error"]

    r = await api.call("POST", "/webhooks", {"url": "not a url", "triggers": [
        {"trigger_type": "NOPE"}]})
    assert r.code == 400, r.body
    error = json.loads(r.body)
    assert [d["path"] for d in error["details"]] == ["url", "triggers[0].trigger_type"]
    assert error["error"].startswith("url: ")

    [listed] = (await api.ok("GET", "/webhooks"))["webhooks"]
    assert listed["id"] == hook_id and listed["url"] == f"{receiver.url}/ok"
    assert listed["triggers"][0]["condition"] == {"state": "COMPLETED"}

    assert await api.ok("POST", f"/webhooks/{hook_id}/test", {}) == {
        "delivered": True, "error": None}
    [test] = receiver.got["ok"]
    assert test["event_type"] == "CUSTOM" and test["event_data"]["title"] == "det_hub test event"

    gone = await api.ok("DELETE", f"/webhooks/{hook_id}")
    assert gone["webhook"]["id"] == hook_id
    assert (await api.ok("GET", "/webhooks"))["webhooks"] == []
    r = await api.call("DELETE", f"/webhooks/{hook_id}")
    assert r.code == 404 and json.loads(r.body)["error"] == f"webhook {hook_id} not found"

    document = await api.ok("GET", "/openapi.json")
    paths = document["paths"]
    post = paths["/api/v1/webhooks"]["post"]
    assert dereference(document, post["requestBody"]["content"]["application/json"]["schema"])[
        "required"] == ["url", "triggers"]
    assert "post" in paths["/api/v1/trials/{trial_id}/alerts"]


def test_the_admin_page_lists_webhooks_with_a_delete_button() -> None:
    from tornado.escape import url_escape
    from tornado.template import Loader

    from det_hub.service.pages import TEMPLATES

    def post_button(action: str, label: str, **_: Any) -> str:
        return f'<form method="post" action="{action}"><button>{label}</button></form>'

    hooks = [{"id": 3, "name": "ops", "webhook_type": "SLACK", "url": "http://127.0.0.1:1/x",
              "triggers": [{"trigger_type": "EXPERIMENT_STATE_CHANGE",
                            "condition": {"state": "COMPLETED"}},
                           {"trigger_type": "CUSTOM", "condition": {}}]}]
    namespace: dict[str, Any] = dict(
        base="/services/det-hub/", hub_prefix="/hub/", user_name="admin", is_admin=True,
        xsrf="x", version="0", section="admin", pools=[], agents=[], holders={}, jobs=[],
        usage=[], experiments=[], tasks=[], post_button=post_button, url_escape=url_escape,
        xsrf_form_html=lambda: "", slot_hours=str, when=str)
    page = Loader(str(TEMPLATES)).load("admin.html").generate(
        webhooks=hooks, **namespace).decode()
    assert 'id="webhook-table"' in page and 'data-webhook="3"' in page
    assert "EXPERIMENT_STATE_CHANGE:COMPLETED" in page and "http://127.0.0.1:1/x" in page
    assert 'action="/services/det-hub/admin/webhooks/3/delete"' in page
    empty = Loader(str(TEMPLATES)).load("admin.html").generate(
        webhooks=[], **namespace).decode()
    assert 'id="no-webhooks"' in empty


async def test_every_delivery_is_signed_as_determined_signs_it(
        api: Api, receiver: Receiver) -> None:
    """A receiver recomputes the HMAC-SHA256 of '<timestamp>,<raw body>' under the key admins
    read from the master, and compares it with the signature header."""
    key = (await api.ok("GET", "/webhooks/signing_key"))["signing_key"]
    assert len(key) >= 32
    await api.hook(f"{receiver.url}/signed", "COMPLETED")
    await api.run("print('hello')\n")
    await receiver.wait("signed")
    [(timestamp, signature, raw)] = receiver.signed["signed"]
    assert abs(int(timestamp) - time.time()) < 60
    expected = hmac.new(key.encode(), f"{timestamp},".encode() + raw, hashlib.sha256)
    assert hmac.compare_digest(signature, expected.hexdigest())
    # Any change to the body or the timestamp breaks it.
    tampered = hmac.new(key.encode(), f"{int(timestamp) + 1},".encode() + raw, hashlib.sha256)
    assert signature != tampered.hexdigest()
    assert signature == sign(key, int(timestamp), raw)


async def test_the_master_keeps_its_signing_key_across_restarts(
        sqlite_url: str, tmp_path: Path) -> None:
    store = await Store.open(sqlite_url)
    try:
        first = MasterApp(data_dir=str(tmp_path / "data"))
        (tmp_path / "data").mkdir(mode=0o700)
        key = first.make_webhooks(store).signing_key
        kept = tmp_path / "data" / "webhook-signing-key"
        assert kept.read_text().strip() == key and stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert MasterApp(data_dir=str(tmp_path / "data")).make_webhooks(store).signing_key == key
        # A configured key wins, and nothing is written for it.
        configured = MasterApp(data_dir=str(tmp_path / "other"),
                               config=Config({"WebhookManager": {"signing_key": "k" * 40}}))
        assert configured.make_webhooks(store).signing_key == "k" * 40
        assert not (tmp_path / "other").exists()
    finally:
        await store.close()


async def test_a_specific_webhook_hears_only_experiments_that_name_it(
        api: Api, receiver: Receiver) -> None:
    made = await api.ok("POST", "/webhooks", {
        "url": f"{receiver.url}/specific", "name": "ci", "mode": "SPECIFIC",
        "triggers": [{"trigger_type": "EXPERIMENT_STATE_CHANGE",
                      "condition": {"state": "COMPLETED"}}]}, status=201)
    hook_id = made["webhook"]["id"]
    assert made["webhook"]["mode"] == "SPECIFIC"
    await api.hook(f"{receiver.url}/every", "COMPLETED")

    plain = await api.run("print('hello')\n")
    by_name = await api.run("print('hello')\n",
                            integrations={"webhooks": {"webhook_name": ["ci"]}})
    by_id = await api.run("print('hello')\n",
                          integrations={"webhooks": {"webhook_id": [hook_id]}})
    other = await api.run("print('hello')\n",
                          integrations={"webhooks": {"webhook_name": ["someone-else"]}})
    await receiver.wait("every", 4)
    assert await api.master.webhooks.drain(10)
    heard = [b["event_data"]["experiment"]["id"] for b in receiver.got["specific"]]
    assert heard == [by_name["id"], by_id["id"]]
    assert plain["id"] not in heard and other["id"] not in heard


async def test_a_delivery_waiting_to_retry_when_the_master_stops_is_made_after_it_starts(
        sqlite_url: str, tmp_path: Path) -> None:
    """The receiver is down when the experiment completes; the master stops while it waits to
    retry. A new master on the same store delivers the same event once the receiver is up."""
    sock, port = bind_unused_port()
    sock.close()  # nothing listens there yet: the first attempt is refused
    url = f"http://127.0.0.1:{port}/late"
    store = await Store.open(sqlite_url)
    try:
        hooks = WebhookManager(store, retries=5, backoff_seconds=30, timeout_seconds=1.0)
        master = Master(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False),
                        master_url="http://127.0.0.1:9", data_dir=tmp_path, webhooks=hooks)
        await master.start()
        await master.users.ensure_admin_token(tmp_path / "admin-token")
        hook = await store.create_webhook(url=url, webhook_type="DEFAULT", triggers=[
            ("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"})])
        admin = await store.get_user("admin")
        assert admin is not None
        row = await store.create_experiment(
            name="late", owner_id=admin.id, config={}, original_config="", context=None,
            state="COMPLETED", searcher_metric="loss", smaller_is_better=True)
        await store.update_experiment(row.id, state="COMPLETED")  # what fires the event
        for _ in range(250):
            if (kept := await store.list_webhook_deliveries()):
                break
            await asyncio.sleep(0.02)
        [(delivery, kept_hook)] = kept
        assert kept_hook.id == hook.id and delivery.body["event_data"]["experiment"]["id"] == row.id
        await master.stop()  # waiting 30 s to retry: the delivery stays kept
        assert len(await store.list_webhook_deliveries()) == 1

        rec = Receiver(f"http://127.0.0.1:{port}")
        server = HTTPServer(Application([(r"/(\w+)", _Record, {"receiver": rec})]))
        server.listen(port, "127.0.0.1")
        try:
            again = Master(store, LocalAgent(work_root=tmp_path / "work2", use_gpus=False),
                           master_url="http://127.0.0.1:9", data_dir=tmp_path,
                           webhooks=WebhookManager(store, retries=0))
            await again.start()
            [body] = await rec.wait("late")
            assert body["event_id"] == delivery.body["event_id"]
            assert await again.webhooks.drain(10)
            assert await store.list_webhook_deliveries() == []
            await again.stop()
        finally:
            server.stop()
    finally:
        await store.close()
