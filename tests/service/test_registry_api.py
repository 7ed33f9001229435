"""The model registry, checkpoint deletion and checkpoint GC through the REST API of a real
master, with real trials writing real checkpoints."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest

from det_hub.service.openapi import dereference
from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def checkpointing(master: MasterProcess, length: int, every: int, *, sleep: float = 0.0,
                  **retention: int) -> dict[str, Any]:
    """A steps experiment checkpointing every ``every`` batches, validating (and
    checkpointing) at the end."""
    config: dict[str, Any] = {
        "name": "ckpts", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": sleep, "report_every": every, "checkpoint_every": every},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
        "max_restarts": 0,
    }
    if retention:
        config["checkpoint_storage"] = {"type": "shared_fs",
                                        "host_path": str(master.data_dir / "checkpoints" / "admin"),
                                        **retention}
    return config


@pytest.fixture(scope="module")
def finished(master: MasterProcess) -> dict[str, Any]:
    """A completed experiment that kept all its checkpoints: at 2, 4 and 6 batches, and at 7
    after validating."""
    eid = master.create_ok(checkpointing(master, 7, 2, save_trial_latest=10))
    assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert [(c["steps_completed"], c["state"]) for c in ckpts] == [
        (7, "COMPLETED"), (6, "COMPLETED"), (4, "COMPLETED"), (2, "COMPLETED")]
    return {"id": eid, "checkpoints": ckpts}


@pytest.fixture(scope="module")
def bob(master: MasterProcess) -> str:
    """The token of a user who is not an admin."""
    r = master.api("POST", "/users", json={"username": "bob"})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def error(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "details"}
    return str(body["error"])


def test_models_and_versions_over_http(master: MasterProcess, finished: dict[str, Any],
                                       bob: str) -> None:
    api = master.api
    uuid = finished["checkpoints"][0]["uuid"]
    r = api("POST", "/models", json={"name": "digits cnn", "description": "mnist",
                                     "labels": ["vision"], "metadata": {"task": "mnist"}})
    assert r.status_code == 201, r.text
    model = r.json()["model"]
    assert {k: model[k] for k in ("name", "description", "labels", "metadata", "owner",
                                  "archived", "num_versions")} == {
        "name": "digits cnn", "description": "mnist", "labels": ["vision"],
        "metadata": {"task": "mnist"}, "owner": "admin", "archived": False, "num_versions": 0}
    assert model["creation_time"].endswith("Z")
    assert error(api("POST", "/models", json={"name": "digits cnn"}), 409) == (
        "a model named 'digits cnn' already exists")
    r = api("POST", "/models", json={"name": "x/y", "labels": [1]})
    assert error(r, 400) == "invalid request body"
    assert [d["path"] for d in r.json()["details"]] == ["labels", "name"]

    path = "/models/" + quote("digits cnn")
    assert error(api("GET", "/models/nope"), 404) == "model 'nope' not found"
    assert master.get(path)["model"]["id"] == model["id"]
    listing = master.get("/models?label=vision")
    assert [m["name"] for m in listing["models"]] == ["digits cnn"]
    assert listing["pagination"] == {"offset": 0, "limit": 100, "total": 1}

    r = api("POST", f"{path}/versions", json={"checkpoint_uuid": uuid, "comment": "first"})
    assert r.status_code == 201, r.text
    version = r.json()["model_version"]
    assert (version["version"], version["model_name"], version["comment"]) == (
        1, "digits cnn", "first")
    # The version's checkpoint as GET /checkpoints/{uuid} answers it: with what it was
    # trained from.
    assert version["checkpoint"] == master.get(f"/checkpoints/{uuid}")["checkpoint"]
    assert {k: v for k, v in version["checkpoint"].items() if k != "training"} == (
        finished["checkpoints"][0])
    assert version["checkpoint"]["training"]["validation_metrics"] == {
        "validation_loss": pytest.approx(1 / 7)}
    assert api("POST", f"{path}/versions", json={"checkpoint_uuid": uuid}).json()[
        "model_version"]["version"] == 2
    assert [v["version"] for v in master.get(f"{path}/versions")["model_versions"]] == [2, 1]
    assert master.get(f"{path}/versions/1")["model_version"]["comment"] == "first"
    assert error(api("GET", f"{path}/versions/7"), 404) == "model 'digits cnn' has no version 7"
    r = api("PATCH", f"{path}/versions/2", json={"notes": "best", "add_metadata": {"a": 1}})
    assert r.status_code == 200 and r.json()["model_version"]["metadata"] == {"a": 1}
    missing = "00000000-0000-4000-8000-000000000000"
    assert error(api("POST", f"{path}/versions", json={"checkpoint_uuid": missing}),
                 404) == f"checkpoint {missing} not found"

    # Anyone reads; only the owner or an admin changes.
    assert master.api("GET", path, token=bob).status_code == 200
    for method, sub, body in (("PATCH", "", {"notes": "x"}), ("DELETE", "", None),
                              ("POST", "/archive", None), ("DELETE", "/versions/1", None),
                              ("POST", "/versions", {"checkpoint_uuid": uuid})):
        r = master.api(method, path + sub, token=bob, json=body)
        assert "only the owner of model 'digits cnn'" in error(r, 403), (method, sub)

    r = api("PATCH", path, json={"description": "digits", "remove_metadata": ["task"]})
    assert r.json()["model"]["description"] == "digits" and r.json()["model"]["metadata"] == {}
    assert api("POST", f"{path}/archive").json()["model"]["archived"] is True
    assert error(api("PATCH", path, json={"notes": "x"}), 409) == (
        "model 'digits cnn' is archived; unarchive it to change it")
    assert master.get("/models?archived=false")["models"] == []
    assert api("POST", f"{path}/unarchive").json()["model"]["archived"] is False

    assert api("DELETE", f"{path}/versions/2").json()["model_version"]["version"] == 2
    r = api("DELETE", path)
    assert r.status_code == 200 and r.json()["model"]["name"] == "digits cnn"
    assert error(api("GET", f"{path}/versions"), 404) == "model 'digits cnn' not found"


def test_another_users_checkpoint_is_not_registered(master: MasterProcess,
                                                    finished: dict[str, Any], bob: str) -> None:
    """Registering pins a checkpoint: bob may not pin the admin's, even in his own model."""
    uuid = finished["checkpoints"][-1]["uuid"]
    assert master.api("POST", "/models", token=bob, json={"name": "bobs"}).status_code == 201
    r = master.api("POST", "/models/bobs/versions", token=bob, json={"checkpoint_uuid": uuid})
    assert error(r, 403) == (
        f"checkpoint {uuid} is of experiment {finished['id']}, owned by admin: only its "
        "owner, a user with the manage scope or an admin can register it")
    assert master.get("/models/bobs/versions")["model_versions"] == []
    assert master.get("/models/bobs")["model"]["num_versions"] == 0
    assert master.api("DELETE", "/models/bobs", token=bob).status_code == 200


def test_checkpoint_delete_refuses_registered_ones_and_other_users(
        master: MasterProcess, finished: dict[str, Any], bob: str) -> None:
    api = master.api
    kept, doomed = finished["checkpoints"][1]["uuid"], finished["checkpoints"][2]["uuid"]
    assert api("POST", "/models", json={"name": "keeper"}).status_code == 201
    assert api("POST", "/models/keeper/versions",
               json={"checkpoint_uuid": kept}).status_code == 201

    assert error(api("DELETE", f"/checkpoints/{kept}"), 409) == (
        f"checkpoint {kept} is registered as model 'keeper' version 1; delete that version "
        "first")
    assert "only the owner of experiment" in error(
        api("DELETE", f"/checkpoints/{doomed}", token=bob), 403)
    missing = "00000000-0000-4000-8000-000000000000"
    assert error(api("DELETE", f"/checkpoints/{missing}"), 404) == (
        f"checkpoint {missing} not found")
    files = master.data_dir / "checkpoints" / "admin"
    assert (files / doomed / "state.json").is_file()

    r = api("DELETE", f"/checkpoints/{doomed}")
    assert r.status_code == 200 and r.json()["checkpoint"]["state"] == "DELETED"
    assert not (files / doomed).exists() and (files / kept / "state.json").is_file()
    assert master.get(f"/checkpoints/{doomed}")["checkpoint"]["state"] == "DELETED"
    assert "is DELETED" in error(api("DELETE", f"/checkpoints/{doomed}"), 409)


def test_gc_on_demand_dry_run_then_for_real(master: MasterProcess, bob: str) -> None:
    eid = master.create_ok(checkpointing(master, 7, 2, save_trial_latest=10))
    assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    registered = ckpts[-1]["uuid"]  # at 2 batches
    assert master.api("POST", "/models", json={"name": "gc-kept"}).status_code == 201
    assert master.api("POST", "/models/gc-kept/versions",
                      json={"checkpoint_uuid": registered}).status_code == 201
    policy = {"save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 1}

    assert error(master.api("POST", f"/experiments/{eid}/gc", token=bob, json=policy),
                 403).startswith(f"only the owner of experiment {eid}")
    r = master.api("POST", f"/experiments/{eid}/gc", json={**policy, "save_trial_best": -1})
    assert error(r, 400) == "invalid checkpoint GC policy"
    assert r.json()["details"] == [{"path": "save_trial_best",
                                    "message": "must be an integer >= 0"}]

    r = master.api("POST", f"/experiments/{eid}/gc", json={**policy, "dry_run": True})
    assert r.status_code == 200, r.text
    dry = r.json()
    latest = master.trials(eid)[0]["latest_checkpoint"]
    expected = sorted(c["uuid"] for c in ckpts if c["uuid"] not in (registered, latest))
    assert dry["dry_run"] is True and dry["uuids"] == expected and len(expected) == 2
    assert dry["registered"] == [registered] and dry["policy"] == policy
    assert {c["state"] for c in master.get(f"/experiments/{eid}/checkpoints")[
        "checkpoints"]} == {"COMPLETED"}
    assert master.experiment(eid)["config"]["checkpoint_storage"]["save_trial_latest"] == 10

    done = master.api("POST", f"/experiments/{eid}/gc", json=policy).json()
    assert done["dry_run"] is False and done["uuids"] == expected
    states = {c["uuid"]: c["state"] for c in master.get(f"/experiments/{eid}/checkpoints")[
        "checkpoints"]}
    assert states == {**dict.fromkeys(expected, "DELETED"), registered: "COMPLETED",
                      latest: "COMPLETED"}
    on_disk = {p.name for p in (master.data_dir / "checkpoints" / "admin").iterdir()}
    assert registered in on_disk and latest in on_disk and not set(expected) & on_disk
    stored = master.experiment(eid)["config"]["checkpoint_storage"]
    assert {k: stored[k] for k in policy} == policy


def test_a_running_trial_keeps_its_latest_and_trial_end_gc_keeps_registered_ones(
        master: MasterProcess) -> None:
    # The default policy: the trial's best and latest (at 195, after validating) are kept,
    # the rest deleted at its end.
    eid = master.create_ok(checkpointing(master, 195, 10, sleep=0.05))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    first = master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"][
        "latest_checkpoint"], timeout=60)
    assert master.api("POST", "/models", json={"name": "mid-run"}).status_code == 201
    assert master.api("POST", "/models/mid-run/versions",
                      json={"checkpoint_uuid": first}).status_code == 201
    # A newer one, not registered: the latest of a running trial cannot be deleted.
    latest = master.wait(lambda: (u := master.get(f"/trials/{trial_id}")["trial"][
        "latest_checkpoint"]) != first and u, timeout=60)
    r = master.api("DELETE", f"/checkpoints/{latest}")
    message = error(r, 409)
    assert message.startswith(f"checkpoint {latest} is the latest of trial {trial_id}")
    if master.experiment(eid)["state"] not in ("COMPLETED", "STOPPING_COMPLETED"):
        assert re.search("which is (QUEUED|STARTING|RUNNING|STOPPING_COMPLETED) and would "
                         "resume from it", message), message

    assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
    ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    final = master.trials(eid)[0]["latest_checkpoint"]
    kept = {c["uuid"] for c in ckpts if c["state"] == "COMPLETED"}
    assert kept == {first, final}
    assert len(ckpts) > 3 and (master.data_dir / "checkpoints" / "admin" / first).is_dir()


def test_the_openapi_document_lists_the_new_endpoints(master: MasterProcess) -> None:
    document = master.get("/openapi.json")
    paths = document["paths"]
    assert set(paths["/api/v1/models"]) == {"get", "post"}
    assert set(paths["/api/v1/models/{name}"]) == {"get", "patch", "delete"}
    assert set(paths["/api/v1/models/{name}/versions"]) == {"get", "post"}
    assert set(paths["/api/v1/models/{name}/versions/{version}"]) == {"get", "patch", "delete"}
    assert set(paths["/api/v1/models/{name}/archive"]) == {"post"}
    assert set(paths["/api/v1/checkpoints/{uuid}"]) == {"get", "delete"}
    assert "409" in paths["/api/v1/checkpoints/{uuid}"]["delete"]["responses"]
    gc = paths["/api/v1/experiments/{experiment_id}/gc"]["post"]
    assert "dry_run" in dereference(
        document, gc["requestBody"]["content"]["application/json"]["schema"])["properties"]

