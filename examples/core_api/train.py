"""Train a small MLP on synthetic regression data with the det_hub Core API.

On a cluster: ``det-hub experiment create const.yaml .``. Locally: ``python3 train.py`` (it
then trains ``DET_HUB_LOCAL_MAX_LENGTH`` batches, 200 unless set, and checkpoints into
``./checkpoints``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import torch
from torch import nn

import det_hub.core as core

BATCH_SIZE = 32
REPORT_EVERY = 20  # batches between training-metric reports
N_FEATURES = 8
DEFAULT_HPARAMS = {"learning_rate": 0.05, "hidden": 32}


def make_data(seed: int) -> tuple[torch.Tensor, ...]:
    """A fixed noisy nonlinear regression problem: train and validation splits."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2048, N_FEATURES, generator=gen)
    w = torch.randn(N_FEATURES, 1, generator=gen)
    z = x @ w / N_FEATURES**0.5
    y = z + 0.5 * torch.tanh(2 * z) + 0.05 * torch.randn(2048, 1, generator=gen)
    return x[:1536], y[:1536], x[1536:], y[1536:]


def build(hparams: dict[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer]:
    hidden = int(hparams["hidden"])
    model = nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    optimizer = torch.optim.SGD(
        model.parameters(), lr=float(hparams["learning_rate"]), momentum=0.9
    )
    return model, optimizer


def save(
    core_context: core.Context, model: nn.Module, opt: torch.optim.Optimizer, step: int
) -> str:
    with core_context.checkpoint.store_path({"steps_completed": step}) as (path, storage_id):
        torch.save(
            {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
            path / "model.pt",
        )
    print(f"checkpoint {storage_id} at batch {step}", flush=True)
    return storage_id


def validate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def main(core_context: core.Context, info: core.ClusterInfo | None) -> int:
    hparams = dict(DEFAULT_HPARAMS)
    seed = 0
    if info is not None and info.trial is not None:
        hparams.update(info.trial.hparams)
        seed = info.trial.trial_seed
    torch.manual_seed(seed)
    x_train, y_train, x_val, y_val = make_data(seed=1234)
    model, opt = build(hparams)

    step = 0
    latest = info.latest_checkpoint if info is not None else None
    if latest is not None:
        with core_context.checkpoint.restore_path(latest) as path:
            state = torch.load(path / "model.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
        print(f"resumed from checkpoint {latest} at batch {step}", flush=True)

    n_batches = x_train.shape[0] // BATCH_SIZE
    for op in core_context.searcher.operations():
        running = 0.0
        since_report = 0
        while step < op.length:
            i = step % n_batches
            xb = x_train[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]
            yb = y_train[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            running += loss.item()
            since_report += 1
            if step % REPORT_EVERY == 0:
                core_context.train.report_training_metrics(
                    steps_completed=step, metrics={"loss": running / since_report}
                )
                op.report_progress(step)
                print(f"batch {step}/{op.length} loss {running / since_report:.4f}", flush=True)
                running, since_report = 0.0, 0
            if core_context.preempt.should_preempt():
                save(core_context, model, opt, step)
                print(f"preempted at batch {step}; exiting", flush=True)
                return 0
        val_loss = validate(model, x_val, y_val)
        core_context.train.report_validation_metrics(
            steps_completed=step, metrics={"validation_loss": val_loss}
        )
        print(f"validation at batch {step}: validation_loss {val_loss:.4f}", flush=True)
        save(core_context, model, opt, step)
        op.report_completed(val_loss)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    cluster_info = core.get_cluster_info()
    if cluster_info is None:
        # Local runs get a real amount of training rather than the one-batch default.
        os.environ.setdefault("DET_HUB_LOCAL_MAX_LENGTH", "200")
    with core.init() as ctx:
        sys.exit(main(ctx, cluster_info))
