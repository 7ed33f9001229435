"""Training PyTorch models on det_hub, with the names of Determined's ``determined.pytorch``.

A Determined trial runs after changing its import::

    from det_hub import pytorch

    class MyTrial(pytorch.PyTorchTrial):
        ...

    with pytorch.init(hparams={"global_batch_size": 32, "lr": 0.1}) as context:
        trial = MyTrial(context)
        pytorch.Trainer(trial, context).fit(max_length=pytorch.Epoch(1))
"""

from det_hub.pytorch import samplers
from det_hub.pytorch._callback import PyTorchCallback
from det_hub.pytorch._checkpoint_state import LOAD_DATA_FILE, STATE_FILE
from det_hub.pytorch._context import PyTorchExperimentalContext, PyTorchTrialContext
from det_hub.pytorch._data import (
    DataLoader,
    ShardedBatchSampler,
    TorchData,
    adapt_batch_sampler,
    data_length,
    to_device,
)
from det_hub.pytorch._init import init
from det_hub.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from det_hub.pytorch._lr_scheduler import LRScheduler
from det_hub.pytorch._reducer import MetricReducer, Reducer
from det_hub.pytorch._trainer import Trainer
from det_hub.pytorch._trial import PyTorchTrial
from det_hub.pytorch._trial_class import EntrypointError, load_trial_class
from det_hub.pytorch._units import Batch, Epoch, Record, TrainUnit

__all__ = [
    "LOAD_DATA_FILE",
    "STATE_FILE",
    "Batch",
    "CheckpointLoadContext",
    "DataLoader",
    "EntrypointError",
    "Epoch",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Record",
    "Reducer",
    "ShardedBatchSampler",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "adapt_batch_sampler",
    "data_length",
    "init",
    "load_trial_class",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_device",
]
