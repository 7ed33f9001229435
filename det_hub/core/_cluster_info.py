"""What a trial process knows about where it runs: the cluster-info file and the environment."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from det_hub.contract import ClusterInfoDocument, TrialInfoDocument
from det_hub.env_names import (
    ALLOCATION_ID_ENV,
    ALLOCATION_TOKEN_ENV,
    CLUSTER_INFO_ENV,
    MASTER_ENV,
)


@dataclass(frozen=True)
class TrialInfo:
    """The trial this process trains.

    Attributes:
        trial_id: The trial's id.
        experiment_id: The experiment's id.
        trial_seed: The seed the searcher chose for this trial.
        hparams: The trial's hyperparameter values.
        steps_completed: Steps the trial had completed when this allocation started.
        latest_checkpoint: The uuid of the checkpoint to resume from, or None.
    """

    trial_id: int
    experiment_id: int
    trial_seed: int
    hparams: dict[str, Any]
    steps_completed: int = 0
    latest_checkpoint: str | None = None
    _config: dict[str, Any] = field(default_factory=dict)

    @property
    def user_data(self) -> dict[str, Any]:
        """The config's free-form ``data`` section, as Determined's ``user_data``."""
        data = self._config.get("data")
        return dict(data) if isinstance(data, dict) else {}

    @classmethod
    def from_dict(cls, raw: TrialInfoDocument) -> TrialInfo:
        return cls(
            trial_id=int(raw["trial_id"]),
            experiment_id=int(raw["experiment_id"]),
            trial_seed=int(raw.get("trial_seed") or 0),
            hparams=dict(raw.get("hparams") or {}),
            steps_completed=int(raw.get("steps_completed") or 0),
            latest_checkpoint=raw.get("latest_checkpoint") or None,
            _config=dict(raw.get("config") or {}),
        )


@dataclass(frozen=True)
class ClusterInfo:
    """Everything the master told this process, read from ``DET_HUB_CLUSTER_INFO``.

    Attributes:
        master_url: Where the master is (``DET_HUB_MASTER`` wins over the file when set).
        allocation_id: This allocation's id (``"7.0"``).
        task_id: The task's id (``"trial-7"``).
        task_type: ``"TRIAL"`` for trials.
        cluster_id: The cluster's id.
        agent_id: The agent the allocation runs on.
        slot_ids: The slots given to this process.
        container_addrs: Addresses of the containers of this allocation, chief first.
        container_rank: The index of this container in ``container_addrs`` (0 on the chief's).
        container_slot_counts: The number of slots of each container, in the same order.
        master_cert_name: The name on the master's TLS certificate, when the master says one.
        master_cert_file: The file of the master's TLS certificate, or ``"noverify"``.
        trial: The trial's details, or None for tasks that are not trials.
        checkpoint_storage: The experiment's ``checkpoint_storage`` config.
        session_token: The allocation token (``DET_HUB_ALLOCATION_TOKEN``).
    """

    master_url: str
    allocation_id: str
    task_id: str
    task_type: str = "TRIAL"
    cluster_id: str = ""
    agent_id: str = ""
    slot_ids: list[int] = field(default_factory=list)
    container_addrs: list[str] = field(default_factory=list)
    container_rank: int = 0
    container_slot_counts: list[int] = field(default_factory=list)
    master_cert_name: str | None = None
    master_cert_file: str | None = None
    trial: TrialInfo | None = None
    checkpoint_storage: dict[str, Any] = field(default_factory=dict)
    session_token: str | None = field(default=None, repr=False)

    @property
    def latest_checkpoint(self) -> str | None:
        """The checkpoint to resume from, or None when the trial starts fresh."""
        return self.trial.latest_checkpoint if self.trial is not None else None

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's ``data`` section; empty for tasks that are not trials."""
        return self.trial.user_data if self.trial is not None else {}

    @property
    def gpu_uuids(self) -> list[str]:
        """The UUIDs of the GPUs given to this container (empty without GPUs).

        Asked of ``nvidia-smi`` for the devices ``CUDA_VISIBLE_DEVICES`` names, as the agent
        sets it from :attr:`slot_ids`.
        """
        return _visible_gpu_uuids()

    @classmethod
    def from_dict(cls, raw: ClusterInfoDocument,
                  env: dict[str, str] | None = None) -> ClusterInfo:
        """Build from the file's JSON object (the master's :class:`ClusterInfoDocument`), with
        the process environment filling gaps."""
        env = dict(os.environ) if env is None else env
        trial_raw = raw.get("trial")
        slot_ids = [int(s) for s in raw.get("slot_ids") or []]
        addrs = [str(a) for a in raw.get("container_addrs") or []]
        # Older masters did not write the slot counts; a single container holds all its slots.
        slot_counts = [int(n) for n in raw.get("container_slot_counts") or []]
        if not slot_counts and len(addrs) <= 1:
            slot_counts = [len(slot_ids)]
        return cls(
            master_url=env.get(MASTER_ENV) or str(raw.get("master_url") or ""),
            allocation_id=str(raw.get("allocation_id") or env.get(ALLOCATION_ID_ENV) or ""),
            task_id=str(raw.get("task_id") or ""),
            task_type=str(raw.get("task_type") or "TRIAL"),
            cluster_id=str(raw.get("cluster_id") or ""),
            agent_id=str(raw.get("agent_id") or ""),
            slot_ids=slot_ids,
            container_addrs=addrs,
            container_rank=int(raw.get("container_rank") or 0),
            container_slot_counts=slot_counts,
            master_cert_name=raw.get("master_cert_name") or None,
            master_cert_file=raw.get("master_cert_file") or None,
            trial=TrialInfo.from_dict(trial_raw) if isinstance(trial_raw, dict) else None,
            checkpoint_storage=dict(raw.get("checkpoint_storage") or {}),
            session_token=env.get(ALLOCATION_TOKEN_ENV),
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ClusterInfo:
        """Read a cluster-info file.

        Raises:
            ValueError: The file is not a JSON object or lacks a required field.
        """
        text = Path(path).read_text(encoding="utf-8")
        try:
            raw: ClusterInfoDocument = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: cluster-info file is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: cluster-info file must hold a JSON object")
        try:
            return cls.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad cluster-info file: {exc!r}") from exc


def _visible_gpu_uuids() -> list[str]:
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    by_index: dict[str, str] = {}
    for line in out.splitlines():
        index, _, uuid = (part.strip() for part in line.partition(","))
        if uuid:
            by_index[index] = uuid
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(by_index.values())
    # Entries are indices or UUIDs; an empty variable hides every GPU.
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return [by_index.get(v, v) for v in wanted if v in by_index or v.startswith("GPU-")]


def get_cluster_info() -> ClusterInfo | None:
    """The cluster info of this process, or None when it does not run on a det_hub cluster.

    Reads the file named by ``DET_HUB_CLUSTER_INFO`` (each call reads it again; it is small).
    """
    path = os.environ.get(CLUSTER_INFO_ENV)
    if not path:
        return None
    return ClusterInfo.from_file(path)
