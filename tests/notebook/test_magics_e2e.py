"""``%det_experiment`` and ``%%det_experiment`` against a real master, in an IPython shell."""

from __future__ import annotations

import io
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell

from det_hub.client import Client, Experiment, MasterError
from det_hub.notebook import _follow
from det_hub.notebook._views import ExperimentList, ExperimentView
from det_hub.notebook.checkpoint import experiment_context
from det_hub.testing import MasterProcess

from .conftest import STEPS, run_magic

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_follow, "POLL_SECONDS", 0.2)


def write_config(tmp_path: Path, length: int = 10, **hparams: Any) -> Path:
    path = tmp_path / "steps.yaml"
    path.write_text(yaml.safe_dump({
        "name": "steps", "entrypoint": "python3 train.py", "hyperparameters": hparams,
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
        "max_restarts": 0}))
    return path


def test_create_follow_list_and_describe(
        shell: InteractiveShell, master_env: MasterProcess, tmp_path: Path) -> None:
    config = write_config(tmp_path, length=10, checkpoint_every=5)
    ran = run_magic(shell, f"create {config} {STEPS} --follow --config name=followed")
    assert ran.error is None and ran.stderr == ""
    exp = ran.value
    assert isinstance(exp, ExperimentView) and isinstance(exp, Experiment)
    assert exp.state == "COMPLETED" and exp.name == "followed"
    lines = ran.stdout.splitlines()
    assert lines[0] == f"Created experiment {exp.id}"
    # The log lines as they came, then the progress line of the ended experiment.
    assert sum("checkpoint " in line for line in lines) == 3
    assert any(line.endswith("] done") for line in lines)
    assert lines[-1].startswith(f"Experiment {exp.id} (followed): COMPLETED 100% | trial ")
    [trial] = exp.trials or []
    assert trial.state == "COMPLETED" and trial.steps_completed == 10

    listing = run_magic(shell, "list").value
    assert isinstance(listing, ExperimentList) and exp.id in [e.id for e in listing]
    html = listing._repr_html_()
    assert html.startswith("<table>") and "<td>followed" in html and "COMPLETED" in html
    text = listing.to_text()
    assert text.splitlines()[0].split()[:4] == ["ID", "Owner", "Name", "State"]
    assert any(row.split()[0] == str(exp.id) and "COMPLETED" in row for row in text.splitlines())

    described = run_magic(shell, f"describe {exp.id}").value
    assert isinstance(described, ExperimentView) and described.id == exp.id
    assert [t.id for t in described.trials or []] == [trial.id]
    html = described._repr_html_()
    assert f"<h4>Experiment {exp.id}: followed</h4>" in html and "<h5>Trials</h5>" in html
    assert "Best validation_loss: 0.1 (trial" in described.to_text()


def test_pause_activate_kill_watch_and_logs(
        shell: InteractiveShell, master_env: MasterProcess, tmp_path: Path) -> None:
    config = write_config(tmp_path, length=10000, sleep=0.05)
    exp = run_magic(shell, f"create {config} {STEPS}").value
    assert exp.state in ("QUEUED", "STARTING", "RUNNING") and exp.trials is None
    client = Client()
    master_env.wait(lambda: any(t.steps_completed > 0 for t in client.list_trials(exp.id)), 60)

    paused = run_magic(shell, f"pause {exp.id}")
    assert paused.error is None and paused.value.state == "PAUSED"
    [trial] = master_env.trials(exp.id)
    master_env.wait(lambda: master_env.trials(exp.id)[0]["run_state"] is None, 60)
    activated = run_magic(shell, f"activate {exp.id}").value
    assert activated.state in ("QUEUED", "STARTING", "RUNNING")
    master_env.wait(lambda: master_env.trials(exp.id)[0]["run_state"] == "RUNNING", 60)

    killed = run_magic(shell, f"kill {exp.id}").value
    assert killed.state in ("STOPPING_CANCELED", "CANCELED")
    watched = run_magic(shell, f"watch {exp.id}")
    assert watched.value.state == "CANCELED" and watched.stderr == ""
    assert watched.stdout.splitlines()[-1].startswith(f"Experiment {exp.id} (steps): CANCELED")

    logs = run_magic(shell, f"logs {trial['id']}")
    expected = master_env.logs(trial["id"])
    assert logs.value is None and len(logs.stdout.splitlines()) == len(expected) > 0
    assert all(line.endswith(message.rstrip("\n"))
               for line, message in zip(logs.stdout.splitlines(), expected, strict=True))
    followed = run_magic(shell, f"logs {trial['id']} -f")  # the trial has ended: returns
    assert followed.stdout == logs.stdout


def test_a_following_notebook_updates_one_display(
        shell: InteractiveShell, master_env: MasterProcess, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_follow, "in_notebook", lambda: True)
    from IPython.utils.capture import capture_output

    config = write_config(tmp_path, length=20, sleep=0.05)
    with capture_output() as captured:
        exp = shell.run_line_magic("det_experiment", f"create {config} {STEPS} -f")
    assert exp.state == "COMPLETED"
    assert captured.stdout == f"Created experiment {exp.id}\n"
    outputs = captured.outputs
    assert len(outputs) >= 2
    ids = {o.transient["display_id"] for o in outputs}
    assert len(ids) == 1 and not outputs[0].update and all(o.update for o in outputs[1:])
    last = outputs[-1].data
    assert last["text/plain"].startswith(f"Experiment {exp.id} (steps): COMPLETED 100%")
    assert last["text/plain"].splitlines()[-1].endswith("done")
    assert "<pre" in last["text/html"] and "COMPLETED" in last["text/html"]


CORE_CELL = '''
import det_hub.core as core
from helper import loss

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step in range(5, op.length + 1, 5):
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": loss(step)})
            op.report_progress(step)
        ctx.train.report_validation_metrics(steps_completed=op.length,
                                            metrics={"loss": loss(op.length)})
        with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, uuid):
            (path / "weights.txt").write_text(str(op.length))
        op.report_completed(loss(op.length))
print("cell trained", ctx.train is not None)
'''


@pytest.fixture(scope="module")
def core_cell_run(shell: InteractiveShell, master: MasterProcess,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The Core API cell, submitted with a context directory and followed to its end."""
    context = tmp_path_factory.mktemp("cell_context")
    (context / "helper.py").write_text("def loss(step):\n    return 1.0 / step\n")
    (context / "big.bin").write_bytes(b"\0" * 1000)
    (context / ".detignore").write_text("*.bin\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DET_HUB_MASTER", master.url)
        env.setenv("DET_HUB_TOKEN", master.token)
        env.setattr(_follow, "POLL_SECONDS", 0.2)
        ran = run_magic(shell, f"--name cell --max-length 20 --hparam lr=1e-3 "
                               f"--context {context} --follow", CORE_CELL)
    return ran, context


def test_the_cell_magic_trains_a_core_api_cell(
        core_cell_run: tuple[Any, Path], master_env: MasterProcess) -> None:
    ran, _ = core_cell_run
    assert ran.error is None and ran.stderr == ""
    exp = ran.value
    assert exp.state == "COMPLETED" and exp.name == "cell"
    assert exp.config["entrypoint"] == "python3 det_hub_cell.py"
    assert exp.config["searcher"]["metric"] == "loss"
    assert exp.config["hyperparameters"]["lr"] == {"type": "const", "val": 0.001}
    [trial] = exp.trials
    assert trial.steps_completed == 20 and trial.searcher_metric_value == pytest.approx(0.05)
    metrics = Client().trial_metrics(trial.id, group="training")
    assert [m.metrics["loss"] for m in metrics] == pytest.approx([1 / 5, 1 / 10, 1 / 15, 1 / 20])
    assert any(line.endswith("cell trained True") for line in ran.stdout.splitlines())
    with tarfile.open(fileobj=io.BytesIO(experiment_context(Client(), exp.id))) as tar:
        assert sorted(tar.getnames()) == ["det_hub_cell.py", "helper.py"]
        cell = tar.extractfile("det_hub_cell.py")
        assert cell is not None and cell.read().decode() == CORE_CELL


def test_load_checkpoint_of_a_core_api_cell_gives_its_directory(
        core_cell_run: tuple[Any, Path], master_env: MasterProcess, tmp_path: Path) -> None:
    import det_hub

    [trial] = core_cell_run[0].value.trials
    uuid = trial.latest_checkpoint
    in_place = det_hub.load_checkpoint(uuid)
    assert in_place == master_env.data_dir / "checkpoints" / "admin" / uuid
    assert (in_place / "weights.txt").read_text() == "20"
    copied = det_hub.load_checkpoint(uuid, path=tmp_path / "copy")
    assert copied == tmp_path / "copy" and (copied / "weights.txt").read_text() == "20"


TRIAL_CELL = '''
import torch
from torch import nn
from det_hub import pytorch


def data(n, seed):
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


class SumTrial(pytorch.PyTorchTrial):
    def __init__(self, context):
        super().__init__(context)
        self.model = context.wrap_model(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1)))
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr")))

    def build_training_data_loader(self):
        return pytorch.DataLoader(data(64, 0), batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self):
        return pytorch.DataLoader(data(16, 1), batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch):
        x, y = batch
        return {"loss": nn.functional.mse_loss(self.model(x), y)}
'''


def test_a_pytorch_trial_cell_trains_and_load_checkpoint_rebuilds_its_model(
        shell: InteractiveShell, master_env: MasterProcess, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import det_hub

    monkeypatch.chdir(tmp_path)  # the default context: the working directory
    (tmp_path / "notes.txt").write_text("sent along")
    ran = run_magic(shell, "--hparam lr=0.05 --hparam global_batch_size=8 --max-length 16 "
                           "--follow", TRIAL_CELL)
    assert ran.error is None and ran.stderr == "", ran.stdout[-2000:]
    exp = ran.value
    assert exp.state == "COMPLETED", ran.stdout[-2000:]
    assert exp.config["entrypoint"] == "det_hub_cell:SumTrial"
    with tarfile.open(fileobj=io.BytesIO(experiment_context(Client(), exp.id))) as tar:
        assert sorted(tar.getnames()) == ["det_hub_cell.py", "notes.txt"]
    [trial] = exp.trials
    assert trial.steps_completed == 16 and trial.latest_checkpoint

    state = torch.load(master_env.data_dir / "checkpoints" / "admin" / trial.latest_checkpoint /
                       "state_dict.pth", weights_only=False)
    trained = state["models_state_dict"][0]
    rng_before = torch.get_rng_state()
    model = det_hub.load_checkpoint(trial.latest_checkpoint)
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert isinstance(model, torch.nn.Sequential) and not model.training
    loaded = model.state_dict()
    assert loaded.keys() == trained.keys()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)
    # A trained model: it has learnt to add its inputs, which a freshly built one has not.
    assert model(torch.ones(1, 4)).item() == pytest.approx(4.0, abs=1.0)
    # The context's module was imported for the class and not left behind.
    assert "det_hub_cell" not in sys.modules

    with pytest.raises(MasterError) as missing:
        det_hub.load_checkpoint(str(uuid.uuid4()))
    assert missing.value.status == 404
    with pytest.raises(ValueError, match="not a plain uuid"):
        det_hub.load_checkpoint("../etc")


def test_errors_are_one_message_each(
        shell: InteractiveShell, master_env: MasterProcess, tmp_path: Path) -> None:
    def error_of(line: str, cell: str | None = None) -> str:
        ran = run_magic(shell, line, cell)
        assert ran.error is None and ran.value is None
        assert "Traceback" not in ran.stdout + ran.stderr and ran.stderr.startswith("Error: ")
        return ran.stderr

    experiments_before = len(Client().list_experiments())
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"entrypoint": "python3 train.py",
                                   "searcher": {"name": "single", "max_lenght": 3}}))
    message = error_of(f"create {bad} {STEPS}")
    assert message.splitlines()[0].startswith("Error: ")
    assert any(line.startswith("  searcher.") for line in message.splitlines()[1:]), message

    assert error_of("describe 9999").strip() == "Error: experiment 9999 not found"
    assert error_of("kill 9999").strip() == "Error: experiment 9999 not found"
    assert error_of(f"create {tmp_path / 'missing.yaml'}").strip() == \
        f"Error: config file {tmp_path / 'missing.yaml'} not found"
    assert error_of(f"create {bad} {tmp_path / 'nowhere'}").strip() == \
        f"Error: context directory {tmp_path / 'nowhere'} does not exist"
    assert error_of(f"create {bad} {STEPS} --config nokeyvalue").startswith(
        "Error: --config 'nokeyvalue': expected KEY=VALUE")
    assert error_of("--hparam lr", "print(1)").strip() == \
        "Error: --hparam 'lr': must be NAME=VALUE"
    assert error_of(f"--context {STEPS}", "def broken(:\n").startswith(
        "Error: the cell is not valid Python: line 1")
    assert len(Client().list_experiments()) == experiments_before  # nothing was submitted
