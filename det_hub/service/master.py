"""The master's manager: everything the REST handlers ask for, without HTTP.

Handlers parse a request, check who is asking and call one method here. This object owns the
live experiments (:class:`ExperimentRun`), the :class:`Cluster`, and the store; it raises
:mod:`det_hub.service.errors` for the API to answer with.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub import nonfinite
from det_hub.agents import Agent, ContainerSpec, ExitStatus
from det_hub.agents.slots import slot_resources
from det_hub.archive import ContextLimits
from det_hub.config import (
    CommandConfig,
    ConfigError,
    TaskConfig,
    merge_config,
    parse_command_config,
    parse_experiment_config,
    parse_task_config,
)
from det_hub.config.resources import parse_size
from det_hub.hub import ADMIN_SCOPE, CLUSTER_SCOPE, MANAGE_SCOPE
from det_hub.searcher import SEARCH_METHODS, Create, build_search_method
from det_hub.service.checkpoint_gc import RETENTION_DEFAULTS, CheckpointGC, RetentionPolicy
from det_hub.service.cluster import RUNNING, Allocation, Cluster, Job, LaunchSpec, PoolSettings
from det_hub.service.context import decode_context
from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound, NotReady
from det_hub.service.events import ExperimentChanges, metric_events
from det_hub.service.experiment import (
    EARLY_EXIT_REASONS,
    WAITING,
    ClusterHost,
    ExperimentRun,
    LaunchRefused,
    restored_search_method,
    validation_fields,
)
from det_hub.service.registry import ModelRegistry
from det_hub.service.serialize import (
    checkpoint_json,
    experiment_json,
    task_json,
    trial_source_json,
)
from det_hub.service.task_paths import (
    CACHES,
    CHECKPOINTS,
    owner_checkpoint_dir,
    owner_dir,
    path_problems,
    resolved,
)
from det_hub.service.tasks import TaskManager, task_job_id, task_job_number
from det_hub.service.unix_accounts import AgentUserGroup, link_problems
from det_hub.service.unix_accounts import task_account as named_task_account
from det_hub.service.webhooks import WebhookManager
from det_hub.states import (
    ACTIVE_SUBSTATES,
    CheckpointState,
    ExperimentState,
    TaskType,
    TrialState,
    shown_experiment_state,
    shown_trial_state,
)
from det_hub.storage import remote_tensorboard, tensorboard_dir
from det_hub.store import NotFound as StoreNotFound
from det_hub.store import Store, StoreConflict, TrialSummary, hash_token, utcnow

if TYPE_CHECKING:
    from det_hub.service.hub import HubIdentity
    from det_hub.store.models import Checkpoint, Experiment, MetricRow, Task, Trial, User

log = logging.getLogger("det_hub.master")

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_USERNAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.@-]{0,63}$")


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who is calling: a user, or the training code of one allocation. A hub user brings the
    det_hub scopes the hub granted them (:data:`det_hub.hub.CUSTOM_SCOPES`)."""

    user: User | None = None
    allocation: Allocation | None = None
    scopes: frozenset[str] = frozenset()

    @property
    def is_admin(self) -> bool:
        return self.user is not None and (self.user.admin or ADMIN_SCOPE in self.scopes)

    def may(self, scope: str) -> bool:
        """Whether an admin, or a user holding this det_hub scope."""
        return self.user is not None and (self.is_admin or scope in self.scopes)

    def may_change(self, owner_id: int) -> bool:
        """Whether the caller may change work this user owns: its owner, an admin, or one
        who may manage anyone's work."""
        return self.user is not None and (self.user.id == owner_id or self.may(MANAGE_SCOPE))

    @property
    def trial_id(self) -> int | None:
        return self.allocation.spec.trial_id if self.allocation else None


class Master:
    """The master's state and operations."""

    def __init__(
        self,
        store: Store,
        agents: Agent | list[Agent],
        *,
        master_url: str,
        data_dir: Path,
        pools: list[PoolSettings] | None = None,
        kill_grace_seconds: float = 30.0,
        poll_interval: float = 0.2,
        agent_timeout: float = 30.0,
        heartbeat_interval: float = 5.0,
        base_url: str = "/",
        hub: HubIdentity | None = None,
        task_account: tuple[int, int] | None = None,
        private_paths: Sequence[Path] = (),
        context_limits: ContextLimits | None = None,
        webhooks: WebhookManager | None = None,
    ) -> None:
        """``task_account``: the Unix ``(uid, gid)`` that runs the tasks of users linked to no
        account of their own (see :meth:`task_identity`; ``nobody`` by default).
        ``private_paths``: besides the data directory, what no task may have mounted (the
        config file, keys). ``context_limits``: the bounds an uploaded context archive must
        keep (default: ``ContextLimits()``). ``webhooks``: delivers events to registered
        webhooks (default: ``WebhookManager(store)``)."""
        self.store = store
        self.context_limits = context_limits or ContextLimits()
        self.task_account = task_account or named_task_account()
        self.master_url = master_url
        #: The path everything is served under: ``/``, or the hub service's prefix.
        self.base_url = base_url
        #: Who hub tokens belong to, when JupyterHub runs the master.
        self.hub = hub
        self.data_dir = Path(data_dir)
        #: What no task may mount (see :mod:`det_hub.service.task_paths`), resolved.
        self.private_paths = [resolved(str(p)) for p in (self.data_dir, *private_paths)]
        self.cluster = Cluster(store, agents, self._on_allocation_exit,
                               self._on_allocation_state, pools=pools or (),
                               kill_grace_seconds=kill_grace_seconds,
                               poll_interval=poll_interval, agent_timeout=agent_timeout,
                               heartbeat_interval=heartbeat_interval)
        self.runs: dict[int, ExperimentRun] = {}
        self.tasks = TaskManager(store, self.cluster, self._task_launch_spec, self.username,
                                 base_url)
        self._usernames: dict[int, str] = {}
        #: (uid, gid) of each user's linked Unix account, None when unlinked; see agent_user.
        self._agent_users: dict[int, tuple[int, int] | None] = {}
        #: The model registry (its REST handlers call it directly).
        self.registry = ModelRegistry(store, self.username, self.checkpoint_training)
        #: Deletes checkpoints, by hand and by retention policy.
        self.checkpoint_gc = CheckpointGC(store)
        self._token_cache: dict[str, tuple[float, Principal]] = {}
        #: Subscribers of experiment changes (the live experiment list). The store tells it of
        #: every committed write that may change an experiment's summary, wherever it is made.
        self.experiment_changes = ExperimentChanges()
        store.experiment_listeners.append(self.experiment_changes.publish)
        #: Webhooks: their registration, and delivery of state changes and alerts to them.
        self.webhooks = webhooks or WebhookManager(store)
        store.experiment_state_listeners.append(self.webhooks.on_experiment_state)
        self.cluster_id = ""
        #: Set while the process shuts down: requests are answered 503 so clients retry.
        self.stopping = False
        self._shutting_down = asyncio.Event()
        #: Requests being served (ids of their handlers), drained before the store closes.
        self.active_requests: set[int] = set()

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await self.cluster.load_settings()
        await self._recover()
        self.cluster.start()
        self.tasks.start()
        await self.webhooks.resume()

    async def stop(self) -> None:
        await self.tasks.stop()
        await self.cluster.stop()
        # A store outliving this master (a restart in one process) tells it nothing more.
        with contextlib.suppress(ValueError):
            self.store.experiment_listeners.remove(self.experiment_changes.publish)
        with contextlib.suppress(ValueError):
            self.store.experiment_state_listeners.remove(self.webhooks.on_experiment_state)
        await self.webhooks.stop()

    def begin_shutdown(self) -> None:
        """Answer new requests with 503 and end long-polls, so in-flight work drains."""
        self.stopping = True
        self._shutting_down.set()

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait (at most ``timeout``) until no request is being served."""
        deadline = time.monotonic() + timeout
        while self.active_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def wait_preempt(self, alloc: Allocation, timeout: float) -> bool:
        """The preemption long-poll: True once the allocation should stop; False after
        ``timeout``, or at once when the master shuts down (the caller asks again)."""
        waits = [asyncio.ensure_future(alloc.preempt.wait()),
                 asyncio.ensure_future(self._shutting_down.wait())]
        _, pending = await asyncio.wait(waits, timeout=timeout,
                                        return_when=asyncio.FIRST_COMPLETED)
        for w in pending:
            w.cancel()
        return alloc.preempt.is_set()

    async def _recover(self) -> None:
        """Adopt tasks that outlived the previous master and resume live experiments."""
        live = [s.value for s in ExperimentState if not s.terminal]
        experiments = await self.store.list_experiments_in_states(live)
        for row in experiments:
            self.runs[row.id] = await self._make_run(row)
        task_allocations = {}
        for alloc_row in await self.store.list_open_allocations():
            if alloc_row.task_id is not None:
                task_allocations[alloc_row.task_id] = alloc_row
                continue
            trial = await self.store.get_trial(alloc_row.trial_id or -1)
            run = self.runs.get(trial.experiment_id) if trial else None
            adopted = None
            if run is not None and trial is not None:
                spec = await self._launch_spec(run.row, trial)
                adopted = await self.cluster.adopt(alloc_row, spec)
            if adopted is None:
                await self.store.update_allocation(
                    alloc_row.id, state="TERMINATED", ended_at=utcnow(),
                    exit_reason="lost when the master restarted")
                if trial is not None and run is not None:
                    await run._system_log(trial, "the master restarted while this trial was "
                                                 "queued or starting; it is requeued")
                continue
            log.info("adopted allocation %s of trial %s", alloc_row.id, adopted.spec.trial_id)
        await self.tasks.recover(task_allocations)
        for run in list(self.runs.values()):
            await run.recover()

    async def _make_run(self, row: Experiment) -> ExperimentRun:
        self.cluster.set_job(await self._job(row))
        trials = await self.store.list_trials(row.id)
        return ExperimentRun(row, parse_experiment_config(row.config), trials, self.store,
                             ClusterHost(self.cluster, self._launch_spec, self._on_trial_end))

    async def _job(self, row: Experiment) -> Job:
        position = row.queue_position
        return Job(
            id=_job_id(row.id), pool=row.resource_pool, owner=await self.username(row.owner_id),
            name=row.name, priority=row.priority, weight=row.weight,
            position=position if position is not None else row.created_at.timestamp(),
            submitted=row.created_at)

    # --- the job queue and agents -------------------------------------------------------
    def list_jobs(self, pool: str | None = None) -> list[dict[str, Any]]:
        if pool is not None and pool not in self.cluster.pools:
            raise NotFound(f"resource pool {pool!r} not found")
        return self.cluster.jobs_view(pool)

    def job_view(self, job_id: str) -> dict[str, Any]:
        """The job's row of the queue (:meth:`list_jobs`).

        Raises:
            NotFound: No such job in the queue.
        """
        job = self._queued_job(job_id)
        row = next((j for j in self.cluster.jobs_view(job.pool) if j["job_id"] == job.id), None)
        if row is None:  # between trials: in the queue, holding and asking for nothing
            row = {"job_id": job.id, "type": job.kind, "name": job.name, "owner": job.owner,
                   "resource_pool": job.pool, "queue_position": None, "priority": job.priority,
                   "weight": job.weight, "state": "QUEUED", "slots_requested": 0,
                   "slots_allocated": 0, "allocations": 0, "preemptible": job.preemptible,
                   "submitted": job.submitted.isoformat().replace("+00:00", "Z"),
                   "queued_at": None, "experiment_id": _job_number(job.id, "exp-"),
                   "task_id": task_job_number(job.id)}
        return row

    async def update_job(self, who: Principal, job_id: str, *, priority: int | None = None,
                         weight: float | None = None, ahead_of: str | None = None) -> Job:
        """Change a queued or running job's priority, weight or place in the queue.

        Raises:
            NotFound: No such job in the queue (it may have finished).
            Forbidden: The caller neither owns the job nor is an admin.
            BadRequest: A value out of range, or ``ahead_of`` names this job or one in
                another pool.
        """
        job = self._queued_job(job_id)
        experiment_id = _job_number(job.id, "exp-")
        task_id = task_job_number(job.id)
        if who.may(CLUSTER_SCOPE):
            pass  # may reorder any job
        elif experiment_id is not None:
            await self._owned_run(who, experiment_id)
        elif task_id is not None:
            await self._owned_task(who, task_id)
        if priority is not None and not 1 <= priority <= 99:
            raise BadRequest("priority: must be between 1 and 99")
        if weight is not None and not (math.isfinite(weight) and weight > 0):
            raise BadRequest("weight: must be a number greater than 0")
        other = None
        if ahead_of is not None:
            try:
                other = self._queued_job(ahead_of)
            except NotFound as e:
                raise BadRequest(f"ahead_of: {e}") from None
            if other.id == job.id:
                raise BadRequest("ahead_of: a job cannot move ahead of itself")
            if other.pool != job.pool:
                raise BadRequest(f"ahead_of: job {other.id} is in resource pool {other.pool!r}, "
                                 f"not {job.pool!r}")
        if priority is not None:
            job.priority = priority
        if weight is not None:
            job.weight = weight
        if other is not None:
            self.cluster.move_ahead_of(job, other)
        if experiment_id is not None:
            row = await self.store.update_experiment(
                experiment_id, priority=job.priority, weight=job.weight,
                queue_position=job.position)
            run = self.runs.get(experiment_id)
            if run is not None:
                run.row = row
        elif task_id is not None:
            # A task's weight lives in its config only: it is not a column of its own.
            task = self.tasks.live[task_id]
            config = dict(task.config)
            config["resources"] = {**(config.get("resources") or {}), "weight": job.weight}
            updated = await self.store.update_task(
                task_id, priority=job.priority, queue_position=job.position, config=config)
            task.priority, task.queue_position = updated.priority, updated.queue_position
            task.config = updated.config
        self.cluster.set_job(job)
        return job

    def _queued_job(self, job_id: str) -> Job:
        """The queue's job ``exp-N``, ``cmd-N``, ``notebook-N``, ... or ``N`` (an
        experiment's id)."""
        key = f"exp-{job_id}" if job_id.isdigit() else job_id
        job = self.cluster.jobs.get(key)
        experiment_id, task_id = _job_number(key, "exp-"), task_job_number(key)
        live = (experiment_id is not None and experiment_id in self.runs) or \
            (task_id is not None and task_id in self.tasks.live)
        if job is None or not live:
            raise NotFound(f"job {job_id} is not in the queue (only jobs of active or paused "
                           "experiments and of tasks that have not ended are)")
        return job

    async def set_agent_enabled(self, who: Principal, agent_id: str, enabled: bool, *,
                                drain: bool = True) -> dict[str, Any]:
        if not who.may(CLUSTER_SCOPE):
            raise Forbidden("only an admin can enable or disable agents")
        if agent_id not in self.cluster.agents:
            raise NotFound(f"agent {agent_id!r} not found")
        await self.cluster.set_agent_enabled(agent_id, enabled, drain=drain)
        return next(a for a in self.cluster.agents_view() if a["id"] == agent_id)

    # --- authentication -----------------------------------------------------------------
    async def ensure_admin_token(self, path: Path) -> str:
        """The admin token in ``path``, made (with the admin user) on first start."""
        if path.exists():
            token = path.read_text().strip()
            if token and await self.store.user_for_token(hash_token(token)) is not None:
                return token
        admin = await self.store.get_user("admin") or await self.store.create_user(
            "admin", admin=True)
        token = new_api_token()
        await self.store.add_token(admin.id, hash_token(token), description="admin token")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    async def authenticate(self, token: str) -> Principal | None:
        token_hash = hash_token(token)
        alloc = self.cluster.for_token_hash(token_hash)
        if alloc is not None:
            return Principal(allocation=alloc)
        cached = self._token_cache.get(token_hash)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        user = await self.store.user_for_token(token_hash)
        principal = Principal(user=user) if user is not None else None
        if principal is None and self.hub is not None:
            principal = await self._hub_principal(token)
        if principal is None:
            return None
        self._token_cache[token_hash] = (time.monotonic() + 30.0, principal)
        return principal

    async def _hub_principal(self, token: str) -> Principal | None:
        """Who a hub token belongs to (see :meth:`hub_principal`), None if nobody."""
        assert self.hub is not None
        model = await self.hub.user_for_token(token)
        return None if model is None else await self.hub_principal(model)

    async def hub_principal(self, model: dict[str, Any]) -> Principal:
        """The caller a hub user stands for (signed in through the hub, or holding a hub
        token), given the hub's model of them (``name``, ``admin``): the det_hub user of that
        name, made on first sight, an admin exactly while the hub says they are one."""
        name, admin = str(model["name"]), bool(model.get("admin"))
        user = await self.store.get_user(name)
        if user is None:
            try:
                user = await self.store.create_user(name, admin=admin)
            except StoreConflict:  # made by a request at the same moment
                user = await self.store.get_user(name)
        if user is not None and user.admin != admin:
            user = await self.store.update_user(user.id, admin=admin)
        if user is not None and user.agent_uid is None and self.hub is not None:
            account = await self.hub.unix_account(name)  # when HubIdentity.link_unix_users
            if account is not None:
                user = await self._store_agent_link(user.id, account)
                log.info("linked hub user %s to Unix account %s (uid %d, gid %d)", name,
                         account.user, account.uid, account.gid)
        return Principal(user=user, scopes=frozenset(model.get("scopes") or ()))

    async def username(self, user_id: int) -> str:
        if user_id not in self._usernames:
            user = await self.store.get_user_by_id(user_id)
            self._usernames[user_id] = user.username if user else f"user-{user_id}"
        return self._usernames[user_id]

    # --- users --------------------------------------------------------------------------
    async def create_user(self, who: Principal, username: str, admin: bool) -> tuple[User, str]:
        if not who.is_admin:
            raise Forbidden("only admins can create users")
        if not _USERNAME.match(username):
            raise BadRequest(f"invalid username {username!r}: use letters, digits, '_', '.', "
                             "'@' and '-', at most 64 characters")
        try:
            user = await self.store.create_user(username, admin=admin)
        except StoreConflict:
            raise Conflict(f"user {username!r} already exists") from None
        token = new_api_token()
        await self.store.add_token(user.id, hash_token(token), description="created by admin")
        return user, token

    async def _linkable_user(self, who: Principal, username: str) -> User:
        if not who.is_admin:
            raise Forbidden("only admins can link users to Unix accounts")
        user = await self.store.get_user(username)
        if user is None:
            raise NotFound(f"user {username!r} not found")
        return user

    async def link_agent_user(self, who: Principal, username: str, agent_uid: Any,
                              agent_gid: Any, agent_user: Any = None,
                              agent_group: Any = None) -> User:
        """Link a user to the Unix account their tasks run as (admins only), replacing any
        earlier link. The names are optional; uid and gid are what tasks get.

        Raises:
            Forbidden: the caller is not an admin.
            NotFound: no such user.
            BadRequest: a uid or gid that is not an integer from 1 to 4294967294 (0, root,
                is refused), or a name that is not a Unix name; each is a detail naming its
                field.
        """
        user = await self._linkable_user(who, username)
        problems = link_problems(agent_uid, agent_gid, agent_user, agent_group)
        if problems:
            raise BadRequest(f"cannot link user {username!r}: " + "; ".join(
                f"{p['path']} {p['message']}" for p in problems), problems)
        return await self._store_agent_link(
            user.id, AgentUserGroup(agent_uid, agent_gid, agent_user, agent_group))

    async def unlink_agent_user(self, who: Principal, username: str) -> User:
        """Forget a user's Unix account (admins only); unlinking an unlinked user is no
        error.

        Raises:
            Forbidden: the caller is not an admin.
            NotFound: no such user.
        """
        user = await self._linkable_user(who, username)
        user = await self.store.unlink_agent_user(user.id)
        self._agent_users[user.id] = None
        return user

    async def _store_agent_link(self, user_id: int, account: AgentUserGroup) -> User:
        user = await self.store.link_agent_user(
            user_id, agent_uid=account.uid, agent_gid=account.gid, agent_user=account.user,
            agent_group=account.group)
        self._agent_users[user_id] = (account.uid, account.gid)
        return user

    async def agent_user(self, user_id: int) -> tuple[int, int] | None:
        """(uid, gid) of the Unix account a user's tasks run as, None when the user is not
        linked to one (or does not exist). Answered from memory after the first ask; links
        and unlinks made through this master update it."""
        if user_id not in self._agent_users:
            user = await self.store.get_user_by_id(user_id)
            found = (None if user is None or user.agent_uid is None or user.agent_gid is None
                     else (user.agent_uid, user.agent_gid))
            # setdefault: a link made while this read was in flight wins over what it read.
            self._agent_users.setdefault(user_id, found)
        return self._agent_users[user_id]

    # --- tasks: commands, notebooks, shells, TensorBoards --------------------------------
    async def create_task(self, who: Principal, kind: TaskType, config_text: str,
                          context_b64: str | None = None,
                          experiment_ids: Sequence[int] = ()) -> Task:
        """Queue a task: its config (see :mod:`det_hub.config.command`), an optional context
        archive, and for a TensorBoard the experiments whose metrics it shows.

        Raises:
            BadRequest: The config is invalid, asks for what this cluster cannot give, or a
                TensorBoard names no experiment or one without TensorBoard files; each detail
                names its config path.
        """
        if who.user is None:
            raise Forbidden(f"training code cannot start a {kind.word}")
        if kind.proxied and not config_text.strip():
            config_text = "{}"  # every setting has a default
        try:
            config = (parse_command_config(config_text) if kind is TaskType.COMMAND
                      else parse_task_config(config_text))
        except ConfigError as e:
            raise BadRequest(f"the {kind.word} config is invalid", [
                {"path": p.path, "message": p.message} for p in e.problems]) from None
        problems = self._placement_problems(config.resources.resource_pool,
                                            config.resources.slots, "resources.slots")
        problems += self._path_problems(config.to_dict(), who.user.username)
        context = await self._decode_context(context_b64)
        if problems:
            raise BadRequest(f"the {kind.word} config cannot run on this master", problems)
        details: dict[str, Any] | None = None
        secret: str | None = None
        if kind is TaskType.TENSORBOARD:
            details = {"experiment_ids": await self._tensorboard_experiments(experiment_ids)}
        if kind is TaskType.SHELL:
            from det_hub.exec.shell import generate_keypair

            secret, public_key = generate_keypair()
            details = {"public_key": public_key}
        elif kind.proxied:
            secret = secrets.token_urlsafe(32)
        return await self.tasks.create(
            type=kind, owner_id=who.user.id, config=config.to_dict(), context=context,
            description=config.description or _task_description(kind, config, details),
            resource_pool=config.resources.resource_pool or "default",
            priority=config.resources.priority or 42, details=details, secret=secret)

    async def _tensorboard_experiments(self, experiment_ids: Sequence[int]) -> list[int]:
        """The experiments a TensorBoard shows, checked: they exist and keep their
        TensorBoard files where the TensorBoard can read them."""
        if not experiment_ids:
            raise BadRequest("experiment_ids: give at least one experiment")
        ids = list(dict.fromkeys(int(i) for i in experiment_ids))
        problems = []
        for exp_id in ids:
            row = await self.store.get_experiment(exp_id)
            if row is None:
                problems.append({"path": "experiment_ids",
                                 "message": f"experiment {exp_id} not found"})
            elif (tensorboard_dir(row.id, row.config.get("checkpoint_storage")) is None
                  and not remote_tensorboard(row.config.get("checkpoint_storage"))):
                problems.append({"path": "experiment_ids", "message": (
                    f"experiment {exp_id} keeps its checkpoints where no TensorBoard files "
                    "are written (only shared_fs, directory and s3 storage have them)")})
        if problems:
            raise BadRequest("the TensorBoard cannot show these experiments", problems)
        return ids

    async def list_tasks(self, who: Principal, kind: TaskType) -> list[Task]:
        """Every task of this type, oldest first (the 1000 newest)."""
        return await self.store.list_tasks(type=kind.value, limit=1000)

    async def get_task(self, who: Principal, kind: TaskType, task_id: int) -> Task:
        """One task of this type.

        Raises:
            NotFound: No task of this type has this id.
        """
        task = await self.tasks.find(task_id)
        if task is None or task.type != kind.value:
            raise NotFound(f"{kind.word} {task_id} not found")
        return task

    async def kill_task(self, who: Principal, kind: TaskType, task_id: int) -> Task:
        """Kill a task (its owner or an admin); one that has ended is left as it is."""
        await self._owned_task(who, task_id, kind)
        if task_id not in self.tasks.live:
            return await self.get_task(who, kind, task_id)
        return await self.tasks.kill(task_id)

    async def _owned_task(self, who: Principal, task_id: int,
                          kind: TaskType | None = None) -> Task:
        task = await self.tasks.find(task_id)
        if task is None or (kind is not None and task.type != kind.value):
            raise NotFound(f"{(kind or TaskType.COMMAND).word} {task_id} not found")
        if not self.may_change_task(who, task):
            raise Forbidden(f"only the owner of {TaskType(task.type).word} {task_id} or an "
                            "admin can change it")
        return task

    @staticmethod
    def may_change_task(who: Principal, task: Task) -> bool:
        """Whether the caller owns the task or is an admin: who may kill it, use what it
        serves, and see its secret."""
        return who.may_change(task.owner_id)

    async def task_json(self, who: Principal, rows: Iterable[Task]) -> list[dict[str, Any]]:
        """Tasks as the API shows them; what lets one use a proxied task (its URL with access
        token, a shell's private key) only to its owner and admins."""
        rows = list(rows)
        shown = [task_json(t, await self.username(t.owner_id),
                           with_secret=self.may_change_task(who, t)) for t in rows]
        for task, body in zip(rows, shown, strict=True):
            if TaskType(task.type).reserves_only and self.may_change_task(who, task):
                body["placement"] = self.placement(task.id)
        return shown

    def placement(self, task_id: int) -> dict[str, Any] | None:
        """Where a running task's slots are, and what a container on them gets (for a hub
        server's spawner): the agent, its Docker host, the slots' GPUs or CPU cores and the
        environment that goes with them. None while it waits for slots, or after it ended."""
        alloc = self.cluster.for_task(task_id)
        if alloc is None or alloc.state != RUNNING or not alloc.nodes:
            return None
        node = alloc.nodes[0]
        agent = self.cluster.agents[node.agent_id]
        slots = [s for s in agent.slots if s.id in node.slot_ids]
        return {"agent_id": agent.agent_id, "agent_type": agent.kind,
                "address": agent.address, "slot_ids": list(node.slot_ids),
                "docker": agent.connection() if agent.uses_containers else None,
                **slot_resources(slots)}

    def task_ended(self, task_id: int) -> bool:
        """Whether a task has ended and its last log line is stored."""
        return task_id not in self.tasks.live and self.cluster.for_task(task_id) is None

    async def task_ready(self, who: Principal, task_id: int, port: Any) -> Task:
        """A proxied task's server says it answers on ``port`` (its allocation's token only).

        Raises:
            Forbidden: Not this task's allocation.
            BadRequest: Not a port number.
            Conflict: The task has ended.
        """
        if who.allocation is None or who.allocation.spec.task_id != task_id:
            raise Forbidden(f"only task {task_id}'s own allocation can say it is ready")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise BadRequest("port: must be a TCP port number (1-65535)")
        try:
            return await self.tasks.ready(who.allocation, port)
        except KeyError:
            raise Conflict(f"task {task_id} has ended") from None

    async def proxy_target(self, task_id: int) -> tuple[Task, str]:
        """A running proxied task and the ``host:port`` its server answers on.

        Raises:
            NotFound: No proxied task has this id.
            NotReady: The task is not serving yet, or has ended.
        """
        task = await self.tasks.find(task_id)
        if task is None or not TaskType(task.type).proxied:
            raise NotFound(f"no notebook, shell or TensorBoard has id {task_id}")
        alloc = self.cluster.for_task(task_id)
        if task_id not in self.tasks.live or alloc is None or alloc.state != RUNNING \
                or alloc.killed or not task.proxy_address:
            raise NotReady(task)
        return task, task.proxy_address

    async def _decode_context(self, context_b64: str | None) -> bytes | None:
        """A context archive sent as base64, decoded and checked whole in a worker thread (the
        event loop only routes), before anything is stored.

        Raises:
            BadRequest: Not base64, not a readable archive, or an unsafe member (named).
            TooLarge: Over a bound of ``context_limits`` (size, members, inflated bytes).
        """
        if not context_b64:
            return None
        return await asyncio.to_thread(decode_context, context_b64, self.context_limits)

    # --- experiments --------------------------------------------------------------------
    async def create_experiment(self, who: Principal, config_text: str, context_b64: str | None,
                                *, activate: bool = True,
                                parent_id: int | None = None) -> Experiment:
        """Create and start an experiment. ``parent_id`` forks it from that experiment: it is
        recorded, and the parent's context is used when none is sent."""
        if who.user is None:
            raise Forbidden("training code cannot create experiments")
        if parent_id is not None and await self.store.get_experiment(parent_id) is None:
            raise BadRequest(f"parent_id: experiment {parent_id} not found")
        try:
            config = parse_experiment_config(config_text)
        except ConfigError as e:
            raise BadRequest("the experiment config is invalid", [
                {"path": p.path, "message": p.message} for p in e.problems]) from None
        problems = self._check_runnable(config)
        context = await self._decode_context(context_b64)
        if problems:
            raise BadRequest("the experiment config cannot run on this master", problems)
        if context is None and parent_id is not None:
            context = await self.store.get_experiment_context(parent_id)

        config_dict = config.to_dict()
        source = await self._warm_start_checkpoint(config_dict)
        if source is not None:
            source_exp = await self.store.get_experiment(source.experiment_id)
            if source_exp is not None and not who.may_change(source_exp.owner_id):
                owner = await self.username(source_exp.owner_id)
                raise Forbidden(f"checkpoint {source.uuid} belongs to {owner}'s experiment "
                                f"{source_exp.id}; only its owner, an admin or a user with the "
                                "manage scope can start trials from it")
        if source is not None and config_dict.get("checkpoint_storage") is None:
            # Trials must read the source checkpoint: keep to the storage that holds it.
            config_dict["checkpoint_storage"] = dict(source.storage)
        if config_dict.get("checkpoint_storage") is None:
            config_dict["checkpoint_storage"] = {
                "type": "shared_fs",
                "host_path": str(await self._owner_dir(CHECKPOINTS, who.user.id)),
                "storage_path": None, "save_experiment_best": 0, "save_trial_best": 1,
                "save_trial_latest": 1}
        problems = self._path_problems(config_dict, who.user.username)
        if problems:
            raise BadRequest("the experiment config cannot run on this master", problems)
        seed = config.reproducibility.experiment_seed
        if seed is None:
            seed = secrets.randbelow(2**31 - 1)
        row = await self.store.create_experiment(
            name=config.name, owner_id=who.user.id, config=config_dict,
            original_config=config_text, context=context,
            state=(ExperimentState.ACTIVE if activate else ExperimentState.PAUSED).value,
            searcher_metric=config.searcher.metric,
            smaller_is_better=config.searcher.smaller_is_better,
            resource_pool=config.resources.resource_pool or "default",
            priority=config.resources.priority or 42, weight=config.resources.weight,
            description=config.description, seed=seed, parent_id=parent_id)
        run = await self._make_run(row)
        self.runs[row.id] = run
        await run.start()
        return run.row

    async def continue_experiment(self, who: Principal, experiment_id: int,
                                  overrides: dict[str, Any]) -> Experiment:
        """Train a finished experiment's trials on, in place, from their latest checkpoints
        (Determined's ``det experiment continue``), with ``overrides`` merged into its config.

        A ``single`` search reopens its trial, which then trains to the (possibly raised)
        ``searcher.max_length``; any setting may change, its hyperparameters included. Other
        searches rerun the trials that were canceled or failed, and keep their searcher and
        hyperparameters. ``original_config`` stays what the user first submitted.

        Raises:
            Conflict: The experiment is not finished, is archived, or has nothing to continue.
            BadRequest: The merged config is invalid or changes what the search must keep.
        """
        await self._owned_run(who, experiment_id)
        row = await self.get_experiment(experiment_id)
        if experiment_id in self.runs or not ExperimentState(row.state).terminal:
            raise Conflict(f"experiment {experiment_id} is {row.state}; only a finished "
                           "experiment can be continued (a paused one is activated)")
        if row.archived:
            raise Conflict(f"experiment {experiment_id} is archived; unarchive it first")
        merged = merge_config(row.config, overrides)
        try:
            config = parse_experiment_config(merged)
        except ConfigError as e:
            raise BadRequest("the continued experiment's config is invalid", [
                {"path": p.path, "message": p.message} for p in e.problems]) from None
        name = row.config["searcher"]["name"]
        single = name == "single"
        problems = self._check_runnable(config)
        problems += self._path_problems(merged, await self.username(row.owner_id))
        kept = ("searcher.name",) if single else ("searcher", "hyperparameters")
        for path in kept:
            if _at(merged, path) != _at(row.config, path):
                problems.append({"path": path, "message": (
                    f"a continued {name} search keeps its {path}; fork the experiment "
                    "(det-hub experiment create --fork) to change it")})
        if problems:
            raise BadRequest("the experiment cannot be continued with this config", problems)
        trials = await self.store.list_trials(experiment_id)
        again = {TrialState.CANCELED.value, TrialState.ERROR.value}
        reopen = trials if single else [t for t in trials if t.state in again]
        if not reopen:
            raise Conflict(f"every trial of experiment {experiment_id} completed; there is "
                           "nothing to continue (fork it to search again)")
        updated = config.to_dict()
        # Refuse before anything is written: the stored experiment stays as it was.
        method = restored_search_method(row, updated)
        try:
            for trial in reopen:
                method.reopen(trial.request_id)
        except ValueError as e:
            raise Conflict(str(e)) from None
        fields: dict[str, Any] = {
            "config": updated, "name": config.name, "description": config.description,
            "priority": config.resources.priority or row.priority,
            "weight": config.resources.weight,
            "resource_pool": config.resources.resource_pool or row.resource_pool}
        if single and updated.get("hyperparameters") != row.config.get("hyperparameters"):
            # The one trial takes the hyperparameters a fresh search over the new space picks.
            [create] = [a for a in build_search_method(
                updated["searcher"], updated.get("hyperparameters") or {}, row.seed
            ).initial_actions() if isinstance(a, Create)]
            for trial in reopen:
                trial.hparams = dict(create.hparams)
                await self.store.update_trial(trial.id, hparams=trial.hparams)
        row = await self.store.update_experiment(experiment_id, **fields)
        run = await self._make_run(row)
        await run.continue_trials([run.trials[t.id] for t in reopen])
        self.runs[experiment_id] = run
        return run.row

    async def task_identity(self, owner_id: int) -> tuple[tuple[int, int] | None, bool]:
        """Who a user's tasks run as, where an agent can choose: the ``(uid, gid)`` of their
        linked Unix account, else the master's task account; and whether they are an admin."""
        user = await self.store.get_user_by_id(owner_id)
        linked = await self.agent_user(owner_id)
        return (linked or self.task_account), bool(user is not None and user.admin)

    async def _owner_dir(self, kind: str, user_id: int) -> Path:
        """A user's own directory of the data directory (their default checkpoint storage,
        their data cache), made (0700) when missing; where the master runs as root, owned by
        the account their tasks run as."""
        path = owner_dir(self.data_dir, kind, await self.username(user_id))
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        run_as, _ = await self.task_identity(user_id)
        if run_as is not None and os.geteuid() == 0:
            stat = path.stat()
            if (stat.st_uid, stat.st_gid) != run_as:
                # A user linked since: new checkpoints are written by the new account.
                os.chown(path, *run_as)
        return path

    def _path_problems(self, config: dict[str, Any], username: str) -> list[dict[str, str]]:
        """Where a config's storage or bind mounts would show its tasks the master's private
        paths (see :mod:`det_hub.service.task_paths`)."""
        allowed = resolved(str(owner_checkpoint_dir(self.data_dir, username)))
        return path_problems(config, private=self.private_paths, allowed=allowed)

    async def _warm_start_checkpoint(self, config: dict[str, Any]) -> Checkpoint | None:
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

    def _check_runnable(self, config: Any) -> list[dict[str, str]]:
        problems = []
        if config.searcher.name not in SEARCH_METHODS:
            problems.append({"path": "searcher.name", "message": (
                f"{config.searcher.name!r} is not available on this master yet "
                f"(available: {', '.join(sorted(SEARCH_METHODS))})")})
        if config.entrypoint_kind != "script" and \
                importlib.util.find_spec("det_hub.exec.harness") is None:
            problems.append({"path": "entrypoint", "message": (
                "trial-class entrypoints (module:Class) need the PyTorch training harness; "
                "use a script entrypoint such as 'python3 train.py'")})
        problems += self._placement_problems(config.resources.resource_pool,
                                             config.resources.slots_per_trial,
                                             "resources.slots_per_trial")
        return problems

    def _placement_problems(self, pool: str, slots: int, slots_path: str) -> list[dict[str, str]]:
        """Why a job asking for ``slots`` (set at ``slots_path``) in ``pool`` can never be
        placed, as config problems; none when it can."""
        pool = pool or "default"
        why = self.cluster.check_request(pool, slots)
        if why is None:
            return []
        path = "resources.resource_pool" if pool not in self.cluster.pools else slots_path
        return [{"path": path, "message": why}]

    async def get_experiment(self, experiment_id: int) -> Experiment:
        run = self.runs.get(experiment_id)
        if run is not None:
            return run.row
        row = await self.store.get_experiment(experiment_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        return row

    async def experiment_json(self, rows: Iterable[Experiment]) -> list[dict[str, Any]]:
        """Experiments as the REST API shows them, with their trial counts and best searcher
        metric (one query for all)."""
        rows = list(rows)
        trials = await self.store.trial_summaries([r.id for r in rows])
        out = []
        for r in rows:
            summary = trials.get(r.id, TrialSummary(0, None, None))
            best = summary.lowest if r.smaller_is_better else summary.highest
            out.append(experiment_json(r, await self.username(r.owner_id), summary.trials, best,
                                       state=self.shown_state(r)))
        return out

    async def list_experiments(self, *, states: Iterable[str] | None = None,
                               **filters: Any) -> tuple[list[Experiment], int]:
        """One page of experiments and how many match, as :meth:`Store.list_experiments`
        gives them, with ``states`` the states the REST API shows (None: any): ``RUNNING``,
        ``QUEUED`` ... select the active experiments shown so, and ``ACTIVE`` every active
        experiment, as Determined's does."""
        if states is None:
            return await self.store.list_experiments(**filters)
        wanted = set(states)
        shown = wanted.intersection(ACTIVE_SUBSTATES)
        ids = [i for i, run in self.runs.items() if shown and self.shown_state(run.row) in shown]
        return await self.store.list_experiments(states=sorted(wanted - shown), or_ids=ids,
                                                 **filters)

    def shown_state(self, row: Experiment) -> str:
        """The experiment's state as the REST API shows it: an ACTIVE one's trials say
        whether it is QUEUED, STARTING or RUNNING (:func:`shown_experiment_state`)."""
        run = self.runs.get(row.id)
        trials = run.trials.values() if run is not None else ()
        return shown_experiment_state(row.state, ((t.state, t.run_state) for t in trials))

    async def _owned_run(self, who: Principal, experiment_id: int) -> ExperimentRun | None:
        row = await self.get_experiment(experiment_id)
        if not who.may_change(row.owner_id):
            raise Forbidden(f"only the owner of experiment {experiment_id} or an admin can "
                            "change it")
        return self.runs.get(experiment_id)

    async def pause(self, who: Principal, experiment_id: int) -> Experiment:
        run = await self._owned_run(who, experiment_id)
        if run is None or run.state != ExperimentState.ACTIVE:
            raise Conflict(f"experiment {experiment_id} is {await self._state(experiment_id)}; "
                           "only an ACTIVE experiment can be paused")
        await run.pause()
        return run.row

    async def activate(self, who: Principal, experiment_id: int) -> Experiment:
        run = await self._owned_run(who, experiment_id)
        if run is None or run.state not in (ExperimentState.PAUSED, ExperimentState.ACTIVE):
            raise Conflict(f"experiment {experiment_id} is {await self._state(experiment_id)}; "
                           "only a PAUSED experiment can be activated")
        if run.state == ExperimentState.PAUSED:
            await run.activate()
        return run.row

    async def cancel(self, who: Principal, experiment_id: int) -> Experiment:
        """Stop an experiment gracefully: its trials checkpoint and stop, and it ends
        CANCELED. A finished experiment is left as it is."""
        run = await self._owned_run(who, experiment_id)
        if run is not None:
            await run.cancel()
            return run.row
        return await self.get_experiment(experiment_id)

    async def kill(self, who: Principal, experiment_id: int) -> Experiment:
        run = await self._owned_run(who, experiment_id)
        if run is not None:
            await run.kill()
            return run.row
        return await self.get_experiment(experiment_id)

    async def set_archived(self, who: Principal, experiment_id: int, archived: bool) -> Experiment:
        await self._owned_run(who, experiment_id)
        row = await self.get_experiment(experiment_id)
        if archived and not ExperimentState(row.state).terminal:
            raise Conflict(f"experiment {experiment_id} is {row.state}; only a finished "
                           "experiment can be archived")
        return await self.store.update_experiment(experiment_id, archived=archived)

    async def _state(self, experiment_id: int) -> str:
        return (await self.get_experiment(experiment_id)).state

    # --- trials -------------------------------------------------------------------------
    async def get_trial(self, who: Principal, trial_id: int, *, write: bool = False) -> Trial:
        """A trial the caller may see (or change, with ``write``): users may read every
        trial; training code only its own; reports need the trial's own token or an admin."""
        if who.allocation is not None and who.trial_id != trial_id:
            raise Forbidden(f"this allocation's token is not valid for trial {trial_id}")
        if write and who.allocation is None and not who.is_admin:
            raise Forbidden("only the trial's own training code can report for it")
        for run in self.runs.values():
            if trial_id in run.trials:
                return run.trials[trial_id]
        trial = await self.store.get_trial(trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        return trial

    def _run_for(self, trial: Trial) -> ExperimentRun:
        run = self.runs.get(trial.experiment_id)
        if run is None:
            raise Conflict(f"trial {trial.id} belongs to a finished experiment")
        return run

    async def report_metrics(self, who: Principal, trial_id: int, group: str,
                             rows: list[dict[str, Any]], *,
                             key: str | None = None) -> tuple[int, bool]:
        """Store a batch of a trial's metric rows and act on them (progress, best validation,
        searcher events). ``key``, unique within the trial, makes the report idempotent: a
        batch whose key was stored before changes nothing.

        Returns:
            The number of rows the batch stored, and whether it was a repeat.
        """
        trial = await self.get_trial(who, trial_id, write=True)
        if TrialState(trial.state).terminal:
            raise Conflict(f"trial {trial_id} is {trial.state}; it takes no more metrics")
        clean = [_metric_row(i, r) for i, r in enumerate(rows)]
        if not clean:
            return 0, False
        stored = await self.store.insert_metrics(trial_id, group, clean, key=key)
        if isinstance(stored, int):
            return stored, True
        metric_events(self).publish(trial.experiment_id, stored)
        count = len(stored)
        last = max(clean, key=lambda r: r["steps_completed"])
        fields: dict[str, Any] = {}
        if last["steps_completed"] > (trial.steps_completed or 0):
            fields["steps_completed"] = last["steps_completed"]
        if group == "validation":
            row = await self.get_experiment(trial.experiment_id)
            fields.update(validation_fields(clean, row.searcher_metric, row.smaller_is_better,
                                            trial.searcher_metric_value))
        run = self.runs.get(trial.experiment_id)
        if fields:
            for k, v in fields.items():
                setattr(trial, k, v)
            await self.store.update_trial(trial_id, **fields)
            if run is not None and "steps_completed" in fields:
                await run._update_progress()
        if group == "validation" and run is not None:
            # Every validation with the searcher metric is a searcher event, as in Determined
            # 0.38: ASHA can stop a trial at any rung it passes, not only at operation ends.
            for r in sorted(clean, key=lambda r: r["steps_completed"]):
                value = r["metrics"].get(run.row.searcher_metric)
                length = run.validation_length(r["steps_completed"], r["metrics"])
                if length is not None and isinstance(value, (int, float)) \
                        and not isinstance(value, bool):
                    await run.on_validation(trial, length, float(value))
        return count, False

    async def report_progress(self, who: Principal, trial_id: int, progress: float) -> None:
        trial = await self.get_trial(who, trial_id, write=True)
        if not (0.0 <= progress <= 1.0):
            raise BadRequest(f"progress must be between 0 and 1, not {progress}")
        await self._run_for(trial).on_progress(trial, progress)

    async def report_early_exit(self, who: Principal, trial_id: int, reason: str) -> None:
        trial = await self.get_trial(who, trial_id, write=True)
        if reason not in EARLY_EXIT_REASONS:
            raise BadRequest(f"reason must be one of {', '.join(EARLY_EXIT_REASONS)}")
        await self._run_for(trial).on_early_exit(trial, reason)

    async def experiment_best_validation(self, who: Principal, trial_id: int) -> float | None:
        """The best searcher-metric value among the trial's experiment's trials."""
        trial = await self.get_trial(who, trial_id)
        run = self.runs.get(trial.experiment_id)
        exp = run.row if run else await self.get_experiment(trial.experiment_id)
        trials = run.trials.values() if run else await self.store.list_trials(exp.id)
        values = [t.searcher_metric_value for t in trials if t.searcher_metric_value is not None]
        if not values:
            return None
        return min(values) if exp.smaller_is_better else max(values)

    async def searcher_view(self, experiment_id: int) -> dict[str, Any]:
        """The searcher of an experiment as users see it: the method's name, the metric,
        progress, how many trials it created, and the rung table of the ASHA methods with
        request ids replaced by trial ids."""
        run = self.runs.get(experiment_id)
        row = run.row if run else await self.get_experiment(experiment_id)
        trials = list(run.trials.values()) if run else await self.store.list_trials(row.id)
        searcher = row.config["searcher"]
        method = run.method if run is not None else restored_search_method(row)
        by_request = {t.request_id: t.id for t in trials}
        rungs = None
        table = getattr(method, "rung_table", None)
        if callable(table):
            rungs = _with_trial_ids(table(), by_request)
        return {
            "name": searcher["name"], "metric": searcher["metric"],
            "smaller_is_better": searcher.get("smaller_is_better", True),
            "progress": row.progress, "trials_created": len(trials),
            "shutdown": method.shutdown,
            "waiting_trials": sorted(t.id for t in trials if t.run_state == WAITING),
            "rungs": rungs,
        }

    async def searcher_operation(self, who: Principal, trial_id: int) -> dict[str, Any]:
        trial = await self.get_trial(who, trial_id)
        run = self.runs.get(trial.experiment_id)
        if run is None:
            return {"operation": None, "completed": True}
        return run.operation(trial)

    async def complete_operation(self, who: Principal, trial_id: int, length: int,
                                 metric: float) -> None:
        trial = await self.get_trial(who, trial_id, write=True)
        await self._run_for(trial).on_validation(trial, length, metric)

    # --- checkpoints --------------------------------------------------------------------
    async def report_checkpoint(self, who: Principal, body: dict[str, Any]) -> Checkpoint:
        uuid = str(body.get("uuid", ""))
        if not _UUID.match(uuid):
            raise BadRequest("uuid: must be a lower-case UUID string")
        trial = await self.get_trial(who, _int(body, "trial_id"), write=True)
        resources = body.get("resources") or {}
        if not isinstance(resources, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and v >= 0
                for k, v in resources.items()):
            raise BadRequest("resources: must map relative file paths to sizes in bytes")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise BadRequest("metadata: must be an object")
        state = body.get("state", CheckpointState.COMPLETED.value)
        if state not in (CheckpointState.ACTIVE.value, CheckpointState.COMPLETED.value):
            raise BadRequest("state: must be ACTIVE or COMPLETED")
        steps = _int(body, "steps_completed", default=int(metadata.get("steps_completed", 0)))
        exp = await self.get_experiment(trial.experiment_id)
        try:
            ckpt = await self.store.add_checkpoint(
                uuid=uuid, trial_id=trial.id, experiment_id=trial.experiment_id,
                allocation_id=who.allocation.id if who.allocation else None, state=state,
                steps_completed=steps, resources=resources, metadata=metadata,
                storage=exp.config.get("checkpoint_storage") or {})
        except StoreConflict:
            raise Conflict(f"checkpoint {uuid} already exists") from None
        if state == CheckpointState.COMPLETED.value:
            trial.latest_checkpoint = uuid
            await self.store.update_trial(trial.id, latest_checkpoint=uuid)
        return ckpt

    async def get_checkpoint(self, who: Principal, uuid: str) -> Checkpoint:
        ckpt = await self.store.get_checkpoint(uuid)
        if ckpt is None:
            raise NotFound(f"checkpoint {uuid} not found")
        if who.allocation is not None and ckpt.experiment_id != who.allocation.spec.experiment_id:
            raise Forbidden("training code may read only its own experiment's checkpoints")
        return ckpt

    async def checkpoint_training(self, ckpt: Checkpoint) -> dict[str, Any]:
        """What a checkpoint was trained from, so that a model version built on it can be
        reproduced: the experiment's config and searcher metric, the trial's hparams and
        seed, the validation metrics reported at the checkpoint's step (None when none
        were), and where the model definition (the experiment's context) is fetched."""
        exp = await self.get_experiment(ckpt.experiment_id)
        trial = await self.store.get_trial(ckpt.trial_id)
        validation = await self.store.metrics_at(ckpt.trial_id, "validation",
                                                 ckpt.steps_completed)
        return {
            "experiment_config": exp.config,
            "searcher_metric": exp.searcher_metric,
            "hparams": trial.hparams if trial is not None else {},
            "trial_seed": trial.seed if trial is not None else None,
            "validation_metrics": validation.metrics if validation is not None else None,
            "model_definition": f"/api/v1/experiments/{exp.id}/context",
        }

    async def delete_checkpoint(self, who: Principal, uuid: str) -> Checkpoint:
        """Delete a checkpoint's files and mark it DELETED (its experiment's owner or an
        admin).

        Raises:
            NotFound: No such checkpoint.
            Forbidden: The caller may not change its experiment.
            Conflict: A model version names it; it is the latest checkpoint of a trial that
                can still run (and resume from it); or it is not COMPLETED.
        """
        ckpt = await self.get_checkpoint(who, uuid)
        exp = await self.get_experiment(ckpt.experiment_id)
        if not who.may_change(exp.owner_id):
            raise Forbidden(f"only the owner of experiment {exp.id} or an admin can delete "
                            "its checkpoints")
        registered = await self.registry.registered_message(uuid)
        if registered:
            raise Conflict(registered)
        if ckpt.state != CheckpointState.COMPLETED.value:
            raise Conflict(f"checkpoint {uuid} is {ckpt.state}; only a COMPLETED checkpoint "
                           "can be deleted")
        trial = await self.get_trial(who, ckpt.trial_id)
        if trial.latest_checkpoint == uuid and not TrialState(trial.state).terminal:
            raise Conflict(f"checkpoint {uuid} is the latest of trial {trial.id}, which is "
                           f"{shown_trial_state(trial.state, trial.run_state)} and would resume "
                           "from it; delete it once the trial has ended")
        if not await self.checkpoint_gc.delete([ckpt]):
            # Registered or deleted since the checks above.
            raise Conflict(await self.registry.registered_message(uuid)
                           or f"checkpoint {uuid} was deleted meanwhile")
        return await self.get_checkpoint(who, uuid)

    async def collect_checkpoints(self, who: Principal, experiment_id: int,
                                  body: dict[str, Any]) -> dict[str, Any]:
        """Set an experiment's retention policy and apply it now (``dry_run``: only say what
        it would delete, and change nothing). Settings the body leaves out keep their value.

        Returns:
            ``{"dry_run", "policy", "uuids" (deleted, or to delete), "checkpoints" (those
            checkpoints as they were), "registered" (let go by the policy but kept by a model
            version)}``.

        Raises:
            BadRequest: An unknown setting, or a count that is not an integer >= 0.
            Forbidden, NotFound: As for the experiment's other changes.
        """
        run = await self._owned_run(who, experiment_id)
        row = run.row if run is not None else await self.get_experiment(experiment_id)
        problems = [{"path": key, "message": "unknown field; one of dry_run, "
                     + ", ".join(RETENTION_DEFAULTS)}
                    for key in sorted(set(body) - {"dry_run", *RETENTION_DEFAULTS})]
        for key in RETENTION_DEFAULTS:
            value = body.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append({"path": key, "message": "must be an integer >= 0"})
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            problems.append({"path": "dry_run", "message": "must be true or false"})
        if problems:
            raise BadRequest("invalid checkpoint GC policy", problems)
        storage_cfg = dict(row.config.get("checkpoint_storage") or {})
        current = RetentionPolicy.of(storage_cfg).as_dict()
        policy = RetentionPolicy(**{k: int(body.get(k, v)) for k, v in current.items()})
        if not dry_run and policy.as_dict() != current:
            config = {**row.config, "checkpoint_storage": {**storage_cfg, **policy.as_dict()}}
            updated = await self.store.update_experiment(experiment_id, config=config)
            if run is not None:
                # Trials that end from now on are collected by the new policy.
                run.row.config = updated.config
            row = updated
        trials = (list(run.trials.values()) if run is not None
                  else await self.store.list_trials(experiment_id))
        result = await self.checkpoint_gc.collect(row, trials, policy, dry_run=dry_run)
        return {"dry_run": dry_run, "policy": policy.as_dict(),
                "uuids": [c.uuid for c in result.doomed] if dry_run else result.deleted,
                "checkpoints": [checkpoint_json(c) for c in result.doomed
                                if dry_run or c.uuid in result.deleted],
                "registered": result.registered}

    # --- what trials used (trial source infos) ------------------------------------------
    async def report_trial_source(self, who: Principal, trial_id: int,
                                  body: dict[str, Any]) -> dict[str, Any]:
        """Link a trial to the checkpoint it used, or to a model version and its checkpoint
        (``core_context.experimental.report_task_using_checkpoint`` and
        ``report_task_using_model_version``), so that the metrics the trial reports are found
        from them. Reporting a link again changes nothing.

        Args:
            body: ``{"checkpoint_uuid", "model_name" (optional), "model_version"
                (optional, given with model_name)}``.

        Returns:
            The link, as :func:`~det_hub.service.serialize.trial_source_json` shows it.

        Raises:
            Forbidden: Neither the trial's own training code, nor its experiment's owner, a
                user with the manage scope or an admin.
            BadRequest: A bad body.
            NotFound: No such trial, checkpoint, model or model version.
            Conflict: The model version is another checkpoint.
        """
        trial = await self.get_trial(who, trial_id)
        if who.allocation is None:
            exp = await self.get_experiment(trial.experiment_id)
            if not who.may_change(exp.owner_id):
                raise Forbidden(f"only trial {trial_id}'s training code, its owner or an admin "
                                "can report what it used")
        uuid, name, number = _source_fields(body)
        if await self.store.get_checkpoint(uuid) is None:
            raise NotFound(f"checkpoint {uuid} not found")
        version_id = None
        if name is not None and number is not None:
            _, version = await self.registry.get_version(name, number)
            if version.checkpoint_uuid != uuid:
                raise Conflict(f"model {name!r} version {number} is checkpoint "
                               f"{version.checkpoint_uuid}, not {uuid}")
            version_id = version.id
        try:
            link = await self.store.add_trial_source(
                trial_id=trial.id, checkpoint_uuid=uuid, model_version_id=version_id)
        except StoreNotFound:
            # Deleted since it was read above.
            raise NotFound(f"checkpoint {uuid} or model {name!r} version {number} was "
                           "deleted meanwhile") from None
        except StoreConflict as e:
            raise Conflict(str(e)) from None
        return trial_source_json(link, name, number)

    async def checkpoint_metrics(self, who: Principal, uuid: str,
                                 group: str | None = None) -> list[MetricRow]:
        """The metrics (of one group, or all) of every trial that reported using this
        checkpoint, directly or through a model version: trial by trial, each ascending.

        Raises:
            NotFound: No such checkpoint.
        """
        ckpt = await self.get_checkpoint(who, uuid)
        return await self.store.checkpoint_metrics(ckpt.uuid, group=group)

    async def model_version_metrics(self, who: Principal, name: str, version: int,
                                    group: str | None = None) -> list[MetricRow]:
        """The metrics (of one group, or all) of every trial that reported using this model
        version, as :meth:`checkpoint_metrics` orders them.

        Raises:
            NotFound: No such model or version.
        """
        _, found = await self.registry.get_version(name, version)
        return await self.store.model_version_metrics(found.id, group=group)

    async def _on_trial_end(self, run: ExperimentRun, trial: Trial) -> None:
        """Apply the experiment's checkpoint GC policy once a trial has ended."""
        await self.checkpoint_gc.collect(run.row, run.trials.values())

    # --- cluster events -----------------------------------------------------------------
    async def _on_allocation_exit(self, alloc: Allocation, status: ExitStatus) -> None:
        if alloc.spec.task_id is not None:
            await self.tasks.on_allocation_exit(alloc, status)
            return
        run = self.runs.get(alloc.spec.experiment_id or -1)
        if run is None:
            return
        await run.on_allocation_exit(alloc, status)
        if run.state.terminal:
            self.runs.pop(run.id, None)
            self.cluster.forget_job(_job_id(run.id))

    async def _on_allocation_state(self, alloc: Allocation, state: str) -> None:
        if alloc.spec.task_id is not None:
            await self.tasks.on_run_state(alloc, state)
            return
        run = self.runs.get(alloc.spec.experiment_id or -1)
        if run is not None and alloc.spec.trial_id is not None:
            await run.on_run_state(alloc.spec.trial_id, state)

    async def _launch_spec(self, exp: Experiment, trial: Trial) -> LaunchSpec:
        config = parse_experiment_config(exp.config)
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
                source = await self._warm_start_checkpoint(exp.config)
            except BadRequest as e:
                # The source was there when the experiment was created, and is gone now.
                raise LaunchRefused("; ".join(d["message"] for d in e.details)) from None
            latest = source.uuid if source is not None else None
        env = config.environment.variables_for(
            "cuda" if "cuda" in self.cluster.slot_kinds(exp.resource_pool) else "cpu")
        env.update({
            "DET_HUB_MASTER": self.master_url,
            "DET_HUB_TRIAL_ID": str(trial.id),
            "DET_HUB_EXPERIMENT_ID": str(exp.id),
        })
        info = {
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
        owner = await self.username(exp.owner_id)
        problems = self._path_problems(exp.config, owner)
        if problems:
            raise LaunchRefused("; ".join(f"{p['path']}: {p['message']}" for p in problems))
        storage = exp.config.get("checkpoint_storage") or {}
        if storage.get("host_path") == str(owner_checkpoint_dir(self.data_dir, owner)):
            await self._owner_dir(CHECKPOINTS, exp.owner_id)  # owned by who runs it now
        run_as, owner_is_admin = await self.task_identity(exp.owner_id)
        return LaunchSpec(
            run_as=run_as, owner_is_admin=owner_is_admin,
            data_cache=str(await self._owner_dir(CACHES, exp.owner_id)),
            trial_id=trial.id, experiment_id=exp.id, owner=owner,
            slots=slots, argv=argv, env=env, cluster_info=info,
            context=await self.store.get_experiment_context(exp.id), job_id=_job_id(exp.id),
            container=_container_spec(config))


    async def _task_launch_spec(self, task: Task) -> LaunchSpec:
        kind = TaskType(task.type)
        config = (parse_command_config(task.config) if kind is TaskType.COMMAND
                  else parse_task_config(task.config))
        env = config.environment.variables_for(
            "cuda" if "cuda" in self.cluster.slot_kinds(task.resource_pool) else "cpu")
        env.update({"DET_HUB_MASTER": self.master_url, "DET_HUB_TASK_ID": task_job_id(task),
                    "DET_HUB_TASK_TYPE": task.type})
        info = {"master_url": self.master_url, "cluster_id": self.cluster_id,
                "task_id": task_job_id(task), "task_type": task.type,
                "container_addrs": ["127.0.0.1"]}
        container = _container_spec(config)
        if isinstance(config, CommandConfig):
            argv = config.argv()
        elif kind.reserves_only:
            argv = []
        else:
            # What the task serves answers under the proxy's path for it.
            argv = ["python3", "-m", f"det_hub.exec.{kind.word}"]
            env["DET_HUB_PROXY_PATH"] = f"{self.base_url}proxy/{task.id}/"
            env["DET_HUB_TASK_NUMBER"] = str(task.id)
        if kind is TaskType.NOTEBOOK:
            env["DET_HUB_NOTEBOOK_TOKEN"] = task.secret or ""
        elif kind is TaskType.SHELL:
            env["DET_HUB_SHELL_PUBLIC_KEY"] = (task.details or {}).get("public_key", "")
        elif kind is TaskType.TENSORBOARD:
            logdirs, mounts = await self._tensorboard_logdirs(task)
            env["DET_HUB_TENSORBOARD_LOGDIRS"] = json.dumps(logdirs)
            remote = await self._tensorboard_storages(task)
            if remote:
                env["DET_HUB_TENSORBOARD_STORAGES"] = json.dumps(remote)
            container = dataclasses.replace(
                container, bind_mounts=[*container.bind_mounts, *mounts])
        run_as, owner_is_admin = await self.task_identity(task.owner_id)
        return LaunchSpec(
            run_as=run_as, owner_is_admin=owner_is_admin,
            data_cache=str(await self._owner_dir(CACHES, task.owner_id)),
            task_id=task.id, owner=await self.username(task.owner_id),
            slots=config.resources.slots, argv=argv, env=env, cluster_info=info,
            context=await self.store.get_task_context(task.id), job_id=task_job_id(task),
            container=container, reserve_only=kind.reserves_only,
            # A hub server's idleness is the hub's to judge (its idle culler stops it).
            idle_timeout=None if kind.reserves_only else config.idle_timeout_seconds,
            idle_means="no output" if kind is TaskType.COMMAND
            else "no output and no use through the proxy")

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


def _job_id(experiment_id: int) -> str:
    return f"exp-{experiment_id}"


def _job_number(job_id: str, prefix: str) -> int | None:
    """The id in a job id of this kind (``exp-12`` -> 12), None for a job of another kind."""
    rest = job_id.removeprefix(prefix)
    return int(rest) if rest != job_id and rest.isdigit() else None


def _task_description(kind: TaskType, config: TaskConfig,
                      details: dict[str, Any] | None) -> str:
    """A task's default description: ``Command (its command line)``, shortened;
    ``TensorBoard (experiments 3, 4)``; ``Notebook``, ``Shell``."""
    if isinstance(config, CommandConfig):
        line = " ".join(config.argv())
        return f"Command ({line if len(line) <= 60 else line[:57] + '...'})"
    if kind is TaskType.TENSORBOARD and details:
        ids = details["experiment_ids"]
        return f"TensorBoard (experiment{'s' if len(ids) > 1 else ''} " \
               f"{', '.join(str(i) for i in ids)})"
    return kind.word.capitalize()


def _container_spec(config: Any) -> ContainerSpec:
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


def _with_trial_ids(value: Any, by_request: dict[str, int]) -> Any:
    """A rung table with every ``request_id``/``request_ids`` turned into ``trial_id(s)``."""
    if isinstance(value, list):
        return [_with_trial_ids(v, by_request) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, v in value.items():
        if key == "request_id":
            out["trial_id"] = by_request.get(v)
        elif key in ("request_ids", "training"):
            out["trial_ids" if key == "request_ids" else key] = [
                by_request[r] for r in v if r in by_request]
        else:
            out[key] = _with_trial_ids(v, by_request)
    return out


def _int(body: dict[str, Any], key: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key}: must be an integer")
    return value


_SOURCE_FIELDS = ("checkpoint_uuid", "model_name", "model_version")


def _source_fields(body: dict[str, Any]) -> tuple[str, str | None, int | None]:
    """``(checkpoint uuid, model name, version number)`` of a trial source's body, checked;
    the model's two are both None or both given."""
    unknown = sorted(set(body) - set(_SOURCE_FIELDS))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; the fields are "
                         + ", ".join(_SOURCE_FIELDS))
    uuid = body.get("checkpoint_uuid")
    if not isinstance(uuid, str) or not _UUID.match(uuid.lower()):
        raise BadRequest("checkpoint_uuid: must be the UUID string of a checkpoint")
    name, number = body.get("model_name"), body.get("model_version")
    if (name is None) != (number is None):
        raise BadRequest("model_name and model_version: give both to name a model version, "
                         "or neither to name only a checkpoint")
    if name is not None and (not isinstance(name, str) or not name):
        raise BadRequest("model_name: must be the name of a model")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int)
                               or number < 1):
        raise BadRequest("model_version: must be a version number >= 1")
    return uuid.lower(), name, number


def new_api_token() -> str:
    """A new API token: 64 hex digits. Never starting with ``-``, it is safe to give as
    ``det-hub --token TOKEN`` (argparse takes ``-x...`` for an option) and in a shell."""
    return secrets.token_hex(32)


def _metric_row(index: int, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise BadRequest(f"metrics[{index}]: must be an object")
    steps = row.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise BadRequest(f"metrics[{index}].steps_completed: must be an integer >= 0")
    metrics = row.get("metrics")
    if not isinstance(metrics, dict):
        raise BadRequest(f"metrics[{index}].metrics: must be an object")
    # NaN and infinities arrive as Determined's strings; kept as floats from here on (the
    # store and the REST API write them back as those strings).
    out: dict[str, Any] = {"steps_completed": steps, "metrics": nonfinite.decode(metrics)}
    if row.get("report_time"):
        try:
            out["report_time"] = datetime.fromisoformat(str(row["report_time"]).replace(
                "Z", "+00:00"))
        except ValueError:
            raise BadRequest(f"metrics[{index}].report_time: not an ISO 8601 time") from None
    return out


def _at(config: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted path of a config mapping, None where it is absent."""
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
