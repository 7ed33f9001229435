"""What goes into ``state_dict.pth``, and putting it back.

Besides weights and optimizer state the file holds every rank's RNG states and the training
position, so that a trial resumed from it continues bit for bit as if never stopped.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from det_hub.pytorch._callback import PyTorchCallback
from det_hub.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("det_hub.pytorch")

STATE_FILE = "state_dict.pth"

#: ``determined_version`` in the metadata of the Trainer's checkpoints: the Determined release
#: whose checkpoint layout these follow (``state_dict.pth`` with ``format``, ``framework`` and
#: ``steps_completed`` in the metadata), so that scripts reading Determined's keys find them.
#: det_hub's own version is ``det_hub.__version__``.
DETERMINED_VERSION = "0.38.0"


def capture_rng_state() -> dict[str, Any]:
    """The states of Python's ``random``, numpy's global RNG, torch's CPU and CUDA RNGs."""
    state: dict[str, Any] = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng_state` gave."""
    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
        else:
            logger.warning("checkpoint has CUDA RNG states of another GPU count; not restored")


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global RNG and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_state(
    context: PyTorchTrialContext,
    callbacks: dict[str, PyTorchCallback],
    rng_states: list[dict[str, Any]],
    trainer_state: dict[str, Any],
) -> dict[str, Any]:
    """The contents of ``state_dict.pth``.

    Args:
        context: Holds the wrapped models, optimizers, LR schedulers and scalers.
        callbacks: The trial's callbacks, by name.
        rng_states: Every rank's RNG states, by rank.
        trainer_state: The training position (batches trained, ...).
    """
    return {
        "models_state_dict": [m.state_dict() for m in context._unwrapped_models()],
        "optimizers_state_dict": [o.state_dict() for o in context.optimizers],
        "lr_schedulers_state_dict": [s.state_dict() for s in context.lr_schedulers],
        "scalers_state_dict": [s.state_dict() for s in context.scalers],
        "callbacks": {name: cb.state_dict() for name, cb in callbacks.items()},
        "rng_state": rng_states,
        "trainer_state": dict(trainer_state),
    }


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path / state_dict.pth``."""
    torch.save(state, path / STATE_FILE)


def load_state(path: Path) -> dict[str, Any]:
    """Read ``path / state_dict.pth``.

    Raises:
        FileNotFoundError: The checkpoint has no ``state_dict.pth``.
    """
    file = path / STATE_FILE
    if not file.exists():
        raise FileNotFoundError(f"checkpoint {path.name} has no {STATE_FILE}")
    # The file holds RNG states (tuples, numpy arrays), which weights_only loading refuses;
    # checkpoints are the experiment's own.
    loaded = torch.load(file, map_location="cpu", weights_only=False)
    if not isinstance(loaded, dict):
        raise ValueError(f"{file} does not hold a det_hub checkpoint")
    return loaded


def _check_count(what: str, saved: list[Any], have: int) -> None:
    if len(saved) != have:
        raise ValueError(
            f"the checkpoint holds {len(saved)} {what} but the trial wrapped {have}; "
            "wrap the same objects, in the same order, as the run that saved it"
        )


def apply_state(
    context: PyTorchTrialContext,
    callbacks: dict[str, PyTorchCallback],
    state: dict[str, Any],
    *,
    warm_start: bool = False,
) -> None:
    """Load weights, optimizer, scheduler, scaler and callback states and this rank's RNGs.

    With ``warm_start`` (a checkpoint of another trial) the RNG states are left alone: the
    trial keeps the randomness of its own seed.

    Raises:
        ValueError: The trial wrapped a different number of objects than the checkpoint holds.
    """
    models = list(context._unwrapped_models())
    _check_count("models", state["models_state_dict"], len(models))
    for model, model_state in zip(models, state["models_state_dict"], strict=True):
        model.load_state_dict(model_state)
    _check_count("optimizers", state["optimizers_state_dict"], len(context.optimizers))
    for opt, opt_state in zip(context.optimizers, state["optimizers_state_dict"], strict=True):
        opt.load_state_dict(opt_state)
    scheds = state["lr_schedulers_state_dict"]
    _check_count("LR schedulers", scheds, len(context.lr_schedulers))
    for sched, sched_state in zip(context.lr_schedulers, scheds, strict=True):
        sched.load_state_dict(sched_state)
    scalers = state.get("scalers_state_dict", [])
    _check_count("gradient scalers", scalers, len(context.scalers))
    for scaler, scaler_state in zip(context.scalers, scalers, strict=True):
        scaler.load_state_dict(scaler_state)
    saved_callbacks = state.get("callbacks", {})
    for name, cb in callbacks.items():
        if name in saved_callbacks:
            cb.load_state_dict(saved_callbacks[name])
        else:
            logger.warning("callback %r has no state in the checkpoint", name)
    if warm_start:
        return
    rng_states = state.get("rng_state") or []
    rank = context.distributed.rank
    if rank < len(rng_states):
        restore_rng_state(rng_states[rank])
    elif rng_states:
        logger.warning(
            "the checkpoint has RNG states of %d ranks; rank %d uses rank 0's",
            len(rng_states),
            rank,
        )
        restore_rng_state(rng_states[0])
