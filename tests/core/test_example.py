"""examples/core_api/train.py run for real: locally and as a trial of the stand-in master."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from conftest import ALLOCATION_ID, TRIAL_ID, FakeMaster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "core_api"
REPO = EXAMPLE.parents[1]


def _run(workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Run from a copy of the example directory, as the agent runs a copy of the context.
    shutil.copy(EXAMPLE / "train.py", workdir / "train.py")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "train.py"],
        cwd=workdir,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_runs_outside_a_cluster(tmp_path: Path) -> None:
    proc = _run(tmp_path, {"DET_HUB_LOCAL_MAX_LENGTH": "60"})
    assert proc.returncode == 0, proc.stderr
    assert "training metrics at step 20" in proc.stderr
    assert "validation metrics at step 60" in proc.stderr
    ckpts = list((tmp_path / "checkpoints").iterdir())
    assert len(ckpts) == 1
    assert json.loads((ckpts[0] / "metadata.json").read_text()) == {"steps_completed": 60}
    state = torch.load(ckpts[0] / "model.pt")
    assert state["step"] == 60 and set(state) == {"model", "optimizer", "step"}
    assert f"checkpoint {ckpts[0].name} at batch 60" in proc.stdout


def test_trial_trains_reports_and_completes(
    master: FakeMaster, make_trial_env: Any, tmp_path: Path
) -> None:
    state = master.state
    state.ops = [60]
    work = tmp_path / "work"
    work.mkdir()
    proc = _run(work, make_trial_env())
    assert proc.returncode == 0, proc.stderr
    training = [r["steps_completed"] for g, r in state.metric_rows if g == "training"]
    validation = [
        (r["steps_completed"], set(r["metrics"])) for g, r in state.metric_rows if g == "validation"
    ]
    assert training == [20, 40, 60]
    assert validation == [(60, {"validation_loss"})]
    val_loss = next(
        r["metrics"]["validation_loss"] for g, r in state.metric_rows if g == "validation"
    )
    assert state.completed_ops == [{"length": 60, "searcher_metric": val_loss}]
    ((uuid, ckpt),) = state.checkpoints.items()
    stored = tmp_path / "storage" / uuid
    assert ckpt["steps_completed"] == 60
    assert ckpt["resources"]["model.pt"] == (stored / "model.pt").stat().st_size
    assert not (work / "checkpoints").exists()


def test_preempted_trial_checkpoints_exits_and_resumes(
    master: FakeMaster, make_trial_env: Any, tmp_path: Path
) -> None:
    state = master.state
    state.ops = [60]
    state.preempt.set()
    first = tmp_path / "first"
    first.mkdir()
    proc = _run(first, make_trial_env())
    assert proc.returncode == 0, proc.stderr
    assert "preempted at batch" in proc.stdout
    assert state.count("POST", f"/allocations/{ALLOCATION_ID}/signals/ack_preemption") == 1
    assert state.completed_ops == []
    ((uuid, ckpt),) = state.checkpoints.items()
    stopped_at = ckpt["steps_completed"]
    assert 1 <= stopped_at < 60

    state.preempt.clear()
    second = tmp_path / "second"
    second.mkdir()
    proc = _run(second, make_trial_env(latest_checkpoint=uuid))
    assert proc.returncode == 0, proc.stderr
    assert f"resumed from checkpoint {uuid} at batch {stopped_at}" in proc.stdout
    assert state.completed_ops and state.completed_ops[0]["length"] == 60
    assert max(r["steps_completed"] for g, r in state.metric_rows if g == "training") == 60
    assert all(r["path"] != f"/trials/{TRIAL_ID}/early_exit" for r in state.requests)
