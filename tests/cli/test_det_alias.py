"""The ``det`` console script: Determined's spellings that scripts use, run as a subprocess
against a real master."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from det_hub.testing import MasterProcess

DET = Path(sys.executable).with_name("det")
STEPS = Path(__file__).resolve().parents[1] / "e2e" / "contexts" / "steps"


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def det(master: MasterProcess, *args: str, cwd: Path | None = None) -> str:
    env = dict(os.environ, DET_HUB_MASTER=master.url, DET_HUB_TOKEN=master.token)
    done = subprocess.run([str(DET), *args], capture_output=True, text=True, env=env,
                          timeout=180, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_det_is_installed_as_det_hubs_cli() -> None:
    assert DET.exists(), "reinstall the project: pip install -e ."
    done = subprocess.run([str(DET), "experiment", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    for verb in ("create", "list", "cancel", "kill"):
        assert verb in done.stdout


@pytest.mark.slow
def test_determined_spellings_run_an_experiment_end_to_end(
        master: MasterProcess, tmp_path: Path) -> None:
    config = tmp_path / "const.yaml"
    config.write_text(yaml.safe_dump({
        "name": "det-alias", "entrypoint": "python3 train.py", "max_restarts": 0,
        "hyperparameters": {"sleep": 0.0, "report_every": 1},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 3}}}))
    out = det(master, "e", "create", str(config), str(STEPS), "-f")
    eid = next(e["id"] for e in master.get("/experiments?limit=1000")["experiments"]
               if e["name"] == "det-alias")
    assert master.experiment(eid)["state"] == "COMPLETED", out
    assert "det-alias" in det(master, "e", "list")
    [trial] = master.trials(eid)
    logs = det(master, "t", "logs", "-f", str(trial["id"]))
    assert "done" in logs.splitlines()[-1] or "done" in logs
    [ckpt] = [c for c in master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
              if c["steps_completed"] == 3]
    det(master, "checkpoint", "download", ckpt["uuid"], "-o", str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / "state.json").read_text() == '{"step": 3}'
