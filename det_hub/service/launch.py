"""What a task is started with: its launch spec, the cluster info and environment training code
reads, and the per-user directories of the data directory it writes to.

:class:`Launcher` builds the :class:`~det_hub.service.cluster.LaunchSpec` of a trial (from its
experiment) and of a command, notebook, shell or TensorBoard. What it writes into a task's
cluster info is a :class:`~det_hub.contract.ClusterInfoDocument`, the document
:mod:`det_hub.core` reads back.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub.agents import ContainerSpec
from det_hub.config import (
    CommandConfig,
    parse_command_config,
    parse_task_config,
)
from det_hub.config.resources import parse_size
from det_hub.contract import ClusterInfoDocument
from det_hub.defaults import DEFAULT_RESOURCE_POOL
from det_hub.env_names import (
    EXPERIMENT_ID_ENV,
    INGEST_URL_ENV,
    MASTER_ENV,
    NOTEBOOK_TOKEN_ENV,
    PROXY_PATH_ENV,
    SHELL_PUBLIC_KEY_ENV,
    TASK_ID_ENV,
    TASK_NUMBER_ENV,
    TASK_TYPE_ENV,
    TENSORBOARD_LOGDIRS_ENV,
    TENSORBOARD_STORAGES_ENV,
    TRIAL_ID_ENV,
)
from det_hub.service.cluster import Cluster, LaunchSpec
from det_hub.service.errors import BadRequest
from det_hub.service.experiment import LaunchRefused
from det_hub.service.jobs import experiment_job_id
from det_hub.service.task_paths import (
    CACHES,
    CHECKPOINTS,
    owner_checkpoint_dir,
    owner_dir,
    path_problems,
    resolved,
)
from det_hub.service.tasks import task_job_id
from det_hub.states import CheckpointState, TaskType
from det_hub.storage import remote_tensorboard, tensorboard_dir
from det_hub.store import Store

#: How many bytes of context archives :meth:`Launcher.experiment_context` keeps at most (the
#: latest experiment's, whatever its size).
CONTEXT_CACHE_BYTES = 64 << 20

if TYPE_CHECKING:
    from det_hub.config import ExperimentConfig
    from det_hub.service.auth import UserManager
    from det_hub.store import Checkpoint, Experiment, Task, Trial


class Launcher:
    """Builds launch specs (see the module's docstring).

    Args:
        store: The master's store.
        cluster: Which slot kinds a pool has, and whether a request can ever be placed.
        users: Who a user's tasks run as.
        master_url: The address tasks call the master at.
        base_url: The path the master serves under (a proxied task serves below it).
        data_dir: The master's data directory, holding each user's own directories.
        private_paths: Besides the data directory, what no task may have mounted.
    """

    def __init__(self, store: Store, cluster: Cluster, users: UserManager, *, master_url: str,
                 base_url: str, data_dir: Path, private_paths: Sequence[Path] = ()) -> None:
        self.store = store
        self.cluster = cluster
        self.users = users
        self.master_url = master_url
        self.base_url = base_url
        self.data_dir = Path(data_dir)
        #: What no task may mount (see :mod:`det_hub.service.task_paths`), resolved.
        self.private_paths = [resolved(str(p)) for p in (self.data_dir, *private_paths)]
        self.cluster_id = ""
        #: Where trials send their training metrics (the ingest workers), None: the master.
        self.ingest_url: str | None = None
        #: The context archives of the experiments whose trials were launched last, by
        #: experiment (id and creation time), most recent last (see :meth:`experiment_context`).
        self._contexts: collections.OrderedDict[tuple[int, Any], bytes | None] = \
            collections.OrderedDict()

    async def trial_spec(self, exp: Experiment, config: ExperimentConfig,
                         trial: Trial) -> LaunchSpec:
        """A trial's launch spec: its experiment's entrypoint (a trial class runs in the
        harness), environment and container, and the checkpoint it resumes or starts from.
        ``config`` is ``exp.config`` parsed.

        Raises:
            LaunchRefused: The trial cannot start: its warm-start checkpoint is gone, or its
                config would show it the master's private paths.
        """
        slots = config.resources.slots_per_trial
        argv = config.entrypoint_argv()
        if argv is None:
            # A trial class runs in the harness, one process per slot. `python3` is whatever
            # Python the agent runs tasks with (its own, or the container's).
            argv = ["python3", "-m", "det_hub.exec.harness", str(config.entrypoint)]
            if slots > 1:
                argv = ["python3", "-m", "det_hub.launch.torch_distributed", "--", *argv]
        latest = trial.latest_checkpoint
        if latest is None:
            try:
                source = await self.warm_start_checkpoint(exp.config)
            except BadRequest as e:
                # The source was there when the experiment was created, and is gone now.
                raise LaunchRefused("; ".join(d["message"] for d in e.details)) from None
            latest = source.uuid if source is not None else None
        env = config.environment.variables_for(
            "cuda" if "cuda" in self.cluster.slot_kinds(exp.resource_pool) else "cpu")
        env.update({
            MASTER_ENV: self.master_url,
            TRIAL_ID_ENV: str(trial.id),
            EXPERIMENT_ID_ENV: str(exp.id),
        })
        if self.ingest_url:
            env[INGEST_URL_ENV] = self.ingest_url
        info: ClusterInfoDocument = {
            "master_url": self.master_url, "cluster_id": self.cluster_id,
            "task_id": f"trial-{trial.id}", "task_type": "TRIAL",
            "container_addrs": ["127.0.0.1"],
            "trial": {
                "trial_id": trial.id, "experiment_id": exp.id, "trial_seed": trial.seed,
                "hparams": trial.hparams, "config": exp.config,
                "steps_completed": trial.steps_completed or 0,
                "latest_checkpoint": latest,
            },
            "checkpoint_storage": exp.config.get("checkpoint_storage"),
        }
        owner = await self.users.username(exp.owner_id)
        problems = self.path_problems(exp.config, owner)
        if problems:
            raise LaunchRefused("; ".join(f"{p['path']}: {p['message']}" for p in problems))
        storage = exp.config.get("checkpoint_storage") or {}
        if storage.get("host_path") == str(owner_checkpoint_dir(self.data_dir, owner)):
            await self.owner_dir(CHECKPOINTS, exp.owner_id)  # owned by who runs it now
        run_as, owner_is_admin = await self.users.task_identity(exp.owner_id)
        return LaunchSpec(
            run_as=run_as, owner_is_admin=owner_is_admin,
            data_cache=str(await self.owner_dir(CACHES, exp.owner_id)),
            trial_id=trial.id, experiment_id=exp.id, owner=owner,
            slots=slots, argv=argv, env=env, cluster_info=info,
            context=await self.experiment_context(exp),
            job_id=experiment_job_id(exp.id),
            container=container_spec(config), slurm=slurm_options(config))

    async def experiment_context(self, exp: Experiment) -> bytes | None:
        """An experiment's context archive, which never changes: read once for a run of its
        trials' launches rather than at each, keeping at most :data:`CONTEXT_CACHE_BYTES` of
        the latest experiments' archives. Kept by id and creation time: an id is never
        another experiment's, even where a database could give it again."""
        key = (exp.id, exp.created_at)
        if key in self._contexts:
            self._contexts.move_to_end(key)
            return self._contexts[key]
        context = await self.store.get_experiment_context(exp.id)
        self._contexts[key] = context
        while len(self._contexts) > 1 and sum(
                len(c or b"") for c in self._contexts.values()) > CONTEXT_CACHE_BYTES:
            self._contexts.popitem(last=False)
        return context

    async def task_spec(self, task: Task) -> LaunchSpec:
        """A command's, notebook's, shell's or TensorBoard's launch spec."""
        kind = TaskType(task.type)
        config = (parse_command_config(task.config) if kind is TaskType.COMMAND
                  else parse_task_config(task.config))
        env = config.environment.variables_for(
            "cuda" if "cuda" in self.cluster.slot_kinds(task.resource_pool) else "cpu")
        env.update({MASTER_ENV: self.master_url, TASK_ID_ENV: task_job_id(task),
                    TASK_TYPE_ENV: task.type})
        info: ClusterInfoDocument = {"master_url": self.master_url, "cluster_id": self.cluster_id,
                "task_id": task_job_id(task), "task_type": task.type,
                "container_addrs": ["127.0.0.1"]}
        container = container_spec(config)
        server = (task.details or {}).get("command") if kind is TaskType.HUB_SERVER else None
        if isinstance(config, CommandConfig):
            argv = config.argv()
        elif server:
            # The hub's single-user server, run here (a Slurm job on a Slurm pool): the hub's
            # environment for it under the master's own variables, which the wrapper needs.
            argv = ["python3", "-m", "det_hub.exec.hub_server", "--", *server]
            env = {**json.loads(task.secret or "{}"), **env}
            env[TASK_NUMBER_ENV] = str(task.id)
        elif kind.reserves_only:
            argv = []
        else:
            # What the task serves answers under the proxy's path for it.
            argv = ["python3", "-m", f"det_hub.exec.{kind.word}"]
            env[PROXY_PATH_ENV] = f"{self.base_url}proxy/{task.id}/"
            env[TASK_NUMBER_ENV] = str(task.id)
        if kind is TaskType.NOTEBOOK:
            env[NOTEBOOK_TOKEN_ENV] = task.secret or ""
        elif kind is TaskType.SHELL:
            env[SHELL_PUBLIC_KEY_ENV] = (task.details or {}).get("public_key", "")
        elif kind is TaskType.TENSORBOARD:
            logdirs, mounts = await self._tensorboard_logdirs(task)
            env[TENSORBOARD_LOGDIRS_ENV] = json.dumps(logdirs)
            remote = await self._tensorboard_storages(task)
            if remote:
                env[TENSORBOARD_STORAGES_ENV] = json.dumps(remote)
            container = dataclasses.replace(
                container, bind_mounts=[*container.bind_mounts, *mounts])
        run_as, owner_is_admin = await self.users.task_identity(task.owner_id)
        return LaunchSpec(
            run_as=run_as, owner_is_admin=owner_is_admin,
            data_cache=str(await self.owner_dir(CACHES, task.owner_id)),
            task_id=task.id, owner=await self.users.username(task.owner_id),
            slots=config.resources.slots, argv=argv, env=env, cluster_info=info,
            context=await self.store.get_task_context(task.id), job_id=task_job_id(task),
            container=container, slurm=slurm_options(config),
            reserve_only=kind.reserves_only and not server,
            # A hub server's idleness is the hub's to judge (its idle culler stops it).
            idle_timeout=None if kind.reserves_only else config.idle_timeout_seconds,
            idle_means="no output" if kind is TaskType.COMMAND
            else "no output and no use through the proxy")

    async def owner_dir(self, kind: str, user_id: int) -> Path:
        """A user's own directory of the data directory (their default checkpoint storage,
        their data cache), made (0700) when missing; where the master runs as root, owned by
        the account their tasks run as."""
        path = owner_dir(self.data_dir, kind, await self.users.username(user_id))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        run_as = await self.users.run_as(user_id)
        if os.geteuid() == 0:
            stat = path.stat()
            if (stat.st_uid, stat.st_gid) != run_as:
                # A user linked since: new checkpoints are written by the new account.
                os.chown(path, *run_as)
        return path

    def path_problems(self, config: dict[str, Any], username: str) -> list[dict[str, str]]:
        """Where a config's storage or bind mounts would show its tasks the master's private
        paths (see :mod:`det_hub.service.task_paths`)."""
        allowed = resolved(str(owner_checkpoint_dir(self.data_dir, username)))
        return path_problems(config, private=self.private_paths, allowed=allowed)

    async def warm_start_checkpoint(self, config: dict[str, Any]) -> Checkpoint | None:
        """The checkpoint every new trial starts from: ``searcher.source_checkpoint_uuid``, or
        the latest checkpoint of ``searcher.source_trial_id``; None without either.

        Raises:
            BadRequest: The source does not exist or has no completed checkpoint.
        """
        searcher = config["searcher"]
        uuid, trial_id = searcher.get("source_checkpoint_uuid"), searcher.get("source_trial_id")
        if uuid is None and trial_id is None:
            return None
        field = "source_checkpoint_uuid" if uuid is not None else "source_trial_id"

        def refused(message: str) -> BadRequest:
            return BadRequest("the experiment config cannot run on this master",
                              [{"path": f"searcher.{field}", "message": message}])

        if uuid is None:
            trial = await self.store.get_trial(int(trial_id))
            if trial is None:
                raise refused(f"trial {trial_id} does not exist")
            uuid = trial.latest_checkpoint
            if uuid is None:
                raise refused(f"trial {trial_id} has no checkpoint to start from")
        checkpoint = await self.store.get_checkpoint(str(uuid))
        if checkpoint is None or checkpoint.state != CheckpointState.COMPLETED.value:
            raise refused(f"checkpoint {uuid} does not exist or is not complete")
        return checkpoint

    def placement_problems(self, pool: str, slots: int, slots_path: str) -> list[dict[str, str]]:
        """Why a job asking for ``slots`` (set at ``slots_path``) in ``pool`` can never be
        placed, as config problems; none when it can."""
        pool = pool or DEFAULT_RESOURCE_POOL
        why = self.cluster.check_request(pool, slots)
        if why is None:
            return []
        path = "resources.resource_pool" if pool not in self.cluster.pools else slots_path
        return [{"path": path, "message": why}]

    async def _tensorboard_logdirs(
        self, task: Task,
    ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """A TensorBoard's run names and directories (``{"experiment 3": dir}``), and the
        read-only bind mounts that show a container the same paths."""
        logdirs: dict[str, str] = {}
        mounts: dict[str, dict[str, Any]] = {}
        for exp_id in (task.details or {}).get("experiment_ids", []):
            row = await self.store.get_experiment(exp_id)
            path = tensorboard_dir(exp_id, row.config.get("checkpoint_storage")) if row else None
            if path is None:
                continue
            with contextlib.suppress(OSError):  # a bind mount needs it; trials make it too
                path.mkdir(parents=True, exist_ok=True)
            logdirs[f"experiment {exp_id}"] = str(path)
            mounts[str(path)] = {"host_path": str(path), "container_path": str(path),
                                 "read_only": True, "propagation": "rprivate"}
        return logdirs, list(mounts.values())

    async def _tensorboard_storages(self, task: Task) -> dict[str, dict[str, Any]]:
        """A TensorBoard's runs whose files are in remote storage (S3), which the task
        downloads: ``{"experiment 3": {"experiment_id": 3, "checkpoint_storage": {...}}}``."""
        remote: dict[str, dict[str, Any]] = {}
        for exp_id in (task.details or {}).get("experiment_ids", []):
            row = await self.store.get_experiment(exp_id)
            storage = row.config.get("checkpoint_storage") if row else None
            if remote_tensorboard(storage):
                remote[f"experiment {exp_id}"] = {"experiment_id": exp_id,
                                                  "checkpoint_storage": storage}
        return remote


def container_spec(config: Any) -> ContainerSpec:
    """What the experiment config asks of the container its trials run in."""
    env = config.environment
    images = {d: env.image_for(d) for d in ("cpu", "cuda", "rocm")} if env.image else {}
    shm = config.resources.shm_size
    return ContainerSpec(
        images={d: i for d, i in images.items() if i},
        bind_mounts=[m.model_dump() for m in config.bind_mounts],
        shm_size=parse_size(shm) if shm is not None else None,
        devices=[_device(d) for d in config.resources.devices],
        add_capabilities=list(env.add_capabilities),
        drop_capabilities=list(env.drop_capabilities),
    )


def slurm_options(config: Any) -> dict[str, Any]:
    """The config's ``slurm`` section as a mapping (empty without one), for a Slurm pool."""
    return config.slurm.model_dump() if config.slurm is not None else {}


def _device(entry: Any) -> dict[str, Any]:
    """A ``resources.devices`` entry as a mapping: ``/dev/x``, ``/dev/x:/dev/y[:rwm]``, or one
    already written as ``{host_path, container_path, mode}``."""
    if isinstance(entry, dict):
        host = str(entry["host_path"])
        return {"host_path": host, "container_path": str(entry.get("container_path") or host),
                "mode": str(entry.get("mode") or "mrw")}
    parts = str(entry).split(":")
    return {"host_path": parts[0], "container_path": parts[1] if len(parts) > 1 else parts[0],
            "mode": parts[2] if len(parts) > 2 else "mrw"}
