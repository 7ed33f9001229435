"""load_trial_from_checkpoint_path and CheckpointLoadContext: a trained trial rebuilt from its
checkpoint directory alone, with the load_data.json the Trainer writes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_trial_defs import FEATURES, RegressionTrial, regression_data

from det_hub import pytorch

REPO = Path(__file__).resolve().parents[2]
HPARAMS = {"global_batch_size": 8, "hidden": 12, "lr": 0.05, "dropout": 0.3}
EXP_CONF = {"reproducibility": {"experiment_seed": 5}, "data": {"source": "synthetic"}}


class TaggedTrial(RegressionTrial):
    """Records the context it was built with and takes an extra keyword argument."""

    def __init__(self, context: pytorch.PyTorchTrialContext, tag: str = "none") -> None:
        super().__init__(context)
        self.tag = tag
        self.built_with = type(context)


def _train(
    storage: Path, trial_class: type[RegressionTrial] = RegressionTrial, batches: int = 12
) -> tuple[RegressionTrial, str]:
    with pytorch.init(hparams=HPARAMS, exp_conf=EXP_CONF, checkpoint_storage=storage) as context:
        trial = trial_class(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(max_length=pytorch.Batch(batches))
        assert trainer.last_checkpoint is not None
        return trial, trainer.last_checkpoint


def _predictions(trial: RegressionTrial) -> torch.Tensor:
    trial.model.eval()
    with torch.no_grad():
        return trial.model(regression_data(16, 9).tensors[0].to(trial.context.device))


def _assert_same_state(trained: RegressionTrial, loaded: RegressionTrial) -> None:
    ours, theirs = trained.model.state_dict(), loaded.model.state_dict()
    assert list(ours) == list(theirs)
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
    trained_opt = trained.opt.state_dict()["state"]
    loaded_opt = loaded.opt.state_dict()["state"]
    assert trained_opt.keys() == loaded_opt.keys() and trained_opt
    for key in trained_opt:
        assert torch.equal(
            trained_opt[key]["momentum_buffer"], loaded_opt[key]["momentum_buffer"]
        )
    assert loaded.sched.get_last_lr() == trained.sched.get_last_lr()
    assert torch.equal(_predictions(trained), _predictions(loaded))


def test_the_trainers_checkpoint_records_how_to_rebuild_the_trial(tmp_path: Path) -> None:
    _, uuid = _train(tmp_path)
    load_data = json.loads((tmp_path / uuid / pytorch.LOAD_DATA_FILE).read_text())
    assert load_data == {
        "trial_type": "PyTorchTrial",
        "trial_cls_spec": "pytorch_trial_defs:RegressionTrial",
        "trial_in_main": False,
        "is_trainer": True,
        "hparams": HPARAMS,
        "experiment_config": EXP_CONF,
    }


def test_load_without_trial_class_imports_the_recorded_one(tmp_path: Path) -> None:
    trained, uuid = _train(tmp_path)
    # The untrained trial of the same seed: loading must change the weights, not rebuild them.
    with pytorch.init(hparams=HPARAMS, exp_conf=EXP_CONF,
                      checkpoint_storage=tmp_path / "fresh") as context:
        fresh = RegressionTrial(context)
    assert not torch.equal(_predictions(fresh), _predictions(trained))

    rng_before = torch.get_rng_state()
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's randomness is kept
    assert type(loaded) is RegressionTrial
    assert isinstance(loaded.context, pytorch.CheckpointLoadContext)
    assert loaded.context.get_hparams() == HPARAMS
    assert loaded.context.get_experiment_config() == EXP_CONF
    assert loaded.context.get_data_config() == {"source": "synthetic"}
    assert loaded.context.get_trial_seed() == 5
    assert isinstance(loaded, RegressionTrial)
    _assert_same_state(trained, loaded)


def test_load_with_trial_class_and_kwargs_builds_with_a_checkpoint_load_context(
    tmp_path: Path,
) -> None:
    trained, uuid = _train(tmp_path, batches=9)
    loaded = pytorch.load_trial_from_checkpoint_path(
        str(tmp_path / uuid), trial_class=TaggedTrial, trial_kwargs={"tag": "inference"}
    )
    assert isinstance(loaded, TaggedTrial)
    assert loaded.tag == "inference"
    assert issubclass(loaded.built_with, pytorch.CheckpointLoadContext)
    _assert_same_state(trained, loaded)


def test_a_trial_trained_as_a_subclass_loads_as_itself(tmp_path: Path) -> None:
    trained, uuid = _train(tmp_path, trial_class=TaggedTrial)
    spec = json.loads((tmp_path / uuid / pytorch.LOAD_DATA_FILE).read_text())["trial_cls_spec"]
    assert spec == "test_load_trial:TaggedTrial"
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)
    assert type(loaded) is TaggedTrial and loaded.tag == "none"
    _assert_same_state(trained, loaded)


def test_torch_load_kwargs_reach_torch_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, uuid = _train(tmp_path, batches=3)
    seen: list[dict[str, Any]] = []
    real_load = torch.load

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)
    assert seen[-1] == {"map_location": "cpu", "weights_only": False}
    location = {"cpu": "cpu"}
    pytorch.load_trial_from_checkpoint_path(
        tmp_path / uuid, torch_load_kwargs={"map_location": location}
    )
    assert seen[-1]["map_location"] is location
    with pytest.warns(FutureWarning, match="torch_load_kwargs"):
        pytorch.load_trial_from_checkpoint_path(tmp_path / uuid, mmap=False)
    assert seen[-1]["mmap"] is False
    with pytest.raises(ValueError, match="not both"):
        pytorch.load_trial_from_checkpoint_path(
            tmp_path / uuid, torch_load_kwargs={"mmap": False}, map_location="cpu"
        )


_MODEL_DEF = textwrap.dedent(
    """
    import torch
    from det_hub import pytorch


    class LinearTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            super().__init__(context)
            self.model = context.wrap_model(torch.nn.Linear(int(context.get_hparam("width")), 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self):
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(16, int(self.context.get_hparam("width")), generator=gen)
            return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))

        def build_training_data_loader(self):
            return pytorch.DataLoader(self._data(), batch_size=4)

        def build_validation_data_loader(self):
            return pytorch.DataLoader(self._data(), batch_size=4)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}
    """
)


@pytest.fixture
def model_def(tmp_path: Path) -> Any:
    """A module ``my_model_def`` in ``tmp_path / "context"``, imported for training, then taken
    out of ``sys.modules`` and ``sys.path`` again."""
    context_dir = tmp_path / "context"
    context_dir.mkdir()
    (context_dir / "my_model_def.py").write_text(_MODEL_DEF)
    sys.path.insert(0, str(context_dir))
    try:
        import my_model_def  # type: ignore[import-not-found]

        yield my_model_def, context_dir
    finally:
        if str(context_dir) in sys.path:
            sys.path.remove(str(context_dir))
        sys.modules.pop("my_model_def", None)


def _train_linear(module: Any, storage: Path) -> tuple[Any, str]:
    with pytorch.init(hparams={"global_batch_size": 4, "width": 3},
                      checkpoint_storage=storage) as context:
        trial = module.LinearTrial(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(max_length=pytorch.Batch(4))
        assert trainer.last_checkpoint is not None
        return trial, trainer.last_checkpoint


def test_the_recorded_class_is_imported_from_the_working_directory(
    tmp_path: Path, model_def: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, context_dir = model_def
    trained, uuid = _train_linear(module, tmp_path / "ckpts")
    sys.path.remove(str(context_dir))
    sys.modules.pop("my_model_def")
    path_before = list(sys.path)

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="'my_model_def:LinearTrial'") as err:
        pytorch.load_trial_from_checkpoint_path(tmp_path / "ckpts" / uuid)
    assert "trial_class=" in str(err.value)
    assert sys.path == path_before

    monkeypatch.chdir(context_dir)
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / "ckpts" / uuid)
    assert type(loaded).__module__ == "my_model_def" and type(loaded).__name__ == "LinearTrial"
    assert sys.path == path_before
    for key, value in trained.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value)


def test_a_recorded_name_that_is_not_a_trial_class_is_refused(tmp_path: Path) -> None:
    _, uuid = _train(tmp_path, batches=2)
    file = tmp_path / uuid / pytorch.LOAD_DATA_FILE
    data = json.loads(file.read_text())
    for spec, why in [("pytorch_trial_defs:NoSuchTrial", "has no"),
                      ("pytorch_trial_defs:regression_data", "not a det_hub.pytorch.PyTorchTrial"),
                      ("no_such_module_here:Trial", "cannot import module")]:
        file.write_text(json.dumps({**data, "trial_cls_spec": spec}))
        with pytest.raises(ValueError, match=why) as err:
            pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)
        assert repr(spec) in str(err.value) and "trial_class=" in str(err.value)
    # The class given explicitly wins over a recorded name that does not import.
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / uuid, trial_class=RegressionTrial)
    assert type(loaded) is RegressionTrial


def test_a_class_without_an_importable_name_needs_trial_class(tmp_path: Path) -> None:
    class LocalTrial(RegressionTrial):
        pass

    trained, uuid = _train(tmp_path, trial_class=LocalTrial, batches=3)
    data = json.loads((tmp_path / uuid / pytorch.LOAD_DATA_FILE).read_text())
    assert data["trial_cls_spec"] is None
    with pytest.raises(ValueError, match="no importable trial class.*trial_class="):
        pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / uuid, trial_class=LocalTrial)
    _assert_same_state(trained, loaded)


def test_a_checkpoint_without_load_data(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trained, uuid = _train(tmp_path, batches=4)
    directory = tmp_path / uuid
    (directory / pytorch.LOAD_DATA_FILE).unlink()
    with pytest.raises(ValueError, match="no load_data.json") as err:
        pytorch.load_trial_from_checkpoint_path(directory)
    assert "trial_class=" in str(err.value) and "hyperparameters" in str(err.value)
    # Given the class, it is built with no hyperparameters, which this one needs.
    with caplog.at_level(logging.WARNING, logger="det_hub.pytorch"), \
            pytest.raises(ValueError, match="hyperparameter 'hidden' not found"):
        pytorch.load_trial_from_checkpoint_path(directory, trial_class=RegressionTrial)
    assert any("records no hyperparameters" in r.getMessage() for r in caplog.records)

    # Hyperparameters and config known elsewhere (the master keeps every trial's, and the
    # notebook's load_checkpoint passes them) build it as trained.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="det_hub.pytorch"):
        loaded = pytorch.load_trial_from_checkpoint_path(
            directory, RegressionTrial, hparams=HPARAMS, exp_conf=EXP_CONF)
    assert not any("records no hyperparameters" in r.getMessage() for r in caplog.records)
    assert loaded.context.get_hparams() == HPARAMS and loaded.context.get_trial_seed() == 5
    _assert_same_state(trained, loaded)

    # Determined's older layout: hparams and experiment_config in metadata.json, the class as
    # the config's entrypoint.
    metadata_file = directory / "metadata.json"
    metadata = json.loads(metadata_file.read_text())
    metadata.update(hparams=HPARAMS, experiment_config={
        **EXP_CONF, "entrypoint": "pytorch_trial_defs:RegressionTrial"})
    metadata_file.write_text(json.dumps(metadata))
    loaded = pytorch.load_trial_from_checkpoint_path(directory)
    assert type(loaded) is RegressionTrial
    _assert_same_state(trained, loaded)


def test_given_hyperparameters_win_over_recorded_ones(tmp_path: Path) -> None:
    _, uuid = _train(tmp_path, batches=2)
    wider = {**HPARAMS, "dropout": 0.0}
    loaded = pytorch.load_trial_from_checkpoint_path(tmp_path / uuid, hparams=wider, exp_conf={})
    assert loaded.context.get_hparams() == wider
    assert loaded.context.get_experiment_config() == {} and loaded.context.get_trial_seed() == 0


def test_missing_checkpoint_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pytorch.load_trial_from_checkpoint_path(tmp_path / "nothing")
    _, uuid = _train(tmp_path, batches=2)
    (tmp_path / uuid / pytorch.STATE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="state_dict.pth"):
        pytorch.load_trial_from_checkpoint_path(tmp_path / uuid)


def test_a_trial_wrapping_other_objects_is_refused(tmp_path: Path) -> None:
    _, uuid = _train(tmp_path, batches=2)

    class TwoModels(RegressionTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
            super().__init__(context)
            context.wrap_model(torch.nn.Linear(FEATURES, 1))

    with pytest.raises(ValueError, match="holds 1 models but the trial wrapped 2"):
        pytorch.load_trial_from_checkpoint_path(tmp_path / uuid, trial_class=TwoModels)


def test_checkpoint_load_context_stands_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inside a cluster too it asks no master: the cluster info is never read.
    monkeypatch.setenv("DET_HUB_CLUSTER_INFO", str(tmp_path / "missing.json"))
    context = pytorch.CheckpointLoadContext(hparams={"hidden": 4, "lr": 0.1})
    assert isinstance(context, pytorch.PyTorchTrialContext)
    assert context.get_hparams() == {"hidden": 4, "lr": 0.1}
    assert context.get_experiment_config() == {} and context.get_trial_seed() == 0
    assert context.distributed.size == 1 and context.core.info is None
    trial = RegressionTrial(context)
    assert next(trial.model.parameters()).device == context.device
    assert pytorch.CheckpointLoadContext().get_hparams() == {}


def test_a_trial_defined_in_the_training_script_loads_from_its_directory(tmp_path: Path) -> None:
    script = _MODEL_DEF + textwrap.dedent(
        """

        if __name__ == "__main__":
            with pytorch.init(hparams={"global_batch_size": 4, "width": 2},
                              checkpoint_storage="ckpts") as context:
                trial = LinearTrial(context)
                trainer = pytorch.Trainer(trial, context)
                trainer.fit(max_length=pytorch.Batch(3))
                torch.save(trial.model.state_dict(), "trained.pt")
                print(trainer.last_checkpoint)
        """
    )
    (tmp_path / "train.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    uuid = run.stdout.split()[-1]
    data = json.loads((tmp_path / "ckpts" / uuid / pytorch.LOAD_DATA_FILE).read_text())
    assert data["trial_cls_spec"] == "train:LinearTrial" and data["trial_in_main"] is True
    check = textwrap.dedent(
        f"""
        import torch
        from det_hub import pytorch
        trial = pytorch.load_trial_from_checkpoint_path("ckpts/{uuid}")
        trained = torch.load("trained.pt")
        print(type(trial).__module__, all(
            torch.equal(v, trial.model.state_dict()[k]) for k, v in trained.items()))
        """
    )
    load = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert load.returncode == 0, load.stderr
    assert load.stdout.split() == ["train", "True"]
    assert "top-level code" in load.stderr
