"""A PyTorchTrial through the master: the harness, one slot and two."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

TRIAL_DEFS = Path(__file__).parents[1] / "pytorch" / "pytorch_trial_defs.py"


def trial_config(slots: int) -> dict[str, object]:
    return {
        "name": f"regression-{slots}",
        "entrypoint": "pytorch_trial_defs:RegressionTrial",
        "hyperparameters": {"hidden": 16, "lr": 0.05, "global_batch_size": 8},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 40}},
        "min_validation_period": {"batches": 20},
        "resources": {"slots_per_trial": slots},
        "max_restarts": 0,
    }


@pytest.fixture
def trial_context(tmp_path: Path) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(TRIAL_DEFS, ctx / TRIAL_DEFS.name)
    return ctx


@pytest.mark.parametrize("slots", [1, 2])
def test_a_trial_class_trains_validates_and_checkpoints(
        master: MasterProcess, trial_context: Path, slots: int) -> None:
    eid = master.create_ok(trial_config(slots), context=trial_context)
    exp = master.wait_state(eid, timeout=180)
    [trial] = master.trials(eid)
    assert exp["state"] == "COMPLETED", master.logs(trial["id"])[-20:]
    assert trial["steps_completed"] == 40
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [20, 40]
    assert all(m["metrics"]["batches"] == m["steps_completed"] for m in validation)
    assert trial["latest_checkpoint"]
    ckpt = master.get(f"/checkpoints/{trial['latest_checkpoint']}")["checkpoint"]
    assert ckpt["steps_completed"] == 40 and "state_dict.pth" in ckpt["resources"]
    lines = master.get_logs(trial["id"])
    assert any(line["message"].endswith("validation at batch 40: validation_loss="
                                         + f"{validation[-1]['metrics']['validation_loss']:.4g}")
               for line in lines)
    # Two slots run two ranks: the chief reports, and both ranks' lines are told apart.
    assert {line["rank"] for line in lines} >= ({0, 1} if slots == 2 else {None})


def test_mnist_const_reaches_98_percent_in_one_epoch(master: MasterProcess) -> None:
    """Determined's quickstart, unchanged: real MNIST, one epoch, through the CLI."""
    done = master.cli("experiment", "create", "examples/mnist_pytorch/const.yaml",
                      "examples/mnist_pytorch", "-f")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [trial] = master.trials(1)
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert validation[-1]["steps_completed"] == 938  # 60,000 records / batches of 64
    assert validation[-1]["metrics"]["accuracy"] >= 0.98
