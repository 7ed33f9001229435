"""``python -m det_hub.launch.deepspeed`` with real DeepSpeed workers on CPU (gloo)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from det_hub.launch import deepspeed as ds_launch

LAUNCHER = [sys.executable, "-m", "det_hub.launch.deepspeed"]

needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed"
)

# Each worker initialises DeepSpeed's communication from the launcher's environment alone and
# all-reduces rank + 1, so two workers both print a sum of 3.
WORKER = """
import os

import deepspeed
import deepspeed.comm as dist
import torch

deepspeed.init_distributed(dist_backend="gloo")
value = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(value)
env = os.environ
print(
    f"RESULT rank {dist.get_rank()} world {dist.get_world_size()} local {env['LOCAL_RANK']} "
    f"local_size {env['LOCAL_SIZE']} distributed {env['DET_HUB_DISTRIBUTED']} "
    f"sum {int(value.item())}",
    flush=True,
)
dist.destroy_process_group()
"""


@pytest.fixture
def base_env() -> dict[str, str]:
    """The environment of a task on CPU slots, less the cluster-info file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2")
    return env


def results_by_rank(stdout: str) -> dict[str, list[str]]:
    """The workers' RESULT lines by rank prefix; every line must carry a prefix."""
    found: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        prefix, sep, rest = line.partition("] ")
        assert sep and prefix.startswith("[rank="), f"line without a rank prefix: {line!r}"
        if rest.startswith("RESULT "):
            found.setdefault(prefix + "]", []).append(rest.removeprefix("RESULT "))
    return found


@needs_deepspeed
@pytest.mark.parametrize("how", ["cluster_info", "nproc"])
def test_two_cpu_workers_all_reduce(tmp_path: Path, base_env: dict[str, str], how: str) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(base_env)
    args: list[str] = []
    if how == "cluster_info":
        info = tmp_path / "cluster_info.json"
        info.write_text(json.dumps({
            "master_url": "http://127.0.0.1:1", "allocation_id": "7.0", "task_id": "trial-7",
            "task_type": "TRIAL", "slot_ids": [0, 1], "container_addrs": ["127.0.0.1"],
        }))
        env["DET_HUB_CLUSTER_INFO"] = str(info)
    else:
        args = ["--nproc", "2"]
    proc = subprocess.run(
        [*LAUNCHER, *args, "--", sys.executable, "worker.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results_by_rank(proc.stdout) == {
        f"[rank={r}]": [f"rank {r} world 2 local {r} local_size 2 distributed torch sum 3"]
        for r in (0, 1)
    }


@needs_deepspeed
def test_failing_worker_exit_code_is_the_launchers(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    (tmp_path / "fail.py").write_text("import sys\nsys.exit(3)\n")
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", "fail.py"],
        env=base_env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 3


def test_local_size_is_the_worker_count() -> None:
    assert ds_launch.deepspeed_env({"PATH": "/bin"}, 4) == {"PATH": "/bin", "LOCAL_SIZE": "4"}


def test_missing_deepspeed_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_deepspeed(name: str, package: str | None = None) -> object:
        return None if name == "deepspeed" else real_find_spec(name, package)

    # Uninstalling DeepSpeed from the test's own environment is not an option.
    monkeypatch.setattr(importlib.util, "find_spec", without_deepspeed)
    assert ds_launch.main(["--nproc", "2", "train.py"]) == 127
    assert capsys.readouterr().err == f"{ds_launch.PROG}: {ds_launch.NOT_INSTALLED}\n"


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert ds_launch.main(["--nproc", "0", "train.py"]) == 2
    assert "--nproc must be >= 1" in capsys.readouterr().err
