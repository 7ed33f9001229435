"""Rebuilding a trained :class:`PyTorchTrial` from its checkpoint directory, for inference.

The Trainer writes ``load_data.json`` into every checkpoint (the trial class as
``module:Class``, the hyperparameters and the experiment config), so a checkpoint's files are
enough to build the trial again and load its state; no master is asked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import det_hub.core as core
from det_hub.config import names_trial_class
from det_hub.pytorch._checkpoint_state import (
    LOAD_DATA_FILE,
    apply_state,
    capture_rng_state,
    load_state,
    restore_rng_state,
)
from det_hub.pytorch._context import PyTorchTrialContext
from det_hub.pytorch._init import _local_seed
from det_hub.pytorch._trial import PyTorchTrial
from det_hub.pytorch._trial_class import EntrypointError, load_trial_class
from det_hub.storage import SharedFSStorage

logger = logging.getLogger("det_hub.pytorch")

_METADATA_FILE = "metadata.json"


def _local_core_context() -> core.Context:
    """A Core API context of one rank that talks to no master, even inside a cluster.

    Metrics reported through it are logged; a checkpoint stored through it goes to a
    directory under the temporary directory.
    """
    dist = core.DistributedContext()
    train = core.TrainContext(distributed=dist)
    storage = SharedFSStorage(Path(tempfile.gettempdir()) / "det_hub-checkpoint-load")
    return core.Context(
        distributed=dist,
        train=train,
        checkpoint=core.CheckpointContext(distributed=dist, storage=storage),
        preempt=core.PreemptContext(distributed=dist),
        searcher=core.SearcherContext(distributed=dist, train=train),
        info=None,
    )


class CheckpointLoadContext(PyTorchTrialContext):
    """A :class:`PyTorchTrialContext` for building a trial outside training: to load its
    checkpoint, or to run the model it builds.

    :func:`load_trial_from_checkpoint_path` builds trials with one. It is made directly, with
    no ``with`` block, works the same inside and outside a cluster, and talks to no master:
    the trial sees the given hyperparameters and config, one rank, the device det_hub trains on
    (the first GPU when there is one, else the CPU), and the seed of
    ``exp_conf["reproducibility"]["experiment_seed"]`` (0 when absent). Nothing is seeded or
    trained; metrics reported through :attr:`core` are only logged. Train with
    :func:`det_hub.pytorch.init` instead.

    Build a trial whose constructor takes more than the context::

        from det_hub import pytorch
        import model_def

        context = pytorch.CheckpointLoadContext(hparams={"hidden": 64})
        trial = model_def.MyTrial(context, vocabulary=vocab)

    Args:
        hparams: The trial's hyperparameters (none when None).
        exp_conf: The experiment config as a dict (empty when None).
    """

    def __init__(
        self,
        hparams: Mapping[str, Any] | None = None,
        exp_conf: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            _local_core_context(),
            hparams=dict(hparams or {}),
            exp_conf=dict(exp_conf or {}),
            trial_seed=_local_seed(exp_conf),
        )


@dataclass(frozen=True)
class _Recorded:
    """What a checkpoint says about the trial that wrote it."""

    spec: str | None
    in_main: bool
    hparams: dict[str, Any] | None
    exp_conf: dict[str, Any]
    source: str | None


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {file}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{file} does not hold a JSON object")
    return data


def _dict_or_empty(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _recorded(directory: Path) -> _Recorded:
    load_data = directory / LOAD_DATA_FILE
    if load_data.is_file():
        data = _read_json(load_data)
        if data.get("trial_type", "PyTorchTrial") != "PyTorchTrial":
            logger.warning(
                "checkpoint %s was written by a %s, not a PyTorchTrial; loading it anyway",
                directory, data.get("trial_type"),
            )
        spec = data.get("trial_cls_spec")
        hparams = data.get("hparams")
        return _Recorded(
            spec=spec if isinstance(spec, str) and spec else None,
            in_main=bool(data.get("trial_in_main", False)),
            hparams=dict(hparams) if isinstance(hparams, Mapping) else {},
            exp_conf=_dict_or_empty(data.get("experiment_config")),
            source=LOAD_DATA_FILE,
        )
    metadata = directory / _METADATA_FILE
    if metadata.is_file():
        data = _read_json(metadata)
        # Determined's older layout: the hyperparameters and config in metadata.json, the
        # trial class as the config's entrypoint.
        if isinstance(data.get("hparams"), Mapping):
            exp_conf = _dict_or_empty(data.get("experiment_config"))
            entrypoint = exp_conf.get("entrypoint")
            spec = entrypoint.strip() if names_trial_class(entrypoint) else None
            return _Recorded(spec, False, dict(data["hparams"]), exp_conf, _METADATA_FILE)
    return _Recorded(None, False, None, {}, None)


def _import_trial_class(spec: str, in_main: bool) -> type[PyTorchTrial]:
    """Import ``module:Class`` from ``sys.path``, the working directory first."""
    if in_main:
        logger.warning(
            "the trial class was defined in the script that trained it; importing it as %s "
            "runs that script's top-level code", spec,
        )
    try:
        return load_trial_class(spec, Path.cwd())
    except EntrypointError as exc:
        raise ValueError(
            f"cannot import the trial class {spec!r} recorded in the checkpoint: {exc}. "
            "Run from the directory it is importable from, or pass the class as trial_class="
        ) from exc


def load_trial_from_checkpoint_path(
    path: str | os.PathLike[str],
    trial_class: type[PyTorchTrial] | None = None,
    trial_kwargs: Mapping[str, Any] | None = None,
    torch_load_kwargs: Mapping[str, Any] | None = None,
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> PyTorchTrial:
    """Rebuild the trial that wrote a checkpoint, with its trained state, from the checkpoint's
    files alone (download them first, e.g. with ``Checkpoint.download()``).

    The trial class is built with a :class:`CheckpointLoadContext` holding the hyperparameters
    and experiment config it was trained with (from the checkpoint's ``load_data.json``), then
    the state of the objects it wrapped is loaded into them: weights, optimizers, LR schedulers
    and gradient scalers. Models keep the mode the trial left them in; call ``.eval()`` on them
    for inference. Python's, numpy's and torch's random number generators are left as they
    were, though building the trial may draw from them.

    Without ``trial_class`` the class is imported by the ``module:Class`` name the checkpoint
    records, from ``sys.path`` with the working directory first: run from the directory the
    trial was trained in (its context directory), or pass the class.

    Checkpoints without ``load_data.json`` (written by det_hub before it recorded one, or by
    other code) are read the way Determined reads its older checkpoints: the hyperparameters
    and config from ``hparams`` and ``experiment_config`` in ``metadata.json`` and the class
    from the config's ``entrypoint``, when they are there. When they are not, ``trial_class``
    must be given, and ``hparams`` (and ``exp_conf``) where they are known elsewhere (the
    master keeps every trial's); without them the trial is built with no hyperparameters (a
    warning says so).

    Args:
        path: The checkpoint's directory.
        trial_class: The :class:`PyTorchTrial` subclass to build, instead of the one recorded.
        trial_kwargs: More keyword arguments for the trial class, after the context.
        torch_load_kwargs: Keyword arguments for ``torch.load`` (default
            ``map_location="cpu"``, ``weights_only=False``).
        hparams: The hyperparameters to build the trial with, instead of those recorded.
        exp_conf: The experiment config to build the trial with, as a dict, instead of the one
            recorded.
        **kwargs: Deprecated: ``torch.load`` keyword arguments given directly; use
            ``torch_load_kwargs``.

    Returns:
        The trial, e.g. ``trial.model`` for a trial that keeps its model there.

    Raises:
        FileNotFoundError: ``path`` is not a directory, or the checkpoint has no
            ``state_dict.pth``.
        ValueError: No ``trial_class`` is given and the checkpoint records no importable one
            (the message names the recorded ``module:Class``), ``torch_load_kwargs`` and
            ``**kwargs`` are both given, or the trial wraps other objects than the checkpoint
            holds.
    """
    if kwargs:
        if torch_load_kwargs:
            raise ValueError("pass torch.load arguments in torch_load_kwargs or as keywords, "
                             "not both")
        warnings.warn(
            "passing torch.load arguments to load_trial_from_checkpoint_path() as keywords is "
            "deprecated; pass them as torch_load_kwargs",
            FutureWarning,
            stacklevel=2,
        )
        torch_load_kwargs = kwargs
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory {str(directory)!r} does not exist")
    recorded = _recorded(directory)
    if trial_class is None:
        if recorded.source is None:
            raise ValueError(
                f"checkpoint {directory} has no {LOAD_DATA_FILE}: it does not say which trial "
                "class wrote it or with which hyperparameters (det_hub records them in "
                "checkpoints the PyTorch Trainer writes). Pass the class as trial_class=; its "
                "hyperparameters cannot be known from the checkpoint, so it is then built with "
                "none unless they are passed as hparams="
            )
        if recorded.spec is None:
            raise ValueError(
                f"checkpoint {directory} records no importable trial class (it was defined in "
                "a function, a notebook or an interactive session); pass it as trial_class="
            )
    state = load_state(directory, torch_load_kwargs)
    if hparams is None and recorded.hparams is None:
        logger.warning(
            "checkpoint %s records no hyperparameters (no %s); building %s with none",
            directory, LOAD_DATA_FILE, getattr(trial_class, "__name__", trial_class),
        )
    path_before = list(sys.path)
    rng = capture_rng_state()
    try:
        if trial_class is None:
            assert recorded.spec is not None
            trial_class = _import_trial_class(recorded.spec, recorded.in_main)
        context = CheckpointLoadContext(
            recorded.hparams if hparams is None else hparams,
            recorded.exp_conf if exp_conf is None else exp_conf,
        )
        trial = trial_class(context, **dict(trial_kwargs or {}))
        # The RNG states saved for resuming training are not this process's business here.
        apply_state(context, {}, state, warm_start=True)
    finally:
        restore_rng_state(rng)
        sys.path[:] = path_before
    return trial


__all__ = ["CheckpointLoadContext", "load_trial_from_checkpoint_path"]
