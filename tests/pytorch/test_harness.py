"""``python -m det_hub.exec.harness``: locally, against a stand-in master, and on two ranks."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from det_hub.config import parse_experiment_config

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# The stand-in master of the Core API tests answers the trial-side REST calls.
_spec = importlib.util.spec_from_file_location(
    "det_hub_fake_master", REPO / "tests/core/conftest.py"
)
assert _spec is not None and _spec.loader is not None
fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake)

HPARAMS = {"global_batch_size": 8, "hidden": 16, "lr": 0.05, "dropout": 0.3}
CONFIG: dict[str, Any] = {
    "name": "regression",
    "entrypoint": "pytorch_trial_defs:RegressionTrial",
    "hyperparameters": HPARAMS,
    "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"epochs": 4}},
    "records_per_epoch": 64,
    "scheduling_unit": 1,
    "min_validation_period": {"epochs": 1},
    "reproducibility": {"experiment_seed": 5},
}
# An adaptive searcher's operations decide the length; the stand-in master hands them out.
ADAPTIVE: dict[str, Any] = {
    **CONFIG,
    "searcher": {**CONFIG["searcher"], "name": "adaptive_asha", "max_trials": 4},
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    """A copy of the experiment's context: the model definition alone."""
    ctx = tmp_path / "context"
    ctx.mkdir()
    shutil.copy(HERE / "pytorch_trial_defs.py", ctx)
    return ctx


@pytest.fixture
def master() -> Iterator[Any]:
    m = fake.FakeMaster(fake.MasterState(), _port())
    m.start()
    yield m
    m.stop()


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env["PYTHONPATH"] = str(REPO)
    env.pop("WORLD_SIZE", None)
    return env


def _harness(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "det_hub.exec.harness", *args],
        cwd=cwd,
        env=env or _base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _cluster_env(
    master: Any, tmp: Path, config: dict[str, Any], latest: str | None = None
) -> dict[str, str]:
    storage = tmp / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    info = {
        "master_url": master.url,
        "allocation_id": fake.ALLOCATION_ID,
        "task_id": f"trial-{fake.TRIAL_ID}",
        "task_type": "TRIAL",
        "slot_ids": [0],
        "container_addrs": ["127.0.0.1"],
        "trial": {
            "trial_id": fake.TRIAL_ID,
            "experiment_id": fake.EXPERIMENT_ID,
            "trial_seed": 99,
            "hparams": config["hyperparameters"],
            "config": parse_experiment_config(config).to_dict(),
            "steps_completed": 0,
            "latest_checkpoint": latest,
        },
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
    }
    path = tmp / f"cluster_info_{latest or 'fresh'}.json"
    path.write_text(json.dumps(info))
    return {**_base_env(), **fake.trial_env(master.url, path)}


def _rows(master: Any, group: str) -> list[dict[str, Any]]:
    return [row for g, row in master.state.metric_rows if g == group]


def test_local_mode_trains_to_the_config_length(context_dir: Path, tmp_path: Path) -> None:
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_length": {"records": 100}}}
    (context_dir / "const.yaml").write_text(yaml.safe_dump(config))
    done = _harness(
        context_dir,
        "pytorch_trial_defs:RegressionTrial",
        "--config",
        "const.yaml",
        "--checkpoint-dir",
        str(tmp_path / "ckpts"),
    )
    assert done.returncode == 0, done.stderr
    metas = [json.loads(p.read_text()) for p in (tmp_path / "ckpts").glob("*/metadata.json")]
    # 100 records at 8 a batch: 13 batches (rounded up); the best and the final checkpoint
    # are the same one.
    assert sorted(m["steps_completed"] for m in metas)[-1] == 13
    assert "validation metrics at step 13" in done.stderr


def test_bad_entrypoint_exits_2_naming_it(context_dir: Path) -> None:
    (context_dir / "const.yaml").write_text(yaml.safe_dump(CONFIG))
    done = _harness(context_dir, "no_such_module:Trial", "--config", "const.yaml")
    assert done.returncode == 2
    assert "'no_such_module:Trial'" in done.stderr and "No module named" in done.stderr
    done = _harness(context_dir, "pytorch_trial_defs:Missing", "--config", "const.yaml")
    assert done.returncode == 2 and "has no 'Missing'" in done.stderr
    done = _harness(context_dir, "pytorch_trial_defs:Recorder", "--config", "const.yaml")
    assert done.returncode == 2 and "not a det_hub.pytorch.PyTorchTrial" in done.stderr


def test_cluster_follows_searcher_then_preemption_and_exact_resume(
    master: Any, context_dir: Path, tmp_path: Path
) -> None:
    state = master.state
    entry = "pytorch_trial_defs:RegressionTrial"
    # An uninterrupted run: operations of 1 and 2 epochs (8 and 16 batches).
    state.ops = [1, 2]
    done = _harness(context_dir, entry, env=_cluster_env(master, tmp_path / "a", ADAPTIVE))
    assert done.returncode == 0, done.stderr
    validations = _rows(master, "validation")
    assert [r["steps_completed"] for r in validations] == [8, 16]
    assert [r["metrics"]["epochs"] for r in validations] == [1, 2]
    assert [c["length"] for c in state.completed_ops] == [1, 2]
    assert [c["searcher_metric"] for c in state.completed_ops] == [
        r["metrics"]["validation_loss"] for r in validations
    ]
    training = _rows(master, "training")
    assert [r["steps_completed"] for r in training] == list(range(1, 17))  # scheduling_unit 1
    assert all(r["metrics"]["lr"] > 0 for r in training)
    assert max(c["steps_completed"] for c in state.checkpoints.values()) == 16
    reference = validations[-1]["metrics"]["validation_loss"]

    # The same trial preempted: it checkpoints and exits cleanly without completing the op.
    state.metric_rows.clear()
    state.completed_ops.clear()
    state.checkpoints.clear()
    state.ops = [2]
    state.preempt.set()
    done = _harness(context_dir, entry, env=_cluster_env(master, tmp_path / "b", ADAPTIVE))
    assert done.returncode == 0, done.stderr
    assert state.completed_ops == []
    (stopped_at, uuid), *_ = sorted(
        ((c["steps_completed"], u) for u, c in state.checkpoints.items()), reverse=True
    )
    assert 0 < stopped_at < 16, "the preemption signal should be seen before the end"
    # Resumed from that checkpoint, it ends exactly where the uninterrupted run did.
    state.preempt.clear()
    done = _harness(
        context_dir, entry, env=_cluster_env(master, tmp_path / "b", ADAPTIVE, latest=uuid)
    )
    assert done.returncode == 0, done.stderr
    assert [c["length"] for c in state.completed_ops] == [2]
    assert state.completed_ops[0]["searcher_metric"] == reference
    steps = [r["steps_completed"] for r in _rows(master, "training")]
    assert steps[-1] == 16 and steps == sorted(set(steps))


def test_cluster_single_search_trains_to_its_max_length_without_operations(
    master: Any, context_dir: Path, tmp_path: Path
) -> None:
    """A ``single`` search is not adaptive: the harness trains to ``searcher.max_length``
    (deprecated, and said so) whatever operations the master has, and reports none."""
    state = master.state
    state.null_op = True
    done = _harness(
        context_dir, "pytorch_trial_defs:RegressionTrial",
        env=_cluster_env(master, tmp_path, CONFIG),
    )
    assert done.returncode == 0, done.stderr
    assert "searcher.max_length is deprecated" in done.stderr
    validations = _rows(master, "validation")
    assert [r["steps_completed"] for r in validations] == [8, 16, 24, 32]  # 4 epochs of 8
    assert state.completed_ops == []
    assert max(c["steps_completed"] for c in state.checkpoints.values()) == 32


def test_cluster_harness_without_any_length_fails_having_trained_nothing(
    master: Any, context_dir: Path, tmp_path: Path
) -> None:
    config = {**CONFIG, "searcher": {"name": "single", "metric": "validation_loss"}}
    master.state.null_op = True
    done = _harness(
        context_dir, "pytorch_trial_defs:RegressionTrial",
        env=_cluster_env(master, tmp_path, config),
    )
    assert done.returncode == 1
    assert "no training length" in done.stderr and "Trainer.fit(max_length=" in done.stderr
    assert _rows(master, "training") == [] and master.state.checkpoints == {}


def _dist_env(base: dict[str, str], rank: int, port: int) -> dict[str, str]:
    return {
        **base,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
    }


def test_two_ranks_match_one_rank(master: Any, context_dir: Path, tmp_path: Path) -> None:
    config = {**ADAPTIVE, "hyperparameters": {**HPARAMS, "dropout": 0.0}}
    entry = "pytorch_trial_defs:RegressionTrial"
    state = master.state
    state.ops = [2]
    done = _harness(context_dir, entry, env=_cluster_env(master, tmp_path / "one", config))
    assert done.returncode == 0, done.stderr
    one_train = [r["metrics"]["loss"] for r in _rows(master, "training")]
    one_val = [r["metrics"]["validation_loss"] for r in _rows(master, "validation")]
    one_ckpts = sorted(c["steps_completed"] for c in state.checkpoints.values())

    state.metric_rows.clear()
    state.checkpoints.clear()
    state.ops = [2]
    base = _cluster_env(master, tmp_path / "two", config)
    port = _port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "det_hub.exec.harness", entry],
            cwd=context_dir,
            env=_dist_env(base, rank, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    two_train = [r["metrics"]["loss"] for r in _rows(master, "training")]
    two_val = [r["metrics"]["validation_loss"] for r in _rows(master, "validation")]
    assert len(two_train) == len(one_train) == 16
    assert two_train == pytest.approx(one_train, rel=1e-4, abs=1e-6)
    assert two_val == pytest.approx(one_val, rel=1e-4, abs=1e-6)
    # Records count both ranks' shares.
    assert _rows(master, "validation")[-1]["metrics"]["records"] == 128
    # The chief alone reported the operation and wrote the checkpoints, at the same steps.
    assert [c["length"] for c in state.completed_ops] == [2, 2]
    assert sorted(c["steps_completed"] for c in state.checkpoints.values()) == one_ckpts
    ckpt_dirs = [p for p in (tmp_path / "two" / "storage").iterdir() if p.name != "tensorboard"]
    assert len(ckpt_dirs) == len(one_ckpts)
