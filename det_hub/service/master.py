"""The master: its managers, wired together, and its life (start, recovery, shutdown).

Handlers parse a request, check nothing themselves and call one manager's method; each manager
checks who is asking (a :class:`~det_hub.service.auth.Principal`) and raises
:mod:`det_hub.service.errors` for the API to answer with. The managers:

========================  ==================================================================
``users``                 tokens, hub sign-ins, users and their Unix accounts (:mod:`.auth`)
``experiments``           experiments, their live runs and who may see their trials
``trials``                what training code reports, and trials' metrics and logs
``checkpoints``           checkpoints, their deletion and the retention policy
``registry``              models and model versions
``tasks``                 commands, notebooks, shells and TensorBoards
``jobs``                  the job queue and the agents
``webhooks``              webhooks and the delivery of events to them
========================  ==================================================================

They share the :class:`~det_hub.store.Store`, the :class:`~det_hub.service.cluster.Cluster`
and the :class:`~det_hub.service.launch.Launcher`, and hear of allocations through the
:class:`~det_hub.service.bus.EventBus`: the constructor below is where every subscription is
made, in the order the managers are built.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from det_hub.agents import Agent
from det_hub.archive import ContextLimits
from det_hub.config import ConfigLimits
from det_hub.config.limited_yaml import DEFAULT_LIMITS
from det_hub.service.auth import Principal, UserManager
from det_hub.service.bus import EventBus
from det_hub.service.checkpoint_gc import CheckpointGC
from det_hub.service.checkpoints import CheckpointManager
from det_hub.service.cluster import Allocation, Cluster, PoolSettings
from det_hub.service.errors import Unavailable
from det_hub.service.experiments import ExperimentManager
from det_hub.service.importance import HyperparameterImportance
from det_hub.service.jobs import JobQueue
from det_hub.service.launch import Launcher
from det_hub.service.pubsub import ExperimentChanges, MetricEvents
from det_hub.service.registry import ModelRegistry
from det_hub.service.tasks import TaskManager
from det_hub.service.trials import TrialManager
from det_hub.service.unix_accounts import task_account as named_task_account
from det_hub.service.webhooks import WebhookManager
from det_hub.store import Store, StoreUnavailable

if TYPE_CHECKING:
    from det_hub.service.hub import HubIdentity
    from det_hub.service.ingest import StoredListener


class Master:
    """The master's managers and its lifecycle (see the module's docstring)."""

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
        config_limits: ConfigLimits = DEFAULT_LIMITS,
        webhooks: WebhookManager | None = None,
    ) -> None:
        """``task_account``: the Unix ``(uid, gid)`` that runs the tasks of users linked to no
        account of their own (``nobody`` by default). ``private_paths``: besides the data
        directory, what no task may have mounted (the config file, keys). ``context_limits``:
        the bounds an uploaded context archive must keep (default: ``ContextLimits()``).
        ``config_limits``: the bounds of the configs users send.
        ``webhooks``: delivers events to registered webhooks (default:
        ``WebhookManager(store)``)."""
        self.store = store
        self.master_url = master_url
        #: The path everything is served under: ``/``, or the hub service's prefix.
        self.base_url = base_url
        self.data_dir = Path(data_dir)
        limits = context_limits or ContextLimits()
        self.bus = EventBus()
        self.cluster = Cluster(store, agents, self.bus, pools=pools or (),
                               kill_grace_seconds=kill_grace_seconds,
                               poll_interval=poll_interval, agent_timeout=agent_timeout,
                               heartbeat_interval=heartbeat_interval)
        self.users = UserManager(store, self.cluster, hub=hub,
                                 task_account=task_account or named_task_account())
        self.launcher = Launcher(store, self.cluster, self.users, master_url=master_url,
                                 base_url=base_url, data_dir=self.data_dir,
                                 private_paths=private_paths)
        # Subscribers of allocations' events, in the order they hear of them.
        self.experiments = ExperimentManager(store, self.cluster, self.users, self.launcher,
                                             self.bus, limits, config_limits)
        self.tasks = TaskManager(store, self.cluster, self.users, self.launcher, self.bus,
                                 base_url=base_url, context_limits=limits,
                                 config_limits=config_limits)
        #: Deletes checkpoints, by hand and by retention policy.
        self.checkpoint_gc = CheckpointGC(store)
        self.checkpoints = CheckpointManager(store, self.experiments, self.checkpoint_gc,
                                             self.bus)
        self.registry = ModelRegistry(store, self.users, self.checkpoints)
        self.importance = HyperparameterImportance(self.experiments)
        #: Subscribers of metric rows as they are stored (the live metric streams).
        self.metric_events = MetricEvents()
        self.trials = TrialManager(store, self.cluster, self.experiments, self.registry,
                                   self.metric_events, self.bus)
        self.jobs = JobQueue(store, self.cluster, self.experiments, self.tasks)
        #: Subscribers of experiment changes (the live experiment list). The store tells it of
        #: every committed write that may change an experiment's summary, wherever it is made.
        self.experiment_changes = ExperimentChanges()
        store.experiment_listeners.append(self.experiment_changes.publish)
        #: Subscribers of cluster changes (the live cluster: admin page, panel, REST stream).
        #: The cluster tells it of every change to its agents, queue and allocations.
        self.cluster_changes = self.cluster.changes
        #: Webhooks: their registration, and delivery of state changes and alerts to them.
        self.webhooks = webhooks or WebhookManager(store)
        store.experiment_state_listeners.append(self.webhooks.on_experiment_state)
        #: Set while the process shuts down: requests are answered 503 so clients retry.
        self.stopping = False
        self._shutting_down = asyncio.Event()
        #: Requests being served (ids of their handlers), drained before the store closes.
        self.active_requests: set[int] = set()
        #: Hears the batches of metrics stored (while ingest workers run).
        self.stored_listener: StoredListener | None = None

    @property
    def hub(self) -> HubIdentity | None:
        """Who hub tokens belong to, when JupyterHub runs the master."""
        return self.users.hub

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Take back what a previous master left (allocations still running, experiments
        and tasks not finished), then start scheduling, watching tasks and delivering
        webhooks."""
        await self.cluster.load_settings()
        await self._recover()
        self.cluster.start()
        self.tasks.start()
        await self.webhooks.resume()

    async def hear_stored_metrics(self) -> None:
        """Hear every batch of metrics stored from now on, by this process or its ingest
        workers (PostgreSQL), and act on them in the order they were committed (see
        :mod:`det_hub.service.ingest`).

        Raises:
            psycopg.OperationalError: The database cannot be reached.
        """
        from det_hub.service.ingest import CHANNEL, StoredListener

        listener = StoredListener(self.store.url, self.trials)
        await listener.start()
        self.stored_listener = listener
        self.trials.announce = CHANNEL

    async def stop(self) -> None:
        """Stop scheduling and watching; running tasks keep running, to be adopted by the
        next master. What searchers asked for on validations already answered is carried out
        first."""
        for run in list(self.experiments.runs.values()):
            await run.after_answers.caught_up()
        if self.stored_listener is not None:
            await self.stored_listener.stop()
            self.stored_listener = None
            self.trials.announce = None
        await self.tasks.stop()
        await self.cluster.stop()
        # A store outliving this master (a restart in one process) tells it nothing more.
        with contextlib.suppress(ValueError):
            self.store.experiment_listeners.remove(self.experiment_changes.publish)
        with contextlib.suppress(ValueError):
            self.store.experiment_state_listeners.remove(self.webhooks.on_experiment_state)
        await self.webhooks.stop()

    async def check_database(self) -> None:
        """Whether the database answers a read (one whose disk is full still does).

        Raises:
            Unavailable: It does not (down, restarting, unreachable); with Retry-After.
        """
        try:
            await self.store.ping()
        except StoreUnavailable as e:
            raise Unavailable.from_store(e) from None

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
        task_allocations = {}
        trial_allocations = []
        for row in await self.store.list_open_allocations():
            if row.task_id is not None:
                task_allocations[row.task_id] = row
            else:
                trial_allocations.append(row)
        await self.experiments.recover(trial_allocations)
        await self.tasks.recover(task_allocations)
        await self.experiments.resume_runs()


__all__ = ["Master", "Principal"]
