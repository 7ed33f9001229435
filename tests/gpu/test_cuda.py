"""The CUDA path: GPU slots, mixed-precision training with exact resume, and NCCL.

Every test here needs a CUDA GPU and is skipped without one; ``pytest tests/gpu
tests/e2e/test_cuda_trial.py`` on a GPU host runs them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from amp_trial_defs import AmpTrial

from det_hub import pytorch
from det_hub.agents.slots import discover_gpus, discover_slots

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

HPARAMS = {"global_batch_size": 64, "lr": 0.05, "hidden": 256}


def test_gpu_slots_are_the_gpus_torch_sees() -> None:
    count = torch.cuda.device_count()
    assert [index for index, _ in discover_gpus()] == [str(i) for i in range(count)]
    slots = discover_slots()
    assert [(s.kind, s.device) for s in slots] == [("cuda", str(i)) for i in range(count)]
    assert slots[0].description == torch.cuda.get_device_name(0)


class _Run:
    def __init__(self, trial: AmpTrial, trainer: pytorch.Trainer,
                 reports: list[dict[str, float]]) -> None:
        self.trial, self.trainer, self.reports = trial, trainer, reports
        self.weights = [p.detach().clone() for p in trial.model.parameters()]


def _train(storage: Path, **fit: Any) -> _Run:
    reports: list[dict[str, float]] = []

    class Reports(pytorch.PyTorchCallback):
        def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
            reports.append(dict(avg_metrics))

    exp_conf = {"reproducibility": {"experiment_seed": 11}}
    with pytorch.init(hparams=HPARAMS, exp_conf=exp_conf, checkpoint_storage=storage) as context:
        trial = AmpTrial(context)
        trial.build_callbacks = lambda: {"reports": Reports()}  # type: ignore[method-assign]
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(**fit)
        return _Run(trial, trainer, reports)


def test_amp_trains_in_half_precision_and_resumes_bit_identically(tmp_path: Path) -> None:
    total, split = 50, 23
    straight = _train(
        tmp_path / "a", max_length=pytorch.Batch(total), reporting_period=pytorch.Batch(10)
    )
    assert all(p.device.type == "cuda" for p in straight.weights)
    assert [r["batches"] for r in straight.reports] == [10, 20, 30, 40, 50]
    assert straight.reports[0]["half_precision"] == 1.0
    assert straight.reports[-1]["loss"] < straight.reports[0]["loss"] * 0.8

    first = _train(tmp_path / "b", max_length=pytorch.Batch(split))
    uuid = first.trainer.last_checkpoint
    assert uuid is not None
    resumed = _train(tmp_path / "b", max_length=pytorch.Batch(total), latest_checkpoint=uuid)
    assert resumed.trainer.batches_trained == total
    # Weights, optimizer, scaler and the CUDA RNG (dropout) all came back.
    assert resumed.trial.scaler.state_dict() == straight.trial.scaler.state_dict()
    for a, b in zip(straight.weights, resumed.weights, strict=True):
        assert torch.equal(a, b)


NCCL_WORKER = """
    import torch
    import torch.distributed as dist

    from det_hub.core import DistributedContext

    with DistributedContext.from_torch_distributed() as ctx:
        torch.cuda.set_device(ctx.local_rank)
        value = torch.full((4,), float(ctx.rank + 1), device="cuda")
        dist.all_reduce(value)
        gathered = ctx.allgather(ctx.rank)
        print("backend", dist.get_backend(), "sum", value[0].item(), "ranks", gathered, flush=True)
"""


def test_nccl_collectives_through_the_launcher(tmp_path: Path) -> None:
    """One worker per GPU (NCCL refuses two ranks on one device): all_reduce and allgather."""
    workers = torch.cuda.device_count()
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(NCCL_WORKER))
    done = subprocess.run(
        [sys.executable, "-m", "det_hub.launch.torch_distributed", "--nproc", str(workers),
         "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    expected_sum = float(workers * (workers + 1) // 2)
    ranks = list(range(workers))
    for rank in ranks:
        assert f"[rank={rank}] backend nccl sum {expected_sum} ranks {ranks}" in done.stdout
