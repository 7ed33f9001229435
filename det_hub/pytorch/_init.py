"""``det_hub.pytorch.init()``: a :class:`PyTorchTrialContext` inside or outside a cluster."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

import det_hub.core as core
from det_hub.pytorch._checkpoint_state import seed_everything
from det_hub.pytorch._context import PyTorchTrialContext


def _local_seed(exp_conf: Mapping[str, Any] | None) -> int:
    reproducibility = (exp_conf or {}).get("reproducibility") or {}
    seed = reproducibility.get("experiment_seed") if isinstance(reproducibility, Mapping) else None
    return int(seed) if isinstance(seed, int) else 0


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: core.DistributedContext | None = None,
    checkpoint_storage: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """Make the context a :class:`PyTorchTrial` is built with; use it as a context manager.

    Inside a cluster (``DET_HUB_CLUSTER_INFO`` set) hyperparameters, config, seed and the
    checkpoint to resume from come from the cluster info, and ``hparams``/``exp_conf`` must be
    None. Outside one they are taken from the arguments, the seed from
    ``exp_conf["reproducibility"]["experiment_seed"]`` (0 when absent) and checkpoints go to
    ``checkpoint_storage`` (default ``./checkpoints``).

    Python's ``random``, numpy and torch are seeded with the trial seed before the context is
    given, so a trial built inside the ``with`` block starts from the same weights every time.

    Args:
        hparams: Hyperparameters, outside a cluster.
        exp_conf: The experiment config as a dict, outside a cluster.
        distributed: The ranks of a distributed job. When None and the process was started by
            a launcher of several workers (``WORLD_SIZE`` > 1, as
            ``python3 -m determined.launch.torch_distributed`` sets it), ``torch.distributed``
            is initialised (gloo on CPU, NCCL with CUDA) and the context is built from it with
            :meth:`~det_hub.core.DistributedContext.from_torch_distributed`, then taken down
            when the ``with`` block ends; otherwise one rank.
        checkpoint_storage: Outside a cluster, where checkpoints go.
        aggregation_frequency: Accepted for compatibility; only 1 is supported.
        enable_tensorboard_logging: What :meth:`PyTorchTrialContext.get_enable_tensorboard_logging`
            answers.

    Yields:
        The :class:`PyTorchTrialContext`.

    Raises:
        ValueError: ``hparams`` or ``exp_conf`` given inside a cluster, or an
            ``aggregation_frequency`` other than 1.
    """
    if aggregation_frequency != 1:
        raise ValueError("aggregation_frequency other than 1 is not supported")
    info = core.get_cluster_info()
    if info is not None and info.trial is not None:
        if hparams is not None or exp_conf is not None:
            raise ValueError(
                "inside a cluster hparams and exp_conf come from the master; pass neither"
            )
        trial = info.trial
        # TrialInfo keeps the config it was given; it is the experiment's validated config.
        config = dict(trial._config)
        kwargs: dict[str, Any] = {
            "hparams": trial.hparams,
            "exp_conf": config,
            "trial_seed": trial.trial_seed,
            "trial_id": trial.trial_id,
            "experiment_id": trial.experiment_id,
            "latest_checkpoint": trial.latest_checkpoint,
        }
    else:
        kwargs = {
            "hparams": dict(hparams or {}),
            "exp_conf": dict(exp_conf or {}),
            "trial_seed": _local_seed(exp_conf),
        }
    with contextlib.ExitStack() as stack:
        if distributed is not None:
            dist = distributed
        elif _launched_distributed():
            if torch.cuda.is_available():
                # NCCL binds each rank to its GPU; the device must be chosen before the group.
                local_rank = int(os.environ.get("LOCAL_RANK", "0"))
                torch.cuda.set_device(local_rank % torch.cuda.device_count())
            dist = stack.enter_context(core.DistributedContext.from_torch_distributed())
        else:
            dist = core.DistributedContext()
        if torch.cuda.is_available():
            torch.cuda.set_device(dist.local_rank % torch.cuda.device_count())
        seed_everything(kwargs["trial_seed"])
        with core.init(distributed=dist, checkpoint_storage=checkpoint_storage) as core_context:
            yield PyTorchTrialContext(
                core_context, enable_tensorboard_logging=enable_tensorboard_logging, **kwargs
            )


def _launched_distributed() -> bool:
    """Whether a launcher started this process as one of several workers."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        world = int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE={raw!r}: must be an integer") from None
    return world > 1 and "RANK" in os.environ
