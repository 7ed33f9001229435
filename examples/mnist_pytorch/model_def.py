"""Determined's MNIST quickstart trial, running on det_hub.

A small CNN trained with Adadelta on MNIST. The IDX files are read from the ``data_dir`` named
in the config's ``data`` section (or hyperparameters), by default the host's data cache, and are
prepared there once per host when missing (see ``data.py``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import data
import torch
import yaml
from torch import nn

from det_hub import core, pytorch
from det_hub.pytorch import DataLoader, PyTorchTrial, PyTorchTrialContext, TorchData


def build_model(
    n_filters1: int, n_filters2: int, dropout1: float, dropout2: float
) -> nn.Sequential:
    """The quickstart CNN: two 3x3 convolutions, max-pooling, and two linear layers.

    A 28x28 image leaves the convolutions as 24x24 and the pooling as 12x12, hence the
    ``144 * n_filters2`` inputs of the first linear layer.
    """
    return nn.Sequential(
        nn.Conv2d(1, n_filters1, 3, 1),
        nn.ReLU(),
        nn.Conv2d(n_filters1, n_filters2, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(dropout1),
        nn.Flatten(),
        nn.Linear(144 * n_filters2, 128),
        nn.ReLU(),
        nn.Dropout(dropout2),
        nn.Linear(128, 10),
        nn.LogSoftmax(dim=1),
    )


class MNistTrial(PyTorchTrial):
    """MNIST digit classification; hyperparameters as in ``const.yaml``."""

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context
        self.data_dir = (
            context.get_data_config().get("data_dir")
            or context.get_hparams().get("data_dir")
            or data.default_data_dir()
        )
        self.model = self.context.wrap_model(
            build_model(
                n_filters1=int(context.get_hparam("n_filters1")),
                n_filters2=int(context.get_hparam("n_filters2")),
                dropout1=float(context.get_hparam("dropout1")),
                dropout2=float(context.get_hparam("dropout2")),
            )
        )
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(
                self.model.parameters(), lr=float(context.get_hparam("learning_rate"))
            )
        )

    def build_training_data_loader(self) -> DataLoader:
        train_set = data.get_dataset(self.data_dir, train=True)
        return DataLoader(
            train_set, batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> DataLoader:
        test_set = data.get_dataset(self.data_dir, train=False)
        return DataLoader(test_set, batch_size=self.context.get_per_slot_batch_size())

    def train_batch(
        self, batch: TorchData, epoch_idx: int, batch_idx: int
    ) -> dict[str, torch.Tensor]:
        images, labels = batch
        output = self.model(images)
        loss = torch.nn.functional.nll_loss(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: TorchData, batch_idx: int | None = None) -> dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        validation_loss = torch.nn.functional.nll_loss(output, labels).item()
        predicted = output.argmax(dim=1)
        accuracy = predicted.eq(labels).sum().item() / len(images)
        return {"validation_loss": validation_loss, "accuracy": accuracy}


def _const_hparams(config_file: Path) -> dict[str, Any]:
    hparams = yaml.safe_load(config_file.read_text())["hyperparameters"]
    return {name: spec["val"] if isinstance(spec, dict) else spec for name, spec in hparams.items()}


def main() -> None:
    """Train with the Trainer API: ``python model_def.py [--batches N]``.

    On a cluster the master supplies hyperparameters and length; run locally, the constants
    of ``const.yaml`` are used and training stops after ``--batches`` batches (one epoch when
    not given).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=None, help="local run length in batches")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(name)s: %(message)s")
    if core.get_cluster_info() is not None:
        with pytorch.init() as context:
            pytorch.Trainer(MNistTrial(context), context).fit()
        return
    here = Path(__file__).resolve().parent
    length = pytorch.Batch(args.batches) if args.batches else pytorch.Epoch(1)
    with pytorch.init(hparams=_const_hparams(here / "const.yaml")) as context:
        trial = MNistTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=length, validation_period=length)


if __name__ == "__main__":
    main()
