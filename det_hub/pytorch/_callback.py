"""Hooks into the training loop of a :class:`PyTorchTrial`."""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    """Override the hooks you need; every hook does nothing by default.

    Return callbacks from :meth:`PyTorchTrial.build_callbacks`, keyed by a name that stays the
    same between runs: a callback's :meth:`state_dict` is saved in checkpoints under it.
    Hooks run on every rank unless stated otherwise.
    """

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before anything else, with the batch training starts from and the checkpoint used."""

    def on_trial_shutdown(self) -> None:
        """When training ends, also after an error or preemption."""

    def on_training_start(self) -> None:
        """Before the first batch of this run (after any checkpoint is loaded)."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of epoch ``epoch_idx``."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of epoch ``epoch_idx``."""

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        """After each reporting period, with the averaged and the per-batch training metrics."""

    def on_validation_start(self) -> None:
        """Before a validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After a validation, with the reduced validation metrics."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is restored, with the loaded ``state_dict.pth`` contents."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After a checkpoint's files are written into ``checkpoint_dir`` (chief only)."""

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` gave."""
