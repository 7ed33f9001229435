"""The Core API: what training code calls to report metrics, checkpoint, and obey the searcher.

Names follow Determined's Core API, so a Determined script runs after changing its import::

    import det_hub.core as core

    with core.init() as core_context:
        for op in core_context.searcher.operations():
            ...
"""

from det_hub.core._checkpoint import CheckpointContext, DownloadMode
from det_hub.core._cluster_info import ClusterInfo, TrialInfo, get_cluster_info
from det_hub.core._context import Context, TensorboardMode, init
from det_hub.core._distributed import DistributedContext
from det_hub.core._experimental import ExperimentalCoreContext
from det_hub.core._http import MasterError, MasterSession
from det_hub.core._preempt import PreemptContext, PreemptMode
from det_hub.core._profiler import ProfilerContext
from det_hub.core._searcher import SearcherContext, SearcherMode, SearcherOperation, Unit
from det_hub.core._train import EarlyExitReason, TrainContext

__all__ = [
    "CheckpointContext",
    "ClusterInfo",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "EarlyExitReason",
    "ExperimentalCoreContext",
    "MasterError",
    "MasterSession",
    "PreemptContext",
    "PreemptMode",
    "ProfilerContext",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "TrialInfo",
    "Unit",
    "get_cluster_info",
    "init",
]
