"""The SDK's model registry, checkpoint deletion and GC, and ``det_hub.load_model``, against a
real master whose trials wrote real checkpoints (a Core API script and a PyTorchTrial)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import det_hub
from det_hub.client import (
    Checkpoint,
    CheckpointGCResult,
    Client,
    DetHubError,
    MasterError,
    Model,
    ModelVersion,
)
from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

TRIAL_DEFS = Path(__file__).parents[1] / "pytorch" / "pytorch_trial_defs.py"


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture
def client(master: MasterProcess) -> Iterator[Client]:
    with Client(master.url, master.token) as c:
        yield c


@pytest.fixture
def kept_steps_experiment(master: MasterProcess,
                          kept_checkpoints: Callable[..., int]) -> Callable[[], int]:
    """Runs a completed Core API experiment that kept its checkpoints at 2, 4, 6 and 7
    batches; answers its id."""
    return lambda: kept_checkpoints(master, "sdk")


def test_models_versions_and_their_checkpoints(kept_steps_experiment: Callable[[], int], master: MasterProcess, client: Client,
                                               tmp_path: Path) -> None:
    eid = kept_steps_experiment()
    ckpts = {c.steps_completed: c for c in client.list_checkpoints(eid)}
    assert sorted(ckpts) == [2, 4, 6, 7]

    model = client.create_model("sdk-model", description="steps", labels=["core"],
                                metadata={"team": "a"})
    assert isinstance(model, Model) and model.owner == "admin" and model.num_versions == 0
    with pytest.raises(MasterError) as taken:
        client.create_model("sdk-model")
    assert taken.value.status == 409 and "already exists" in taken.value.message

    model.set_description("counting steps")
    model.set_labels(["core", "demo"])
    model.add_metadata({"stage": "dev"})
    model.remove_metadata(["team"])
    again = client.get_model("sdk-model")
    assert (again.description, again.labels, again.metadata) == (
        "counting steps", ["core", "demo"], {"stage": "dev"})
    assert model.last_updated_time == again.last_updated_time
    assert [m.name for m in client.list_models(label="demo")] == ["sdk-model"]

    v1 = model.register_version(ckpts[2], name="early", comment="2 batches")
    v2 = model.register_version(ckpts[7].uuid, labels=["best"], metadata={"loss": 1 / 7})
    assert isinstance(v1, ModelVersion) and (v1.version, v2.version) == (1, 2)
    assert model.num_versions == 2 and client.get_model("sdk-model").num_versions == 2
    latest = model.get_version()
    assert latest.version == 2 and latest.checkpoint == ckpts[7]
    assert model.get_version(1).name == "early"
    # A version says what its checkpoint was trained from, so it can be reproduced.
    training = latest.checkpoint.training
    assert training is not None
    assert training["experiment_config"]["name"] == "sdk"
    assert training["hparams"]["checkpoint_every"] == 2 and training["trial_seed"] is not None
    assert training["searcher_metric"] == "validation_loss"
    assert training["validation_metrics"] == {"validation_loss": pytest.approx(1 / 7)}
    assert training["model_definition"] == f"/api/v1/experiments/{eid}/context"
    assert client.get_checkpoint(ckpts[7].uuid).training == training
    assert model.get_version(1).checkpoint.training["validation_metrics"] is None  # type: ignore[index]
    assert ckpts[7].training is None  # lists leave it out
    assert [v.version for v in model.list_versions()] == [2, 1]
    latest.set_notes("the one to use")
    latest.add_metadata({"acc": 0.9})
    assert model.get_version(2).metadata == {"loss": pytest.approx(1 / 7), "acc": 0.9}
    with pytest.raises(MasterError) as missing:
        model.get_version(5)
    assert missing.value.status == 404 and missing.value.message == (
        "model 'sdk-model' has no version 5")

    # A version's checkpoint is the SDK's Checkpoint: it downloads, and deletes when free.
    target = latest.checkpoint.download(tmp_path / "v2")
    assert target == tmp_path / "v2"
    assert json.loads((target / "state.json").read_text()) == {"step": 7}
    with pytest.raises(MasterError) as registered:
        v1.checkpoint.delete()
    assert registered.value.status == 409 and registered.value.message == (
        f"checkpoint {ckpts[2].uuid} is registered as model 'sdk-model' version 1; delete "
        "that version first")
    v1.delete()
    deleted = v1.checkpoint.delete()
    assert isinstance(deleted, Checkpoint) and deleted.state == "DELETED"
    assert not (master.data_dir / "checkpoints" / "admin" / ckpts[2].uuid).exists()

    model.archive()
    assert model.archived and client.list_models(archived=False, name="sdk-") == []
    with pytest.raises(MasterError) as archived:
        model.register_version(ckpts[4])
    assert archived.value.status == 409
    model.unarchive()
    model.rename("sdk-model-2")
    assert client.get_model("sdk-model-2").num_versions == 1
    model.delete()
    with pytest.raises(MasterError) as gone:
        client.get_model("sdk-model-2")
    assert gone.value.status == 404 and gone.value.message == "model 'sdk-model-2' not found"
    # Its checkpoint is kept.
    assert client.get_checkpoint(ckpts[7].uuid).state == "COMPLETED"


def test_checkpoint_gc_dry_run_and_for_real(kept_steps_experiment: Callable[[], int], master: MasterProcess, client: Client) -> None:
    eid = kept_steps_experiment()
    ckpts = {c.steps_completed: c.uuid for c in client.list_checkpoints(eid)}
    client.create_model("gc-sdk").register_version(ckpts[4])
    dry = client.checkpoint_gc(eid, save_trial_best=0, save_trial_latest=1, dry_run=True)
    assert isinstance(dry, CheckpointGCResult) and dry.dry_run
    assert dry.uuids == sorted([ckpts[2], ckpts[6]]) and dry.registered == [ckpts[4]]
    assert sorted(c.steps_completed for c in dry.checkpoints) == [2, 6]
    assert dry.policy == {"save_experiment_best": 0, "save_trial_best": 0,
                          "save_trial_latest": 1}
    done = client.checkpoint_gc(eid, save_trial_best=0, save_trial_latest=1)
    assert not done.dry_run and done.uuids == dry.uuids
    states = {c.steps_completed: c.state for c in client.list_checkpoints(eid)}
    assert states == {2: "DELETED", 4: "COMPLETED", 6: "DELETED", 7: "COMPLETED"}


def test_load_model_gives_a_core_api_checkpoints_directory(kept_steps_experiment: Callable[[], int],
        master: MasterProcess, client: Client) -> None:
    eid = kept_steps_experiment()
    [trial] = client.list_trials(eid)
    client.create_model("core-dir").register_version(trial.latest_checkpoint or "")
    directory = det_hub.load_model("core-dir", client=client)
    assert directory == master.data_dir / "checkpoints" / "admin" / trial.latest_checkpoint
    assert json.loads((directory / "state.json").read_text()) == {"step": 7}


def test_load_model_rebuilds_a_pytorch_trials_trained_model(
        master: MasterProcess, client: Client, tmp_path: Path) -> None:
    import torch

    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(TRIAL_DEFS, context / TRIAL_DEFS.name)
    eid = master.create_ok({
        "name": "regression", "entrypoint": "pytorch_trial_defs:RegressionTrial",
        "hyperparameters": {"hidden": 16, "lr": 0.05, "global_batch_size": 8},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 16}},
        "max_restarts": 0}, context=context)
    exp: dict[str, Any] = master.wait_state(eid, timeout=180)
    [trial] = client.list_trials(eid)
    assert exp["state"] == "COMPLETED", master.logs(trial.id)[-20:]
    uuid = trial.latest_checkpoint
    assert uuid is not None
    model = client.create_model("regression")
    model.register_version(uuid)

    loaded = det_hub.load_model("regression", client=client)
    assert isinstance(loaded, torch.nn.Sequential) and not loaded.training
    saved = torch.load(master.data_dir / "checkpoints" / "admin" / uuid / "state_dict.pth",
                       weights_only=False)["models_state_dict"][0]
    state = loaded.state_dict()
    assert state.keys() == saved.keys() and all(torch.equal(state[k], saved[k]) for k in saved)
    by_number = det_hub.load_model("regression", 1, client=client, path=tmp_path / "copy")
    assert torch.equal(by_number.state_dict()["0.weight"], saved["0.weight"])
    assert (tmp_path / "copy" / "state_dict.pth").is_file()

    with pytest.raises(MasterError) as missing:
        det_hub.load_model("regression", "2", client=client)
    assert missing.value.status == 404
    with pytest.raises(MasterError, match="model 'nope' not found"):
        det_hub.load_model("nope", client=client)
    with pytest.raises(ValueError, match="neither a version number nor 'latest'"):
        det_hub.load_model("regression", "newest", client=client)
    client.create_model("empty")
    with pytest.raises(MasterError, match="model 'empty' has no versions"):
        det_hub.load_model("empty", client=client)


def test_objects_not_read_through_a_client_say_so() -> None:
    checkpoint = Checkpoint.from_json({"uuid": "u", "state": "COMPLETED"})
    with pytest.raises(DetHubError, match="not read through a Client"):
        checkpoint.delete()
    model = Model.from_json({"id": 1, "name": "m"})
    with pytest.raises(DetHubError, match="model 'm' was not read through a Client"):
        model.archive()
    version = ModelVersion.from_json({"id": 1, "model_name": "m", "version": 3,
                                      "checkpoint_uuid": "u"})
    assert version.checkpoint_uuid == "u"
    with pytest.raises(DetHubError, match="version 3 was not read through a Client"):
        version.delete()
