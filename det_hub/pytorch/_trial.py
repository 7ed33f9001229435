"""``PyTorchTrial``: the class users subclass to describe a model's training."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import torch

from det_hub.pytorch._callback import PyTorchCallback
from det_hub.pytorch._context import PyTorchTrialContext
from det_hub.pytorch._data import DataLoader
from det_hub.pytorch._reducer import Reducer


class PyTorchTrial(abc.ABC):
    """A model's training, written as hooks that det_hub's :class:`Trainer` calls.

    Build and wrap models and optimizers in ``__init__``; implement the data loaders,
    :meth:`train_batch`, and one of :meth:`evaluate_batch` or :meth:`evaluate_full_dataset`.

    Args:
        context: The trial's :class:`PyTorchTrialContext`.
    """

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader | torch.utils.data.DataLoader:
        """The training data: a :class:`det_hub.pytorch.DataLoader` (sharded and resumable).

        A plain torch ``DataLoader`` is accepted too; it is neither sharded nor shuffled by
        det_hub, and resuming skips batches by reading them.
        """

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader | torch.utils.data.DataLoader:
        """The validation data, as for :meth:`build_training_data_loader`."""

    @abc.abstractmethod
    def train_batch(
        self, batch: Any, epoch_idx: int, batch_idx: int
    ) -> dict[str, Any] | torch.Tensor:
        """Train one batch and return its metrics (a dict, or the loss tensor alone).

        Args:
            batch: The batch, already on the context's device.
            epoch_idx: The epoch the batch belongs to.
            batch_idx: The number of batches trained before this one.
        """

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """Metrics of one validation batch; reduced with :meth:`evaluation_reducer`.

        ``batch_idx`` may be left out of an override's signature.
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither evaluate_batch() nor evaluate_full_dataset()"
        )

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader) -> dict[str, Any]:
        """Metrics of the whole validation set (runs on the chief alone)."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither evaluate_batch() nor evaluate_full_dataset()"
        )

    def evaluation_reducer(self) -> Reducer | Mapping[str, Reducer]:
        """How :meth:`evaluate_batch` metrics are reduced: one reducer or one per metric."""
        return Reducer.AVG

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks, by a name that stays the same between runs."""
        return {}

    def get_batch_length(self, batch: Any) -> int:
        """The number of records in ``batch``: the length of the first tensor found in it."""
        # Called once a batch: the common shapes (a tensor, a tuple or list of them) are tried
        # before Mapping, whose isinstance check costs an ABC lookup.
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() else 1
        if isinstance(batch, (list, tuple)) and batch:
            return self.get_batch_length(batch[0])
        if isinstance(batch, Mapping):
            return self.get_batch_length(next(iter(batch.values())))
        try:
            return len(batch)
        except TypeError:
            raise TypeError(
                f"cannot tell the length of a batch of type {type(batch).__name__}; "
                "override get_batch_length()"
            ) from None
