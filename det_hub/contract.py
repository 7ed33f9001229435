"""What the master hands a task at start, as the two sides must agree on it: the cluster-info
document (the other half is the environment, whose names are in :mod:`det_hub.env_names`).

The master writes the document (:class:`det_hub.service.launch.Launcher` builds its common
part, :class:`det_hub.service.cluster.Cluster` adds where the task runs) as
``CLUSTER_INFO_FILE`` next to the task, and names the file in ``DET_HUB_CLUSTER_INFO``;
training code reads it back (``det_hub.core.get_cluster_info()``). Both sides type it with
these definitions, so a field added or renamed on one side shows on the other.
"""

from __future__ import annotations

from typing import Any, TypedDict

#: The name of the cluster-info file in a task's directory.
CLUSTER_INFO_FILE = "cluster_info.json"


class TrialInfoDocument(TypedDict):
    """The ``trial`` part of a trial's cluster info (``det_hub.core.TrialInfo`` reads it)."""

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    config: dict[str, Any]
    steps_completed: int
    latest_checkpoint: str | None


class ClusterInfoDocument(TypedDict, total=False):
    """A task's cluster info (``det_hub.core.ClusterInfo`` reads it). The launcher writes the
    fields up to ``checkpoint_storage``; the cluster adds the rest when the task is placed."""

    master_url: str
    cluster_id: str
    task_id: str
    task_type: str
    container_addrs: list[str]
    trial: TrialInfoDocument
    checkpoint_storage: dict[str, Any] | None
    #: Added by the cluster: the allocation, where it runs, and its place among its nodes.
    allocation_id: str
    agent_id: str
    slot_ids: list[int]
    container_rank: int
    container_slot_counts: list[int]
    #: Read when present (Determined's cluster info has them); det_hub's master writes neither.
    master_cert_name: str | None
    master_cert_file: str | None


__all__ = ["CLUSTER_INFO_FILE", "ClusterInfoDocument", "TrialInfoDocument"]
