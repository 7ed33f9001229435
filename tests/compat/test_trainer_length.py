"""How long a Determined ``Trainer`` script trains on a real master, as in Determined 0.38.

For every searcher but the adaptive ones, ``fit(max_length=...)`` is each trial's length; the
deprecated ``searcher.max_length`` is the fallback; and a run that trains less than it was
asked ends in ERROR, never COMPLETED.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.testing import MasterProcess, reap_tasks

pytestmark = pytest.mark.slow

#: 48 records in batches of 8: an epoch is 6 batches.
RECORDS = 48
BATCH = 8

TRAIN_PY = textwrap.dedent('''
    """A tiny Trainer script; hyperparameters choose fit's length and the data."""
    import logging

    import torch
    from torch import nn

    from det_hub import pytorch


    class OneShot:
        """Batches that can be read once only, though it says how many there are."""

        def __init__(self, batches):
            self._batches = iter(batches)
            self._count = len(batches)
            self.batch_size = len(batches[0][0])

        def __len__(self):
            return self._count

        def __iter__(self):
            return self._batches


    class Tiny(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            torch.manual_seed(0)
            self.model = context.wrap_model(nn.Linear(4, 1))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.05))

        def _data(self, n):
            x = torch.randn(n, 4, generator=torch.Generator().manual_seed(1))
            return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

        def build_training_data_loader(self):
            data = self._data(int(self.context.get_hparam("records")))
            size = self.context.get_per_slot_batch_size()
            if self.context.get_hparams().get("one_shot"):
                xs, ys = data.tensors
                return OneShot([(xs[i:i + size], ys[i:i + size])
                                for i in range(0, len(xs), size)])
            return pytorch.DataLoader(data, batch_size=size)

        def build_validation_data_loader(self):
            return pytorch.DataLoader(self._data(16), batch_size=8)

        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch):
            x, y = batch
            return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


    def fit_length(spec):
        if not spec:
            return None
        unit, count = spec.split(":")
        return {"batch": pytorch.Batch, "epoch": pytorch.Epoch,
                "record": pytorch.Record}[unit](int(count))


    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        with pytorch.init() as context:
            trainer = pytorch.Trainer(Tiny(context), context)
            trainer.fit(max_length=fit_length(context.get_hparams().get("fit_length")))
''')


@pytest.fixture
def master(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    proc = MasterProcess(tmp_path / "data", sqlite_url)
    proc.start()
    yield proc
    proc.stop()
    reap_tasks(tmp_path)  # trials outlive a stopped master by design


@pytest.fixture
def context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "train.py").write_text(TRAIN_PY)
    return ctx


def config(searcher: dict[str, Any], **hparams: Any) -> dict[str, Any]:
    return {
        "name": "trainer-length",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"global_batch_size": BATCH, "records": RECORDS, **hparams},
        "searcher": {"metric": "validation_loss", **searcher},
        "max_restarts": 0,
    }


def run(master: MasterProcess, context: Path, cfg: dict[str, Any]
        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    eid = master.create_ok(cfg, context=context)
    return master.wait_state(eid, timeout=240), master.trials(eid)


def checkpoint_steps(master: MasterProcess, trial: dict[str, Any]) -> int:
    ckpt = master.get(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    return int(ckpt["steps_completed"])


def test_single_search_without_max_length_trains_fits_whole_epoch(
        master: MasterProcess, context: Path) -> None:
    """Determined's tutorial: ``const.yaml`` with no searcher length, ``fit(Epoch(1))``."""
    exp, [trial] = run(master, context, config({"name": "single"}, fit_length="epoch:1"))
    logs = "\n".join(master.logs(trial["id"]))
    assert exp["state"] == "COMPLETED", logs[-3000:]
    assert trial["state"] == "COMPLETED"
    assert trial["steps_completed"] == RECORDS // BATCH == 6
    assert checkpoint_steps(master, trial) == 6
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [6]
    assert validation[0]["metrics"]["epochs"] == 1
    assert trial["searcher_metric_value"] == validation[0]["metrics"]["validation_loss"]
    assert trial["progress"] == 1.0
    assert "deprecated" not in logs


def test_random_search_trains_every_trial_to_fits_length(
        master: MasterProcess, context: Path) -> None:
    cfg = config({"name": "random", "max_trials": 2}, fit_length="batch:10",
                 lr={"type": "double", "minval": 0.01, "maxval": 0.1})
    exp, trials = run(master, context, cfg)
    assert exp["state"] == "COMPLETED", [master.logs(t["id"])[-10:] for t in trials]
    assert len(trials) == 2
    for trial in trials:
        assert trial["state"] == "COMPLETED"
        assert trial["steps_completed"] == 10
        assert checkpoint_steps(master, trial) == 10
        training = master.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
        assert training[-1]["metrics"]["batches"] == 10
    assert exp["progress"] == 1.0


def test_legacy_max_length_is_the_length_when_fit_has_none(
        master: MasterProcess, context: Path) -> None:
    cfg = config({"name": "single", "max_length": {"batches": 9}})
    exp, [trial] = run(master, context, cfg)
    logs = "\n".join(master.logs(trial["id"]))
    assert exp["state"] == "COMPLETED", logs[-3000:]
    assert trial["steps_completed"] == 9 and checkpoint_steps(master, trial) == 9
    assert "searcher.max_length is deprecated" in logs
    assert "Trainer.fit(max_length=...)" in logs


def test_fit_and_legacy_max_length_disagree_fit_wins_and_it_is_said(
        master: MasterProcess, context: Path) -> None:
    cfg = config({"name": "single", "max_length": {"epochs": 2}}, fit_length="batch:4")
    exp, [trial] = run(master, context, cfg)
    logs = "\n".join(master.logs(trial["id"]))
    assert exp["state"] == "COMPLETED", logs[-3000:]
    assert trial["steps_completed"] == 4
    [warning] = [line for line in logs.splitlines() if "asks for 4 batches" in line]
    assert "searcher.max_length" in warning and "12" in warning  # 2 epochs of 6 batches


def test_a_run_that_falls_short_ends_in_error_naming_both_numbers(
        master: MasterProcess, context: Path) -> None:
    """Data that can be read once runs out after one epoch (6 batches) of the 2 asked for."""
    cfg = config({"name": "single"}, fit_length="epoch:2", one_shot=True)
    exp, [trial] = run(master, context, cfg)
    logs = "\n".join(master.logs(trial["id"]))
    assert exp["state"] == "ERROR", logs[-3000:]
    assert trial["state"] == "ERROR"
    assert trial["steps_completed"] == 6
    assert "ran out after 6 batches, short of the 12 batches asked for" in logs


def test_no_length_anywhere_is_an_error_not_an_empty_success(
        master: MasterProcess, context: Path) -> None:
    exp, [trial] = run(master, context, config({"name": "grid"}))
    logs = "\n".join(master.logs(trial["id"]))
    assert exp["state"] == "ERROR", logs[-3000:]
    assert trial["state"] == "ERROR" and not trial["steps_completed"]
    assert "no training length" in logs
