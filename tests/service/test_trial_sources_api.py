"""``core_context.experimental`` end to end: trials of a real master link themselves to the
checkpoint or model version they use, and the metrics they report are read back from it
through the REST API and the SDK; who may link, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from det_hub.client import Client, MasterError
from det_hub.service.openapi import dereference
from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

#: A batch-inference script: it reads the checkpoint (or model version) named by its
#: hyperparameters through the SDK, links itself to it, and reports an accuracy.
INFER = '''\
import det_hub.core as core
from det_hub.client import Client

info = core.get_cluster_info()
hp = info.trial.hparams
with core.init() as ctx:
    client = Client()  # DET_HUB_MASTER, and DET_HUB_TOKEN from the experiment's environment
    if "model" in hp:
        used = client.get_model(hp["model"]).get_version(hp["version"])
        ctx.experimental.report_task_using_model_version(used)
    else:
        used = client.get_checkpoint(hp["checkpoint"])
        ctx.experimental.report_task_using_checkpoint(used)
        ctx.experimental.report_task_using_checkpoint(used.uuid)  # once is stored
    for op in ctx.searcher.operations():
        ctx.train.report_validation_metrics(op.length, {"accuracy": hp["accuracy"]})
        op.report_completed(hp["accuracy"])
print("linked", flush=True)
'''

ROW_KEYS = {"id", "trial_id", "group", "steps_completed", "report_time", "metrics"}


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture(scope="module")
def bob(master: MasterProcess) -> str:
    """The token of a user who is not an admin."""
    r = master.api("POST", "/users", json={"username": "bob"})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


@pytest.fixture(scope="module")
def source(master: MasterProcess) -> dict[int, str]:
    """The admin's completed experiment's checkpoints, uuid by steps completed (2, 4, 6, 7)."""
    eid = master.create_ok({
        "name": "source", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 1, "checkpoint_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 7}},
        "checkpoint_storage": {"type": "shared_fs",
                               "host_path": str(master.data_dir / "checkpoints" / "admin"),
                               "save_trial_latest": 10},
        "max_restarts": 0})
    assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    found = {int(c["steps_completed"]): str(c["uuid"]) for c in ckpts}
    assert sorted(found) == [2, 4, 6, 7]
    return found


@pytest.fixture(scope="module")
def infer_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = tmp_path_factory.mktemp("infer")
    (context / "infer.py").write_text(INFER)
    return context


def run_inference(master: MasterProcess, context: Path, token: str, accuracy: float,
                  **used: Any) -> int:
    """Run the inference script to completion with these hyperparameters; its trial's id."""
    eid = master.create_ok({
        "name": "inference", "entrypoint": "python3 infer.py", "max_restarts": 0,
        "hyperparameters": {"accuracy": accuracy, **used},
        "searcher": {"name": "single", "metric": "accuracy", "smaller_is_better": False,
                     "max_length": {"batches": 3}},
        "environment": {"environment_variables": [f"DET_HUB_TOKEN={token}"]},
    }, context=context)
    [trial] = master.trials(eid)
    state = master.wait_state(eid, timeout=90)["state"]
    assert state == "COMPLETED", master.logs(trial["id"])
    assert "linked" in master.logs(trial["id"])
    return int(trial["id"])


def error(r: Any, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "details"}
    return str(body["error"])


def test_a_trial_that_used_a_checkpoint_is_found_by_its_metrics(
        master: MasterProcess, source: dict[int, str], bob: str, infer_context: Path) -> None:
    uuid = source[7]
    trial_id = run_inference(master, infer_context, bob, 0.75, checkpoint=uuid)

    with Client(master.url, master.token) as client:
        reports = client.get_checkpoint(uuid).get_metrics()
        # Only the trial that used it: not the one that wrote it, though it validated there.
        assert [(r.trial_id, r.group, r.steps_completed, r.metrics) for r in reports] == [
            (trial_id, "validation", 3, {"accuracy": 0.75})]
        assert client.get_checkpoint(uuid).get_metrics(group="training") == []
        assert [r.trial_id for r in client.checkpoint_metrics(uuid, "validation")] == [trial_id]

    rows = master.get(f"/checkpoints/{uuid}/metrics")["metrics"]
    assert [set(r) for r in rows] == [ROW_KEYS]
    # The rows as the trial's own metrics list them.
    assert rows == master.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
    assert master.get(f"/checkpoints/{uuid.upper()}/metrics?group=validation")["metrics"] == rows
    # Anyone who may read the checkpoint reads them.
    r = master.api("GET", f"/checkpoints/{uuid}/metrics", token=bob)
    assert r.status_code == 200 and r.json()["metrics"] == rows

    # The script reported the link twice; reporting it again still changes nothing.
    first = master.api("POST", f"/trials/{trial_id}/source_info",
                       json={"checkpoint_uuid": uuid})
    assert first.status_code == 200, first.text
    again = master.api("POST", f"/trials/{trial_id}/source_info",
                       json={"checkpoint_uuid": uuid.upper()})
    assert again.json() == first.json()
    assert first.json()["trial_source_info"]["created_at"].endswith("Z")
    assert master.get(f"/checkpoints/{uuid}/metrics")["metrics"] == rows


def test_a_trial_that_used_a_model_version_is_found_by_its_metrics(
        master: MasterProcess, source: dict[int, str], bob: str, infer_context: Path) -> None:
    uuid = source[6]
    with Client(master.url, master.token) as client:
        model = client.create_model("inference cnn")
        v1 = model.register_version(uuid)
        v2 = model.register_version(uuid)
        trial_id = run_inference(master, infer_context, bob, 0.5, model="inference cnn",
                                 version=1)

        expected = [(trial_id, "validation", 3, {"accuracy": 0.5})]
        got = client.get_model("inference cnn").get_version(1)
        assert [(r.trial_id, r.group, r.steps_completed, r.metrics)
                for r in got.get_metrics()] == expected
        assert got.get_metrics(group="training") == []
        # The other version of the same checkpoint was not used.
        assert v2.get_metrics() == []
        # The version's checkpoint lists them too.
        assert [r.trial_id for r in got.checkpoint.get_metrics()] == [trial_id]

        path = f"/models/{quote('inference cnn')}/versions"
        rows = master.get(f"{path}/1/metrics")["metrics"]
        assert [set(r) for r in rows] == [ROW_KEYS]
        assert rows == master.get(f"/trials/{trial_id}/metrics?group=validation")["metrics"]
        assert master.api("GET", f"{path}/1/metrics", token=bob).json()["metrics"] == rows

        # A deleted version's link goes with it; its checkpoint's stays.
        v1.delete()
        with pytest.raises(MasterError) as caught:
            client.model_version_metrics("inference cnn", 1)
        assert caught.value.status == 404
        assert [r.trial_id for r in client.checkpoint_metrics(uuid)] == [trial_id]


def printed_token(master: MasterProcess, eid: int) -> dict[str, Any]:
    """What a trial of the steps script with ``print_token`` printed: its allocation token
    and trial id."""
    def found() -> str | None:
        trials = master.trials(eid)
        lines = master.logs(trials[0]["id"]) if trials else []
        return next((line for line in lines if line.startswith("allocation token ")), None)
    return dict(json.loads(master.wait(found).removeprefix("allocation token ")))


def test_who_may_link_and_what_is_refused(master: MasterProcess, source: dict[int, str],
                                          bob: str) -> None:
    used, registered = source[4], source[2]
    other = master.get(f"/checkpoints/{used}")["checkpoint"]["trial_id"]
    live = master.create_ok({
        "name": "live", "entrypoint": "python3 train.py", "max_restarts": 0,
        "hyperparameters": {"sleep": 0.05, "print_token": True},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 100_000}}})
    try:
        printed = printed_token(master, live)
        token, own = printed["token"], int(printed["trial_id"])
        link = {"checkpoint_uuid": used}

        # The trial's own training code links it; not another trial.
        r = master.api("POST", f"/trials/{own}/source_info", token=token, json=link)
        assert r.status_code == 200, r.text
        info = r.json()["trial_source_info"]
        assert {k: v for k, v in info.items() if k != "created_at"} == {
            "trial_id": own, "checkpoint_uuid": used, "model_name": None,
            "model_version": None}
        assert error(master.api("POST", f"/trials/{other}/source_info", token=token,
                                json=link), 403) == (
            f"this allocation's token is not valid for trial {other}")
        # Another user may not link the admin's trial; its owner (an admin here) may.
        assert error(master.api("POST", f"/trials/{own}/source_info", token=bob, json=link),
                     403) == (f"only trial {own}'s training code, its owner or an admin can "
                              "report what it used")
        r = master.api("POST", f"/trials/{other}/source_info", json=link)
        assert r.status_code == 200, r.text
        # Training code does not read the metrics of what trials used.
        assert error(master.api("GET", f"/checkpoints/{used}/metrics", token=token), 403) == (
            "this endpoint is not open to training code's allocation tokens")

        # Through a model version: it must be the checkpoint given.
        with Client(master.url, master.token) as client:
            client.create_model("perm").register_version(registered)
        r = master.api("POST", f"/trials/{own}/source_info", token=token, json={
            "checkpoint_uuid": registered, "model_name": "perm", "model_version": 1})
        assert r.status_code == 200, r.text
        assert (r.json()["trial_source_info"]["model_name"],
                r.json()["trial_source_info"]["model_version"]) == ("perm", 1)
        assert error(master.api("POST", f"/trials/{own}/source_info", token=token, json={
            "checkpoint_uuid": used, "model_name": "perm", "model_version": 1}), 409) == (
            f"model 'perm' version 1 is checkpoint {registered}, not {used}")

        missing = "00000000-0000-4000-8000-000000000000"
        for trial, body, message in [
            (own, {"checkpoint_uuid": missing}, f"checkpoint {missing} not found"),
            (own, {"checkpoint_uuid": used, "model_name": "nope", "model_version": 1},
             "model 'nope' not found"),
            (own, {"checkpoint_uuid": registered, "model_name": "perm", "model_version": 9},
             "model 'perm' has no version 9"),
            (999_999, link, "trial 999999 not found"),
        ]:
            assert error(master.api("POST", f"/trials/{trial}/source_info", json=body),
                         404) == message, body
        assert error(master.api("GET", f"/checkpoints/{missing}/metrics"), 404) == (
            f"checkpoint {missing} not found")
        assert error(master.api("GET", "/models/nope/versions/1/metrics"), 404) == (
            "model 'nope' not found")
        assert error(master.api("GET", "/models/perm/versions/2/metrics"), 404) == (
            "model 'perm' has no version 2")

        for body, message in [
            ({}, "checkpoint_uuid: must be the UUID string of a checkpoint"),
            ({"checkpoint_uuid": "latest"},
             "checkpoint_uuid: must be the UUID string of a checkpoint"),
            ({"checkpoint_uuid": used, "model_name": "perm"},
             "model_name and model_version: give both to name a model version, or neither "
             "to name only a checkpoint"),
            ({"checkpoint_uuid": used, "model_name": "perm", "model_version": "1"},
             "model_version: must be a version number >= 1"),
            ({"checkpoint_uuid": used, "model_name": "", "model_version": 1},
             "model_name: must be the name of a model"),
            ({"checkpoint_uuid": used, "trial_id": own},
             "trial_id: unknown field; the fields are checkpoint_uuid, model_name, "
             "model_version"),
        ]:
            assert error(master.api("POST", f"/trials/{own}/source_info", token=token,
                                    json=body), 400) == message, body
        assert error(master.api("POST", f"/trials/{own}/source_info", token=token,
                                data="[1]"), 400) == "the request body must be a JSON object"

        # Both trials' metrics are found from the checkpoint, once each.
        def both() -> list[int] | None:
            ids = sorted({r["trial_id"] for r in
                          master.get(f"/checkpoints/{used}/metrics")["metrics"]})
            return ids if own in ids else None
        assert master.wait(both) == sorted([own, other])
    finally:
        master.api("POST", f"/experiments/{live}/kill")
    master.wait_state(live)


def test_the_openapi_document_lists_the_endpoints(master: MasterProcess) -> None:
    document = master.get("/openapi.json")
    paths = document["paths"]
    post = paths["/api/v1/trials/{trial_id}/source_info"]["post"]
    schema = dereference(document, post["requestBody"]["content"]["application/json"]["schema"])
    assert set(schema["properties"]) == {"checkpoint_uuid", "model_name", "model_version"}
    assert "409" in post["responses"]
    assert set(paths["/api/v1/checkpoints/{uuid}/metrics"]) == {"get"}
    assert set(paths["/api/v1/models/{name}/versions/{version}/metrics"]) == {"get"}
