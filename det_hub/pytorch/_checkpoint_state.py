"""What goes into ``state_dict.pth``, and putting it back.

Besides weights and optimizer state the file holds every rank's RNG states and the training
position, so that a trial resumed from it continues bit for bit as if never stopped.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from det_hub.pytorch._callback import PyTorchCallback
from det_hub.pytorch._context import PyTorchTrialContext

logger = logging.getLogger("det_hub.pytorch")

STATE_FILE = "state_dict.pth"

#: The file of a checkpoint that says how to rebuild the trial that wrote it, as Determined's
#: checkpoints do: ``trial_type``, ``trial_cls_spec`` (``"module:Class"``, or null when the
#: class cannot be imported by name), ``trial_in_main``, ``is_trainer``, ``hparams`` and
#: ``experiment_config``. :func:`det_hub.pytorch.load_trial_from_checkpoint_path` reads it.
LOAD_DATA_FILE = "load_data.json"

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


def trial_class_spec(trial_class: type) -> tuple[str | None, bool]:
    """How to import ``trial_class`` by name: ``("module:Class", defined_in_main)``.

    A class of the script being run (module ``__main__``) is named after the script's module:
    the ``-m`` module it was run as, or its path relative to the working directory
    (``python3 train.py`` gives ``train``, ``python3 sub/train.py`` gives ``sub.train``),
    or its file name when it lies elsewhere. The spec is None when there is no name to import
    the class by: a class defined in a function, or in an interactive session or notebook.
    """
    qualname = trial_class.__qualname__
    if "<locals>" in qualname:
        return None, False
    module = trial_class.__module__
    if module != "__main__":
        return f"{module}:{qualname}", False
    main = sys.modules.get("__main__")
    main_spec = getattr(main, "__spec__", None)
    name = getattr(main_spec, "name", None)
    if name and name != "__main__":
        return f"{name}:{qualname}", True
    file = getattr(main, "__file__", None)
    if not file or not str(file).endswith(".py"):
        return None, True
    script = Path(file).resolve()
    try:
        parts = script.with_suffix("").relative_to(Path.cwd().resolve()).parts
    except ValueError:
        parts = (script.stem,)
    if not all(part.isidentifier() for part in parts):
        parts = (script.stem,)
    if not parts[-1].isidentifier():
        return None, True
    return f"{'.'.join(parts)}:{qualname}", True


def build_load_data(
    trial_class: type, hparams: Mapping[str, Any], exp_conf: Mapping[str, Any]
) -> dict[str, Any]:
    """The contents of ``load_data.json`` for a checkpoint of a ``trial_class`` trial."""
    spec, in_main = trial_class_spec(trial_class)
    return {
        "trial_type": "PyTorchTrial",
        "trial_cls_spec": spec,
        "trial_in_main": in_main,
        "is_trainer": True,
        "hparams": dict(hparams),
        "experiment_config": dict(exp_conf),
    }


def save_load_data(path: Path, load_data: Mapping[str, Any]) -> None:
    """Write ``load_data`` to ``path / load_data.json``.

    Values JSON cannot hold (hyperparameters given as Python objects outside a cluster) are
    written as their ``str()``, with a warning.
    """
    try:
        text = json.dumps(load_data, indent=2)
    except (TypeError, ValueError):
        logger.warning(
            "the trial's hyperparameters or experiment config hold values JSON cannot represent; "
            "%s records them as text", LOAD_DATA_FILE,
        )
        text = json.dumps(load_data, indent=2, default=str)
    (path / LOAD_DATA_FILE).write_text(text + "\n", encoding="utf-8")


def load_state(
    path: Path, torch_load_kwargs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Read ``path / state_dict.pth``.

    Args:
        path: The checkpoint's directory.
        torch_load_kwargs: Keyword arguments for ``torch.load``; by default the tensors are
            loaded onto the CPU (``map_location="cpu"``) and ``weights_only`` is False.

    Raises:
        FileNotFoundError: The checkpoint has no ``state_dict.pth``.
    """
    file = path / STATE_FILE
    if not file.exists():
        raise FileNotFoundError(f"checkpoint {path.name} has no {STATE_FILE}")
    # The file holds RNG states (tuples, numpy arrays), which weights_only loading refuses;
    # checkpoints are the experiment's own.
    kwargs: dict[str, Any] = {"map_location": "cpu", "weights_only": False}
    kwargs.update(torch_load_kwargs or {})
    loaded = torch.load(file, **kwargs)
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
