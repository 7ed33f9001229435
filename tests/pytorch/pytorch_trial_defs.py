"""Small trials on synthetic data for the det_hub.pytorch tests (also a harness entrypoint)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from det_hub import pytorch

NUM_RECORDS = 64
NUM_VALIDATION = 20
FEATURES = 8


def regression_data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    """Fixed synthetic data: y = x . w + noise; independent of the trial's seed."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, FEATURES, generator=gen)
    w = torch.arange(1, FEATURES + 1, dtype=torch.float32) / FEATURES
    y = (x @ w + 0.1 * torch.randn(n, generator=gen)).unsqueeze(1)
    return torch.utils.data.TensorDataset(x, y)


class Recorder(pytorch.PyTorchCallback):
    """Counts batches in its (checkpointed) state and records what it is told."""

    def __init__(self) -> None:
        self.epochs_ended = 0
        self.events: list[tuple[str, Any]] = []
        self.training_losses: list[tuple[int, float]] = []

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.epochs_ended += 1
        self.events.append(("epoch_end", epoch_idx))

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.events.append(("validation", dict(metrics)))

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.events.append(("checkpoint", checkpoint_dir))

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        self.training_losses.append((avg_metrics["batches"], avg_metrics["loss"]))

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_ended": self.epochs_ended}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs_ended = state_dict["epochs_ended"]


class RegressionTrial(pytorch.PyTorchTrial):
    """An MLP with dropout, SGD with momentum and a StepLR, on shuffled synthetic data."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.context = context
        hidden = int(context.get_hparam("hidden"))
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(FEATURES, hidden),
                nn.ReLU(),
                nn.Dropout(float(context.get_hparams().get("dropout", 0.3))),
                nn.Linear(hidden, 1),
            )
        )
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )
        mode = pytorch.LRScheduler.StepMode[
            context.get_hparams().get("lr_mode", "STEP_EVERY_EPOCH")
        ]
        self.sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=1, gamma=0.5), step_mode=mode
        )
        self.recorder = Recorder()

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            regression_data(NUM_RECORDS, 0),
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            regression_data(NUM_VALIDATION, 1), batch_size=self.context.get_per_slot_batch_size()
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss, "lr": self.sched.get_last_lr()[0]}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}

    def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
        return {"recorder": self.recorder}


def weights(context: pytorch.PyTorchTrialContext) -> list[torch.Tensor]:
    """Every parameter of the context's models, detached copies."""
    return [p.detach().clone() for m in context.models for p in m.parameters()]
