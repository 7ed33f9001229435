"""A PyTorchTrial with automatic mixed precision: autocast, a GradScaler and gradient clipping."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from det_hub import pytorch

FEATURES, CLASSES = 64, 8
NUM_RECORDS, NUM_VALIDATION = 2048, 512


def classification_data(n: int, seed: int) -> torch.utils.data.TensorDataset:
    """Labels from a fixed random linear map of the features: learnable, not trivial."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, FEATURES, generator=g)
    return torch.utils.data.TensorDataset(x, (x @ teacher).argmax(dim=1))


class AmpTrial(pytorch.PyTorchTrial):
    """An MLP with dropout, trained under ``context.autocast()`` with a wrapped GradScaler."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.context = context
        hidden = int(context.get_hparams().get("hidden", 256))
        self.model = context.wrap_model(
            nn.Sequential(
                nn.Linear(FEATURES, hidden),
                nn.ReLU(),
                nn.Dropout(0.1),
                nn.Linear(hidden, CLASSES),
            )
        )
        self.opt = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=context.get_hparam("lr"), momentum=0.9)
        )
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cuda"))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            classification_data(NUM_RECORDS, 0),
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            classification_data(NUM_VALIDATION, 1),
            batch_size=self.context.get_per_slot_batch_size(),
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        with self.context.autocast():
            logits = self.model(x)
            loss = nn.functional.cross_entropy(logits, y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(
            self.opt,
            clip_grads=lambda params: torch.nn.utils.clip_grad_norm_(params, 5.0),
            scaler=self.scaler,
        )
        return {
            "loss": loss,
            "half_precision": float(logits.dtype == torch.float16),
            "loss_scale": self.scaler.get_scale(),
        }

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        with self.context.autocast():
            logits = self.model(x)
        return {
            "validation_loss": nn.functional.cross_entropy(logits.float(), y),
            "accuracy": (logits.argmax(dim=1) == y).float().mean(),
        }
