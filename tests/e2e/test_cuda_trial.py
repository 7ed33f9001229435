"""GPU trials through the master: the local agent offers the GPUs as slots and a trial uses one.

Skipped without a CUDA GPU (CI has none); run with ``pytest tests/e2e/test_cuda_trial.py`` on a
GPU host.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

from det_hub.testing import MasterProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

AMP_DEFS = Path(__file__).parents[1] / "gpu" / "amp_trial_defs.py"


def test_an_amp_trial_runs_on_a_gpu_slot(master: MasterProcess, tmp_path: Path) -> None:
    [agent] = master.get("/agents")["agents"]
    assert {s["type"] for s in agent["slots"]} == {"cuda"}
    assert len(agent["slots"]) == torch.cuda.device_count()

    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(AMP_DEFS, context / AMP_DEFS.name)
    config = {
        "name": "amp-on-gpu",
        "entrypoint": "amp_trial_defs:AmpTrial",
        "hyperparameters": {"global_batch_size": 64, "lr": 0.05, "hidden": 256},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 320}},
        "min_validation_period": {"batches": 160},
        "max_restarts": 0,
    }
    eid = master.create_ok(config, context=context)
    exp = master.wait_state(eid, timeout=300)
    [trial] = master.trials(eid)
    assert exp["state"] == "COMPLETED", master.logs(trial["id"])[-30:]
    training = master.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert all(m["metrics"]["half_precision"] == 1.0 for m in training)
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [160, 320]
    assert validation[-1]["metrics"]["accuracy"] > 0.8
    assert trial["latest_checkpoint"]


def test_mnist_const_on_a_gpu(master: MasterProcess) -> None:
    """The quickstart on one GPU slot: 98 % in one epoch, and how long that took."""
    started = time.monotonic()
    done = master.cli("experiment", "create", "examples/mnist_pytorch/const.yaml",
                      "examples/mnist_pytorch", "-f")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [trial] = master.trials(1)
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert validation[-1]["metrics"]["accuracy"] >= 0.98
    print(f"mnist const on {torch.cuda.get_device_name(0)}: "
          f"accuracy {validation[-1]['metrics']['accuracy']:.4f} "
          f"in {time.monotonic() - started:.1f} s")
