"""CheckpointBrowser's delete (with its confirm step) and register buttons, against a real
master whose trial wrote real checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from det_hub.client import Client
from det_hub.testing import MasterProcess
from det_hub.widgets import CheckpointBrowser

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture(scope="module")
def experiment(master: MasterProcess, kept_checkpoints: Callable[..., int]) -> int:
    """A completed experiment that kept its checkpoints at 2, 4 and 6 batches and, after
    validating, at 7."""
    return kept_checkpoints(master)


@pytest.fixture
def client(master: MasterProcess) -> Iterator[Client]:
    with Client(master.url, master.token) as c:
        yield c


def by_steps(browser: CheckpointBrowser) -> dict[int, dict[str, Any]]:
    return {r["steps_completed"]: r for r in browser.rows}


def test_register_creates_the_model_then_adds_versions(
        experiment: int, client: Client) -> None:
    browser = CheckpointBrowser(experiment, client=client)
    rows = by_steps(browser)
    assert sorted(rows) == [2, 4, 6, 7] and {r["state"] for r in rows.values()} == {"COMPLETED"}

    browser.select.value = rows[2]["uuid"]
    browser.model_name.value = ""
    assert browser.register() is None
    assert browser.message == "register: type a model name, or pick one"

    browser.model_name.value = "browser-model"
    browser.buttons["register"].click()
    assert browser.message == (f"registered {rows[2]['uuid']} as new model browser-model "
                               "version 1")
    assert "browser-model" in browser.model_name.options
    browser.select.value = rows[4]["uuid"]
    version = browser.register()
    assert version is not None and version.version == 2
    assert browser.message == f"registered {rows[4]['uuid']} as browser-model version 2"
    versions = client.get_model("browser-model").list_versions()
    assert [(v.version, v.checkpoint.uuid) for v in versions] == [
        (2, rows[4]["uuid"]), (1, rows[2]["uuid"])]


def test_delete_asks_first_and_the_master_keeps_registered_checkpoints(
        experiment: int, client: Client, master: MasterProcess) -> None:
    browser = CheckpointBrowser(experiment, client=client)
    rows = by_steps(browser)
    if client.list_models(name="kept-by-browser").total == 0:
        client.create_model("kept-by-browser").register_version(rows[2]["uuid"])
    files = master.data_dir / "checkpoints" / "admin"

    # Pressing delete only asks; cancel leaves everything as it was.
    browser.select.value = rows[6]["uuid"]
    assert browser.confirm.layout.display == "none"
    browser.buttons["delete"].click()
    assert browser.confirm.layout.display == "flex"
    assert rows[6]["uuid"] in browser.question.value
    browser.confirm_buttons["no"].click()
    assert browser.confirm.layout.display == "none" and browser.message == "delete: canceled"
    assert client.get_checkpoint(rows[6]["uuid"]).state == "COMPLETED"
    # Choosing another checkpoint withdraws the question.
    browser.buttons["delete"].click()
    browser.select.value = rows[4]["uuid"]
    assert browser.confirm.layout.display == "none" and browser.pending_delete is None
    assert browser.delete() is False
    assert client.get_checkpoint(rows[4]["uuid"]).state == "COMPLETED"

    # Confirmed: the master deletes the files, and the table shows it.
    browser.select.value = rows[6]["uuid"]
    browser.buttons["delete"].click()
    browser.confirm_buttons["yes"].click()
    assert browser.message == f"deleted {rows[6]['uuid']}"
    assert by_steps(browser)[6]["state"] == "DELETED"
    assert not (files / rows[6]["uuid"]).exists()
    assert browser.selected == rows[6]["uuid"]
    assert browser.buttons["delete"].disabled and browser.buttons["register"].disabled
    assert browser.register() is None
    assert browser.message == (f"register: checkpoint {rows[6]['uuid']} is DELETED, its files "
                               "are not there to use")

    # A registered checkpoint: the master refuses, and the browser says why.
    browser.select.value = rows[2]["uuid"]
    browser.buttons["delete"].click()
    browser.confirm_buttons["yes"].click()
    assert browser.message.startswith(f"delete: checkpoint {rows[2]['uuid']} is registered "
                                      "as model ")
    assert browser.message.endswith("first")
    assert by_steps(browser)[2]["state"] == "COMPLETED" and (files / rows[2]["uuid"]).is_dir()


def test_another_user_may_neither_register_nor_delete(
        experiment: int, master: MasterProcess) -> None:
    r = master.api("POST", "/users", json={"username": "carol"})
    assert r.status_code == 201, r.text
    with Client(master.url, r.json()["token"]) as carol:
        browser = CheckpointBrowser(experiment, client=carol)
        uuid = by_steps(browser)[4]["uuid"]
        browser.select.value = uuid
        browser.ask_delete()
        assert browser.delete() is False
        assert browser.message.startswith(
            f"delete: only the owner of experiment {experiment} or an admin")
        # Registering pins a checkpoint: only who may change its experiment may.
        browser.model_name.value = "carols"
        assert browser.register() is None
        assert browser.message.startswith(f"register: checkpoint {uuid} is of experiment "
                                          f"{experiment}, owned by admin")
        # The model made for the refused registration is not left behind.
        assert carol.list_models(name="carols").total == 0
        # Not into someone else's model either.
        browser.model_name.value = "browser-model"
        assert browser.register() is None
        assert browser.message.startswith("register: only the owner of model 'browser-model'")
