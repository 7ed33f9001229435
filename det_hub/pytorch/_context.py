"""``PyTorchTrialContext``: what a trial uses to build its model, optimizers and steps."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

import det_hub.core as core
from det_hub.config import ExperimentConfig, parse_experiment_config
from det_hub.pytorch._data import move_to_device
from det_hub.pytorch._lr_scheduler import LRScheduler
from det_hub.pytorch._reducer import MetricReducer

logger = logging.getLogger("det_hub.pytorch")


def _device_for(distributed: core.DistributedContext) -> torch.device:
    if torch.cuda.is_available():
        index = distributed.local_rank % torch.cuda.device_count()
        return torch.device("cuda", index)
    return torch.device("cpu")


class _WrappedReducer:
    def __init__(
        self, reducer: MetricReducer, name: str | None, for_training: bool, for_validation: bool
    ) -> None:
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation


class PyTorchExperimentalContext:
    """``context.experimental``: Determined's experimental switches, as far as they apply here."""

    def use_amp(self) -> None:
        """Not available: wrap the forward pass in ``context.autocast()`` and pass a wrapped
        ``torch.amp.GradScaler`` to ``step_optimizer`` instead.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError(
            "context.experimental.use_amp(): automatic mixed precision is not applied for you; "
            "use context.autocast() with context.wrap_scaler(torch.amp.GradScaler())"
        )

    def disable_auto_to_device(self) -> None:
        """Not available: batches are always moved to the trial's device.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError(
            "context.experimental.disable_auto_to_device(): batches are always moved to "
            "context.device"
        )

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow data loaders det_hub cannot make resumable: it checks none, so nothing changes."""


class PyTorchTrialContext:
    """Everything a :class:`PyTorchTrial` needs from det_hub; made by :func:`det_hub.pytorch.init`.

    Register models, optimizers, LR schedulers and AMP scalers with the ``wrap_*`` methods so
    that det_hub moves them to the device, distributes them and saves them in checkpoints.

    Attributes:
        distributed: The ranks of the job (:class:`det_hub.core.DistributedContext`).
        models: The wrapped models, in the order they were wrapped.
        optimizers: The wrapped optimizers.
        lr_schedulers: The wrapped LR schedulers.
        scalers: The wrapped AMP gradient scalers.
    """

    def __init__(
        self,
        core_context: core.Context,
        *,
        hparams: Mapping[str, Any],
        exp_conf: Mapping[str, Any] | None = None,
        trial_seed: int = 0,
        trial_id: int = 0,
        experiment_id: int = 0,
        latest_checkpoint: str | None = None,
        device: torch.device | None = None,
        enable_tensorboard_logging: bool = True,
    ) -> None:
        self._core = core_context
        self._enable_tensorboard_logging = enable_tensorboard_logging
        self._tensorboard_writer: Any = None
        self.experimental = PyTorchExperimentalContext()
        self.distributed = core_context.distributed
        self._hparams = dict(hparams)
        self._exp_conf = dict(exp_conf or {})
        self._parsed_conf: ExperimentConfig | None = None
        self._trial_seed = trial_seed
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._latest_checkpoint = latest_checkpoint
        self._device = device or _device_for(self.distributed)
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.scalers: list[Any] = []
        self._reducers: list[_WrappedReducer] = []
        self._stepped_scalers: list[Any] = []
        self._stop_requested = False
        self._to_device_warned: set[type] = set()
        self._batch_idx = 0
        self._epoch_len: int | None = None

    # --- identity and configuration ----------------------------------------------------
    @property
    def core(self) -> core.Context:
        """The Core API context underneath."""
        return self._core

    @property
    def device(self) -> torch.device:
        """The device this rank trains on: ``cuda:<local rank>`` with GPUs, else the CPU."""
        return self._device

    def get_hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters."""
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter's value.

        Raises:
            ValueError: No hyperparameter ``name``; the message lists the ones there are.
        """
        if name not in self._hparams:
            raise ValueError(
                f"hyperparameter {name!r} not found; the trial has: "
                + (", ".join(sorted(self._hparams)) or "none")
            )
        return self._hparams[name]

    def get_global_batch_size(self) -> int:
        """The ``global_batch_size`` hyperparameter: records per optimizer step over all ranks.

        Raises:
            ValueError: The hyperparameter is missing or not a positive integer.
        """
        value = self.get_hparam("global_batch_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"hyperparameter global_batch_size must be an integer >= 1: {value!r}")
        return value

    def get_per_slot_batch_size(self) -> int:
        """The batch size of each rank: the global batch size divided by the number of ranks.

        Raises:
            ValueError: The global batch size is smaller than the number of ranks.
        """
        size = self.distributed.size
        global_batch = self.get_global_batch_size()
        if global_batch < size:
            raise ValueError(
                f"global_batch_size {global_batch} is smaller than the {size} ranks training"
            )
        if global_batch % size:
            logger.warning(
                "global_batch_size %d is not divisible by %d ranks; each rank takes %d",
                global_batch,
                size,
                global_batch // size,
            )
        return global_batch // size

    def get_trial_id(self) -> int:
        """The trial's id (0 outside a cluster)."""
        return self._trial_id

    def get_experiment_id(self) -> int:
        """The experiment's id (0 outside a cluster)."""
        return self._experiment_id

    def get_trial_seed(self) -> int:
        """The seed of this trial's randomness."""
        return self._trial_seed

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment config as a dict (empty outside a cluster unless one was given)."""
        return dict(self._exp_conf)

    def get_data_config(self) -> dict[str, Any]:
        """The config's free-form ``data`` section."""
        data = self._exp_conf.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    def parsed_config(self) -> ExperimentConfig | None:
        """The experiment config, validated, or None when there is none."""
        if self._parsed_conf is None and self._exp_conf.get("searcher"):
            self._parsed_conf = parse_experiment_config(self._exp_conf)
        return self._parsed_conf

    def get_latest_checkpoint(self) -> str | None:
        """The checkpoint the trial resumes from, if any."""
        return self._latest_checkpoint

    def get_enable_tensorboard_logging(self) -> bool:
        """Whether reported metrics are also written as TensorBoard events (``init``'s
        ``enable_tensorboard_logging``)."""
        return self._enable_tensorboard_logging

    def get_tensorboard_path(self) -> Path:
        """The directory for this trial's TensorBoard event files.

        On the chief inside a cluster it is the directory det_hub uploads to the checkpoint
        storage; elsewhere a directory of this process under the temporary directory.
        """
        path = getattr(self._core.train, "_tensorboard_dir", None)
        if path is None:
            path = Path(tempfile.gettempdir()) / f"det_hub-tensorboard-{os.getpid()}"
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` into :meth:`get_tensorboard_path`,
        made on first use (needs the ``tensorboard`` package)."""
        if self._tensorboard_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard_writer = SummaryWriter(log_dir=str(self.get_tensorboard_path()))
        return self._tensorboard_writer

    def configure_apex_amp(self, *args: Any, **kwargs: Any) -> None:
        """Not available: NVIDIA Apex is not supported.

        Raises:
            NotImplementedError: Always; use :meth:`autocast` and :meth:`wrap_scaler`.
        """
        raise NotImplementedError(
            "PyTorchTrialContext.configure_apex_amp(): NVIDIA Apex is not supported; use "
            "context.autocast() with context.wrap_scaler(torch.amp.GradScaler())"
        )

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Not available: the trainer does not drive a ``torch.profiler`` for you.

        Raises:
            NotImplementedError: Always; run ``torch.profiler.profile`` in ``train_batch``.
        """
        raise NotImplementedError(
            "PyTorchTrialContext.set_profiler(): not supported; use torch.profiler.profile "
            "yourself and write its trace under context.get_tensorboard_path()"
        )

    # --- position in training ----------------------------------------------------------
    def _set_position(self, batch_idx: int, epoch_len: int) -> None:
        self._batch_idx = batch_idx
        self._epoch_len = epoch_len

    def current_train_batch(self) -> int:
        """The index of the batch being trained (batches trained before it)."""
        return self._batch_idx

    def is_epoch_start(self) -> bool:
        """Whether the batch being trained is the first of an epoch."""
        if self._epoch_len is None:
            raise RuntimeError("is_epoch_start() is only meaningful during train_batch()")
        return self._batch_idx % self._epoch_len == 0

    def is_epoch_end(self) -> bool:
        """Whether the batch being trained is the last of an epoch."""
        if self._epoch_len is None:
            raise RuntimeError("is_epoch_end() is only meaningful during train_batch()")
        return (self._batch_idx + 1) % self._epoch_len == 0

    def get_stop_requested(self) -> bool:
        """Whether :meth:`set_stop_requested` asked training to stop."""
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask det_hub to checkpoint and stop the trial early (seen at the next check)."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"stop_requested must be a bool, not {stop_requested!r}")
        self._stop_requested = stop_requested

    # --- wrapping ----------------------------------------------------------------------
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device and, with more than one rank, wrap it for DDP.

        Returns:
            The model to use in ``train_batch`` (a ``DistributedDataParallel`` when
            distributed; its ``.module`` is the original).
        """
        model = model.to(self._device)
        if self.distributed.size > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                raise RuntimeError(
                    "a distributed trial needs torch.distributed initialised; build the "
                    "DistributedContext with DistributedContext.from_torch_distributed()"
                )
            device_ids = [self._device.index] if self._device.type == "cuda" else None
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int = 1
    ) -> torch.optim.Optimizer:
        """Register ``optimizer`` (saved in checkpoints) and return it.

        Raises:
            ValueError: ``backward_passes_per_step`` other than 1 (not supported).
        """
        if backward_passes_per_step != 1:
            raise ValueError("backward_passes_per_step other than 1 is not supported")
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode,
        frequency: int = 1,
    ) -> LRScheduler:
        """Register a torch LR scheduler and say when det_hub steps it.

        Args:
            lr_scheduler: The torch scheduler.
            step_mode: ``STEP_EVERY_EPOCH``, ``STEP_EVERY_BATCH``, ``STEP_EVERY_OPTIMIZER_STEP``
                (stepped by :meth:`step_optimizer`) or ``MANUAL_STEP`` (you call ``step()``).
            frequency: Step every this many batches or epochs.

        Returns:
            The wrapper, whose ``step()`` steps the scheduler.
        """
        wrapped = LRScheduler(lr_scheduler, step_mode, frequency)
        self.lr_schedulers.append(wrapped)
        return wrapped

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register an AMP ``GradScaler`` (saved in checkpoints) and return it.

        Pass it to :meth:`step_optimizer` and scale losses with ``scaler.scale(loss)``;
        det_hub calls ``scaler.update()`` after each batch.
        """
        self.scalers.append(scaler)
        return scaler

    def wrap_reducer(
        self,
        reducer: MetricReducer,
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a custom :class:`MetricReducer`.

        Args:
            reducer: The reducer.
            name: The metric's name; None when ``cross_slot_reduce`` returns a dict of metrics.
            for_training: Reduce it at the end of each training reporting period.
            for_validation: Reduce it at the end of each validation.
        """
        if not isinstance(reducer, MetricReducer):
            raise TypeError(f"wrap_reducer() needs a MetricReducer, not {type(reducer).__name__}")
        self._reducers.append(_WrappedReducer(reducer, name, for_training, for_validation))
        return reducer

    # --- stepping ----------------------------------------------------------------------
    def to_device(self, obj: Any) -> Any:
        """``obj`` with every tensor inside it (dicts, lists, tuples) moved to :attr:`device`,
        as :func:`det_hub.pytorch.to_device` does; a type that cannot be moved is logged once
        per context."""
        return move_to_device(obj, self._device, self._to_device_warned)

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """Compute gradients of ``loss`` (scale it first with ``scaler.scale`` under AMP)."""
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterator[torch.nn.Parameter]], None] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Step ``optimizer``, optionally clipping gradients first and zeroing them after.

        Args:
            optimizer: A wrapped optimizer.
            clip_grads: Called with the optimizer's parameters before the step, e.g.
                ``lambda params: torch.nn.utils.clip_grad_norm_(params, 1.0)``.
            auto_zero_grads: Zero the gradients after the step.
            scaler: A wrapped ``GradScaler``: gradients are unscaled before clipping and the
                step goes through ``scaler.step``.
        """
        if optimizer not in self.optimizers:
            raise ValueError("step_optimizer() needs an optimizer registered with wrap_optimizer()")
        if scaler is not None:
            if clip_grads is not None:
                scaler.unscale_(optimizer)
                clip_grads(self._params(optimizer))
            scaler.step(optimizer)
            if not any(s is scaler for s in self._stepped_scalers):
                self._stepped_scalers.append(scaler)
        else:
            if clip_grads is not None:
                clip_grads(self._params(optimizer))
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for sched in self.lr_schedulers:
            if (
                sched.step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP
                and getattr(sched.scheduler, "optimizer", None) is optimizer
            ):
                sched.step()

    @staticmethod
    def _params(optimizer: torch.optim.Optimizer) -> Iterator[torch.nn.Parameter]:
        for group in optimizer.param_groups:
            yield from group["params"]

    def _update_scalers(self) -> None:
        for scaler in self._stepped_scalers:
            scaler.update()
        self._stepped_scalers.clear()

    def autocast(
        self, dtype: torch.dtype | None = None, enabled: bool = True
    ) -> contextlib.AbstractContextManager[Any]:
        """Mixed precision for the forward pass.

        On CUDA this is ``torch.autocast("cuda")`` (float16 unless ``dtype`` says otherwise).
        On the CPU mixed precision is used only when a ``dtype`` is asked for (e.g.
        ``torch.bfloat16``), since it is slower than float32 on most CPUs.
        """
        if not enabled:
            return contextlib.nullcontext()
        if self._device.type == "cuda":
            return torch.autocast("cuda", dtype=dtype or torch.float16)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=dtype)

    def _reducers_for(self, *, training: bool) -> list[_WrappedReducer]:
        return [r for r in self._reducers if (r.for_training if training else r.for_validation)]

    def _unwrapped_models(self) -> Iterable[torch.nn.Module]:
        for model in self.models:
            yield (
                model.module
                if hasattr(model, "module")
                and isinstance(model, torch.nn.parallel.DistributedDataParallel)
                else model
            )
