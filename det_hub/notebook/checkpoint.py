"""``det_hub.load_checkpoint``: a checkpoint's files, or the model a PyTorchTrial trained."""

from __future__ import annotations

import importlib
import io
import os
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub.client import Client, DetHubError, checkpoint_directory
from det_hub.config import names_trial_class
from det_hub.storage import check_uuid

if TYPE_CHECKING:
    import torch

    from det_hub.pytorch import PyTorchTrial

#: The file a PyTorchTrial checkpoint keeps its state in (``det_hub.pytorch.STATE_FILE``, named
#: again here so that a Core API checkpoint is told apart without importing torch).
STATE_FILE = "state_dict.pth"


def load_checkpoint(
    uuid: str, *, path: str | os.PathLike[str] | None = None, client: Client | None = None
) -> Path | torch.nn.Module | list[torch.nn.Module]:
    """Loads a checkpoint reported to the master.

    What comes back depends on what wrote the checkpoint:

    * A **PyTorchTrial** (its experiment's ``entrypoint`` is ``module:TrialClass`` and the
      checkpoint holds ``state_dict.pth``): the trained model. The experiment's context is
      fetched from the master and unpacked into a new temporary directory, the trial class is
      imported from it and built with the trial's hyperparameters and the experiment's config
      (as the trial itself was, but with no training), the checkpoint's weights are loaded into
      the model it wraps, and the model is returned in eval mode, on the device det_hub trains
      on (the first GPU when there is one, else the CPU). A trial that wraps several models
      gives a list of them, in the order it wrapped them.
    * Anything else (a **Core API** script): the checkpoint's directory, a :class:`~pathlib.Path`.

    Checkpoints in ``shared_fs`` storage are opened in place when ``path`` is None: the
    returned directory is the storage's own, to be read and not written. Checkpoints in ``s3``
    storage are downloaded into a new temporary directory then. With ``path``, the files are
    copied there first (and the directory returned is ``path``). Either way the files are
    checked against the sizes the master recorded when the checkpoint was saved.

    Loading a PyTorchTrial leaves Python's, numpy's and torch's random number generators as
    they were, though building the trial may draw from them.

    Args:
        uuid: The checkpoint's uuid.
        path: A directory to copy the checkpoint's files into (created when missing).
        client: The master's client (default: ``Client()``, from ``DET_HUB_MASTER`` and
            ``DET_HUB_TOKEN``).

    Raises:
        ValueError: ``uuid`` is not a uuid, or the checkpoint's storage type cannot be read
            from here.
        FileNotFoundError: The checkpoint's files are not where its storage says (for
            ``shared_fs``, the storage directory must be visible on this machine).
        det_hub.storage.CheckpointIntegrityError: A file is missing or of another size.
        MasterError: No such checkpoint (404), or another refusal by the master.
        MasterUnreachable: The master cannot be reached.
        det_hub.pytorch.EntrypointError: The trial class cannot be imported from the
            experiment's context.
    """
    check_uuid(uuid)
    owned = client is None
    client = client or Client()
    try:
        checkpoint = client.get_checkpoint(uuid)
        directory = checkpoint_directory(checkpoint, path)
        experiment = client.get_experiment(checkpoint.experiment_id)
        entrypoint = experiment.config.get("entrypoint")
        if not (STATE_FILE in checkpoint.resources and names_trial_class(entrypoint)):
            return directory
        trial = client.get_trial(checkpoint.trial_id)
        context = _unpack(experiment_context(client, experiment.id),
                          prefix=f"det_hub_experiment_{experiment.id}_")
    finally:
        if owned:
            client.close()
    trial_class = import_trial_class(entrypoint, context)
    return build_trained_model(trial_class, directory, hparams=trial.hparams,
                               exp_conf=experiment.config, workdir=context)


def experiment_context(client: Client, experiment_id: int) -> bytes:
    """The experiment's context archive (.tar.gz) as the master keeps it.

    Raises:
        DetHubError: The experiment has no context.
        MasterError, MasterUnreachable: As for any call of the client.
    """
    archive = client.experiment_context(experiment_id)
    if not archive:
        raise DetHubError(f"experiment {experiment_id} has no context to build its trial from")
    return archive


def _unpack(archive: bytes, *, prefix: str) -> Path:
    """Unpacks a context archive into a new temporary directory, kept for the modules
    imported from it."""
    target = Path(tempfile.mkdtemp(prefix=prefix))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(target, filter="data")
    return target


def import_trial_class(entrypoint: str, directory: Path) -> type[PyTorchTrial]:
    """Imports the trial class ``module:Class`` from the context unpacked in ``directory``.

    The notebook's own modules are left as they were: modules of the same name are set aside
    while importing and put back afterwards, and the context's modules are not left in
    ``sys.modules`` (the class keeps what it needs).

    Raises:
        det_hub.pytorch.EntrypointError: As :func:`det_hub.pytorch.load_trial_class`.
    """
    from det_hub.pytorch import load_trial_class

    top = entrypoint.partition(":")[0].split(".")[0]
    shadowed = {name: module for name, module in sys.modules.items()
                if name == top or name.startswith(top + ".")}
    for name in shadowed:
        del sys.modules[name]
    path_before = list(sys.path)
    importlib.invalidate_caches()
    try:
        return load_trial_class(entrypoint, directory)
    finally:
        sys.path[:] = path_before
        root = str(directory.resolve())
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if name == top or name.startswith(top + ".") or file.startswith(root + os.sep):
                del sys.modules[name]
        sys.modules.update(shadowed)


@contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def build_trained_model(
    trial_class: type[PyTorchTrial], directory: Path, *, hparams: dict[str, Any],
    exp_conf: dict[str, Any], workdir: Path,
) -> torch.nn.Module | list[torch.nn.Module]:
    """Builds ``trial_class`` with the trained state of the checkpoint in ``directory``, as
    :func:`det_hub.pytorch.load_trial_from_checkpoint_path` does, and gives its models.

    The hyperparameters and config are the master's for the checkpoint's trial and experiment,
    which checkpoints written before ``load_data.json`` do not record. The trial is built in
    ``workdir`` (its context), as it would be on an agent; nothing is trained.

    Returns:
        The wrapped model in eval mode, or a list when the trial wraps several.

    Raises:
        ValueError: The checkpoint holds other objects than the trial wraps.
    """
    from det_hub import pytorch

    with _working_directory(workdir):
        trial = pytorch.load_trial_from_checkpoint_path(
            directory, trial_class, hparams=hparams, exp_conf=exp_conf)
    models = list(trial.context.models)
    for model in models:
        model.eval()
    return models[0] if len(models) == 1 else models
