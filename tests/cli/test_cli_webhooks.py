"""``det-hub webhook`` against an in-process master (the CLI runs in a thread beside it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli_result import Result
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from det_hub.agents.local import LocalAgent
from det_hub.cli.main import main
from det_hub.service.app import make_app
from det_hub.service.master import Master
from det_hub.store import Store


@pytest.fixture
async def served(sqlite_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """The URL and admin token of a master serving on 127.0.0.1."""
    store = await Store.open(sqlite_url)
    master = Master(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False),
                    master_url="http://127.0.0.1:9", data_dir=tmp_path)
    await master.start()
    token = await master.users.ensure_admin_token(tmp_path / "admin-token")
    sock, port = bind_unused_port()
    server = HTTPServer(make_app(master))
    server.add_sockets([sock])
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.stop()
        await master.stop()
        await store.close()


async def test_create_list_and_delete_webhooks(
        served: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, token = served

    async def det(*argv: str) -> Result:
        code = await asyncio.to_thread(main, ["-m", url, "--token", token, *argv])
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    made = await det("webhook", "create", "http://127.0.0.1:1/hook", "--trigger",
                     "EXPERIMENT_STATE_CHANGE:completed", "--trigger", "CUSTOM:error",
                     "--type", "slack", "--name", "ops", "--json")
    assert made.code == 0, made.err
    hook = json.loads(made.out)["webhook"]
    assert hook["webhook_type"] == "SLACK" and hook["name"] == "ops"
    assert [(t["trigger_type"], t["condition"]) for t in hook["triggers"]] == [
        ("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}), ("CUSTOM", {"level": "error"})]

    listed = await det("webhook", "list")
    assert listed.code == 0, listed.err
    [row] = [line for line in listed.out.splitlines() if line.startswith(str(hook["id"]))]
    assert "ops" in row and "SLACK" in row and "http://127.0.0.1:1/hook" in row
    assert "EXPERIMENT_STATE_CHANGE:COMPLETED, CUSTOM:error" in row

    bad = await det("webhook", "create", "http://127.0.0.1:1/hook", "--trigger", "TASK_LOG")
    assert bad.code == 1
    assert "triggers[0].trigger_type" in bad.err

    gone = await det("webhook", "delete", str(hook["id"]))
    assert gone.code == 0 and f"Deleted webhook {hook['id']}" in gone.out
    assert json.loads((await det("webhook", "list", "--json")).out) == {"webhooks": []}
    missing = await det("webhook", "delete", str(hook["id"]))
    assert missing.code == 1 and f"webhook {hook['id']} not found" in missing.err


async def test_admins_read_the_signing_key(
        served: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, token = served
    code = await asyncio.to_thread(main, ["-m", url, "--token", token, "webhook",
                                          "signing-key", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    key = json.loads(out.out)["signing_key"]
    assert len(key) >= 32
    code = await asyncio.to_thread(main, ["-m", url, "--token", token, "webhook",
                                          "signing-key"])
    assert code == 0 and capsys.readouterr().out.strip() == key
