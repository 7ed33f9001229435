"""The experiments, and their trials while they run: creating, continuing, reading and changing
them, as their owners and admins ask.

Each live (not yet finished) experiment is an :class:`~det_hub.service.experiment.ExperimentRun`
in :attr:`ExperimentManager.runs`; a finished one is only its stored row. The manager hears of
its trials' allocations through the event bus, and hands each to its run.
"""

from __future__ import annotations

import importlib.util
import logging
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from det_hub.archive import ContextLimits
from det_hub.config import ConfigLimits, merge_config, parse_experiment_config
from det_hub.config.limited_yaml import DEFAULT_LIMITS
from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL, RETENTION_DEFAULTS
from det_hub.searcher import SEARCH_METHODS, Create, build_search_method
from det_hub.service.bus import AllocationExited, AllocationStateChanged, EventBus
from det_hub.service.cluster import Cluster, Job
from det_hub.service.context import read_config, read_context
from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound
from det_hub.service.experiment import (
    WAITING,
    ClusterHost,
    ExperimentRun,
    trial_system_log,
)
from det_hub.service.jobs import experiment_job_id
from det_hub.service.searcher_journal import SearcherJournal
from det_hub.service.serialize import experiment_json
from det_hub.service.task_paths import CHECKPOINTS
from det_hub.states import (
    ACTIVE_SUBSTATES,
    AllocationState,
    ExperimentState,
    TrialState,
    shown_experiment_state,
)
from det_hub.store import Store, TrialSummary, utcnow

if TYPE_CHECKING:
    from det_hub.service.auth import Principal, UserManager
    from det_hub.service.launch import Launcher
    from det_hub.store import Experiment, Trial

log = logging.getLogger("det_hub.master")


class ExperimentManager:
    """The experiments and their live runs (see the module's docstring).

    Args:
        store: The master's store.
        cluster: Where trials' allocations are queued.
        users: The users, and who owns what.
        launcher: Builds trials' launch specs and checks what a config may use.
        bus: Where allocations' events come from, and trials' ends go.
        context_limits: The bounds an uploaded context archive must keep.
        config_limits: The bounds of the configs users send.
    """

    def __init__(self, store: Store, cluster: Cluster, users: UserManager, launcher: Launcher,
                 bus: EventBus, context_limits: ContextLimits,
                 config_limits: ConfigLimits = DEFAULT_LIMITS) -> None:
        self.store = store
        self.cluster = cluster
        self.users = users
        self.launcher = launcher
        self.bus = bus
        self.context_limits = context_limits
        self.config_limits = config_limits
        self.runs: dict[int, ExperimentRun] = {}
        bus.subscribe(AllocationStateChanged, self._on_allocation_state)
        bus.subscribe(AllocationExited, self._on_allocation_exit)

    async def recover(self, trial_allocations: Iterable[Any]) -> None:
        """Resume the live experiments a previous master left, adopting their trials'
        allocations (``trial_allocations``, the rows that had not ended) where the processes
        still run; the others end, and their trials are queued again."""
        live = [s.value for s in ExperimentState if not s.terminal]
        for row in await self.store.list_experiments_in_states(live):
            self.runs[row.id] = await self._make_run(row)
        for alloc_row in trial_allocations:
            trial = await self.store.get_trial(alloc_row.trial_id or -1)
            run = self.runs.get(trial.experiment_id) if trial else None
            adopted = None
            if run is not None and trial is not None:
                spec = await self.launcher.trial_spec(run.row, run.config, trial)
                adopted = await self.cluster.adopt(alloc_row, spec)
            if adopted is None:
                await self.store.update_allocation(
                    alloc_row.id, state=AllocationState.TERMINATED, ended_at=utcnow(),
                    exit_reason="lost when the master restarted")
                if trial is not None and run is not None:
                    await trial_system_log(self.store, trial, "the master restarted while this "
                                           "trial was queued or starting; it is requeued")
                continue
            log.info("adopted allocation %s of trial %s", alloc_row.id, adopted.spec.trial_id)

    async def resume_runs(self) -> None:
        """Let every recovered run go on (after the tasks are recovered too)."""
        for run in list(self.runs.values()):
            await run.recover()

    async def _make_run(self, row: Experiment) -> ExperimentRun:
        self.cluster.set_job(await self._job(row))
        trials = await self.store.list_trials(row.id)
        return await ExperimentRun.restore(
            row, parse_experiment_config(row.config), trials, self.store,
            ClusterHost(self.cluster, self.launcher, self.bus))

    async def searcher_state(self, experiment_id: int) -> dict[str, Any]:
        """The experiment's search method's state as it is now, whole (what the master
        stores of it, with the events stored since folded in).

        Raises:
            NotFound: No such experiment.
        """
        run = self.runs.get(experiment_id)
        if run is not None:
            return run.searcher.snapshot()
        row = await self.get(experiment_id)
        state, events = await self.store.load_searcher(experiment_id)
        if not state and not events:
            return {}  # never started
        return SearcherJournal(row, None, state, events).snapshot()

    async def _job(self, row: Experiment) -> Job:
        position = row.queue_position
        return Job(
            id=experiment_job_id(row.id), pool=row.resource_pool,
            owner=await self.users.username(row.owner_id),
            name=row.name, priority=row.priority, weight=row.weight,
            position=position if position is not None else row.created_at.timestamp(),
            submitted=row.created_at)

    async def create(self, who: Principal, config_text: str, context_b64: str | None,
                                *, activate: bool = True,
                                parent_id: int | None = None) -> Experiment:
        """Create and start an experiment. ``parent_id`` forks it from that experiment: it is
        recorded, and the parent's context is used when none is sent."""
        if who.user is None:
            raise Forbidden("training code cannot create experiments")
        if parent_id is not None and await self.store.get_experiment(parent_id) is None:
            raise BadRequest(f"parent_id: experiment {parent_id} not found")
        # Parsed and checked off the event loop, under the configured limits.
        config = await read_config(parse_experiment_config, config_text, self.config_limits,
                                   "the experiment config")
        problems = self.check_runnable(config)
        context = await read_context(context_b64, self.context_limits)
        if problems:
            raise BadRequest("the experiment config cannot run on this master", problems)
        if context is None and parent_id is not None:
            context = await self.store.get_experiment_context(parent_id)

        config_dict = config.to_dict()
        source = await self.launcher.warm_start_checkpoint(config_dict)
        if source is not None:
            source_exp = await self.store.get_experiment(source.experiment_id)
            if source_exp is not None and not who.may_change(source_exp.owner_id):
                owner = await self.users.username(source_exp.owner_id)
                raise Forbidden(f"checkpoint {source.uuid} belongs to {owner}'s experiment "
                                f"{source_exp.id}; only its owner, an admin or a user with the "
                                "manage scope can start trials from it")
        if source is not None and config_dict.get("checkpoint_storage") is None:
            # Trials must read the source checkpoint: keep to the storage that holds it.
            config_dict["checkpoint_storage"] = dict(source.storage)
        if config_dict.get("checkpoint_storage") is None:
            config_dict["checkpoint_storage"] = {
                "type": "shared_fs",
                "host_path": str(await self.launcher.owner_dir(CHECKPOINTS, who.user.id)),
                "storage_path": None, **RETENTION_DEFAULTS}
        problems = self.launcher.path_problems(config_dict, who.user.username)
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
            resource_pool=config.resources.resource_pool or DEFAULT_RESOURCE_POOL,
            priority=config.resources.priority or DEFAULT_PRIORITY, weight=config.resources.weight,
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
        await self.owned(who, experiment_id)
        row = await self.get(experiment_id)
        if experiment_id in self.runs or not ExperimentState(row.state).terminal:
            raise Conflict(f"experiment {experiment_id} is {row.state}; only a finished "
                           "experiment can be continued (a paused one is activated)")
        if row.archived:
            raise Conflict(f"experiment {experiment_id} is archived; unarchive it first")
        merged = merge_config(row.config, overrides)
        config = await read_config(parse_experiment_config, merged, self.config_limits,
                                   "the continued experiment's config")
        name = row.config["searcher"]["name"]
        single = name == "single"
        problems = self.check_runnable(config)
        problems += self.launcher.path_problems(merged, await self.users.username(row.owner_id))
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
        method = SearcherJournal(row, updated, *await self.store.load_searcher(row.id)).method
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

    def check_runnable(self, config: Any) -> list[dict[str, str]]:
        """Why an experiment config cannot run on this master, as config problems: a searcher
        not available, a trial class without the harness, or slots no pool can give."""
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
        problems += self.launcher.placement_problems(config.resources.resource_pool,
                                             config.resources.slots_per_trial,
                                             "resources.slots_per_trial")
        return problems

    async def get(self, experiment_id: int) -> Experiment:
        """An experiment: its live run's row while it runs, else the stored one.

        Raises:
            NotFound: No such experiment."""
        run = self.runs.get(experiment_id)
        if run is not None:
            return run.row
        row = await self.store.get_experiment(experiment_id)
        if row is None:
            raise NotFound(f"experiment {experiment_id} not found")
        return row

    async def get_trial(self, who: Principal, trial_id: int, *, write: bool = False) -> Trial:
        """A trial the caller may see (or change, with ``write``): users may read every
        trial; training code only its own; reports need the trial's own token or an admin."""
        if who.allocation is not None and who.trial_id != trial_id:
            raise Forbidden(f"this allocation's token is not valid for trial {trial_id}")
        if write and who.allocation is None and not who.is_admin:
            raise Forbidden("only the trial's own training code can report for it")
        trial = await self.find_trial(trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        return trial

    def live(self) -> list[Experiment]:
        """The experiments that have not finished, by id (their live runs' rows)."""
        return [self.runs[i].row for i in sorted(self.runs)]

    async def stored(self, experiment_id: int) -> Experiment | None:
        """The experiment as the store has it now (what a change committed, rather than the
        live run's row), None when there is no such experiment."""
        return await self.store.get_experiment(experiment_id)

    async def find_trial(self, trial_id: int) -> Trial | None:
        """A trial by id, whoever asks: its live run's while the experiment runs, else the
        stored one; None when there is no such trial."""
        for run in self.runs.values():
            if trial_id in run.trials:
                return run.trials[trial_id]
        return await self.store.get_trial(trial_id)

    async def trials(self, experiment_id: int) -> list[Trial]:
        """An experiment's trials, by id: its live run's while it runs, else the stored.

        Raises:
            NotFound: No such experiment.
        """
        run = self.runs.get(experiment_id)
        if run is not None:
            return sorted(run.trials.values(), key=lambda t: t.id)
        trials = await self.store.list_trials(experiment_id)
        if not trials:
            await self.get(experiment_id)  # none, or no such experiment
        return trials

    async def context(self, experiment_id: int) -> bytes | None:
        """The experiment's context archive (a .tar.gz), None when it has none.

        Raises:
            NotFound: No such experiment.
        """
        await self.get(experiment_id)
        return await self.store.get_experiment_context(experiment_id)

    def run_for(self, trial: Trial) -> ExperimentRun:
        """The live run of a trial's experiment.

        Raises:
            Conflict: The experiment has finished."""
        run = self.runs.get(trial.experiment_id)
        if run is None:
            raise Conflict(f"trial {trial.id} belongs to a finished experiment")
        return run

    async def to_json(self, rows: Iterable[Experiment]) -> list[dict[str, Any]]:
        """Experiments as the REST API shows them, with their trial counts and best searcher
        metric (one query for all)."""
        rows = list(rows)
        trials = await self.store.trial_summaries([r.id for r in rows])
        out = []
        for r in rows:
            summary = trials.get(r.id, TrialSummary(0, None, None))
            best = summary.lowest if r.smaller_is_better else summary.highest
            out.append(experiment_json(r, await self.users.username(r.owner_id), summary.trials,
                                       best,
                                       state=self.shown_state(r)))
        return out

    async def query(self, *, states: Iterable[str] | None = None,
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

    async def owned(self, who: Principal, experiment_id: int) -> ExperimentRun | None:
        """The live run of an experiment the caller may change (None once it has finished).

        Raises:
            NotFound: No such experiment.
            Forbidden: Neither its owner, an admin nor a user with the manage scope."""
        row = await self.get(experiment_id)
        if not who.may_change(row.owner_id):
            raise Forbidden(f"only the owner of experiment {experiment_id} or an admin can "
                            "change it")
        return self.runs.get(experiment_id)

    async def pause(self, who: Principal, experiment_id: int) -> Experiment:
        """Pause an active experiment: its trials checkpoint and give their slots back.

        Raises:
            Conflict: The experiment is not active."""
        run = await self.owned(who, experiment_id)
        if run is None or run.state != ExperimentState.ACTIVE:
            state = (await self.get(experiment_id)).state
            raise Conflict(f"experiment {experiment_id} is {state}; only an ACTIVE experiment "
                           "can be paused")
        await run.pause()
        return run.row

    async def activate(self, who: Principal, experiment_id: int) -> Experiment:
        """Let a paused experiment go on; an active one is left as it is.

        Raises:
            Conflict: The experiment has finished."""
        run = await self.owned(who, experiment_id)
        if run is None or run.state not in (ExperimentState.PAUSED, ExperimentState.ACTIVE):
            state = (await self.get(experiment_id)).state
            raise Conflict(f"experiment {experiment_id} is {state}; only a PAUSED experiment "
                           "can be activated")
        if run.state == ExperimentState.PAUSED:
            await run.activate()
        return run.row

    async def cancel(self, who: Principal, experiment_id: int) -> Experiment:
        """Stop an experiment gracefully: its trials checkpoint and stop, and it ends
        CANCELED. A finished experiment is left as it is."""
        run = await self.owned(who, experiment_id)
        if run is not None:
            await run.cancel()
            return run.row
        return await self.get(experiment_id)

    async def kill(self, who: Principal, experiment_id: int) -> Experiment:
        """Stop an experiment at once: its trials are killed without a checkpoint, and it
        ends CANCELED. A finished experiment is left as it is."""
        run = await self.owned(who, experiment_id)
        if run is not None:
            await run.kill()
            return run.row
        return await self.get(experiment_id)

    async def update(self, experiment_id: int, **fields: Any) -> Experiment:
        """Store changed fields of an experiment (as :meth:`Store.update_experiment` takes
        them), keeping its live run's row in step."""
        row = await self.store.update_experiment(experiment_id, **fields)
        run = self.runs.get(experiment_id)
        if run is not None:
            run.row = row
        return row

    async def set_archived(self, who: Principal, experiment_id: int, archived: bool) -> Experiment:
        """Archive (hide from the default lists) or unarchive an experiment.

        Raises:
            Conflict: Archiving an experiment that has not finished."""
        await self.owned(who, experiment_id)
        row = await self.get(experiment_id)
        if archived and not ExperimentState(row.state).terminal:
            raise Conflict(f"experiment {experiment_id} is {row.state}; only a finished "
                           "experiment can be archived")
        return await self.update(experiment_id, archived=archived)

    async def searcher_view(self, experiment_id: int) -> dict[str, Any]:
        """The searcher of an experiment as users see it: the method's name, the metric,
        progress, how many trials it created, and the rung table of the ASHA methods with
        request ids replaced by trial ids."""
        row = await self.get(experiment_id)
        trials = await self.trials(experiment_id)
        run = self.runs.get(experiment_id)
        searcher = row.config["searcher"]
        method = run.method if run is not None else SearcherJournal(
            row, None, *await self.store.load_searcher(row.id)).method
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

    async def _on_allocation_exit(self, event: AllocationExited) -> None:
        alloc = event.alloc
        run = self.runs.get(alloc.spec.experiment_id or -1)
        if alloc.spec.task_id is not None or run is None:
            return
        await run.on_allocation_exit(alloc, event.status)
        if run.state.terminal:
            self.runs.pop(run.id, None)
            self.cluster.forget_job(experiment_job_id(run.id))

    async def _on_allocation_state(self, event: AllocationStateChanged) -> None:
        alloc = event.alloc
        run = self.runs.get(alloc.spec.experiment_id or -1)
        if run is not None and alloc.spec.task_id is None and alloc.spec.trial_id is not None:
            await run.on_run_state(alloc.spec.trial_id, event.state.value)


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


def _at(config: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted path of a config mapping, None where it is absent."""
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
