"""One experiment at run time: its searcher, its trials and their state machines.

Every change of an experiment's or trial's state goes through :meth:`ExperimentRun._set_state`
or :meth:`ExperimentRun._set_trial_state`, which check the transition against
:mod:`det_hub.states` and store it. Events for one experiment are handled one at a time under
its lock, so the searcher sees them in a single order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from det_hub import nonfinite
from det_hub.agents.local import ExitStatus
from det_hub.config import ExperimentConfig, LengthUnit
from det_hub.searcher import (
    EXIT_REASONS,
    Action,
    Create,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
)
from det_hub.service.bus import MetricsRolledBack, TrialsEnded
from det_hub.service.searcher_journal import SearcherJournal
from det_hub.states import (
    ExperimentState,
    TrialState,
    check_experiment_transition,
    check_trial_transition,
)
from det_hub.store import Store, utcnow

if TYPE_CHECKING:
    from det_hub.service.bus import EventBus
    from det_hub.service.cluster import Allocation, Cluster
    from det_hub.service.launch import Launcher
    from det_hub.store import Experiment, Trial

log = logging.getLogger("det_hub.experiment")

E, T = ExperimentState, TrialState

#: Reasons training code may give for leaving early (Core API ``report_early_exit``).
EARLY_EXIT_REASONS = EXIT_REASONS

#: A search of more trials than this figures its progress at most every PROGRESS_INTERVAL
#: seconds (see ExperimentRun.update_progress).
PROGRESS_EXACT_TRIALS = 200
PROGRESS_INTERVAL = 1.0

#: ``run_state`` of a trial that reached its rung and waits, checkpointed and without a slot,
#: for the searcher to promote or stop it (ASHA with ``stop_once: false``).
WAITING = "WAITING"


class LaunchRefused(Exception):
    """A trial cannot start as configured (its warm-start checkpoint is gone, say): it fails
    with this message instead of running."""


class RunHost(Protocol):
    """What an :class:`ExperimentRun` asks of the master and its cluster.

    A run decides what happens to its trials; the host carries it out: it turns a trial into
    an allocation on the cluster, stops allocations, and does what the master does once a
    trial has ended. The master gives its runs a :class:`ClusterHost`; tests give a fake one.

    Allocations reach the run again through :meth:`ExperimentRun.on_run_state` and
    :meth:`ExperimentRun.on_allocation_exit`, which the host's owner calls as the cluster
    reports them; by then the allocation is no longer the trial's :meth:`allocation`.
    """

    async def launch(self, experiment: Experiment, config: ExperimentConfig,
                     trial: Trial) -> None:
        """Queue an allocation that runs ``trial`` (from its latest checkpoint, if any) as
        ``experiment``'s config (parsed: ``config``) says.

        Raises:
            LaunchRefused: The trial cannot start as configured; nothing was queued.
        """

    def allocation(self, trial_id: int) -> Allocation | None:
        """The trial's open allocation (queued, starting or running), None when it has none."""

    async def dequeue(self, alloc: Allocation) -> bool:
        """Take an allocation that has not started off the queue; False when it has started
        (the run then preempts or kills it). No exit is reported for a dequeued allocation."""

    async def preempt(self, alloc: Allocation) -> None:
        """Ask a started allocation's training code to checkpoint and exit; it is killed if
        it has not exited within its pool's preemption timeout (``alloc.timed_out``)."""

    async def kill(self, alloc: Allocation) -> None:
        """Stop a started allocation now."""

    async def trials_ended(self, run: ExperimentRun, trials: list[Trial]) -> None:
        """``trials`` of ``run`` have reached a terminal state (several at once when a search
        closes out): apply the experiment's checkpoint GC policy, once."""

    async def rolled_back(self, run: ExperimentRun, trial: Trial, steps: int) -> None:
        """``trial``'s new run trains on from ``steps``, and what its earlier runs reported
        past that was rolled back: tell those who follow its metrics."""


class ClusterHost:
    """The :class:`RunHost` of the master's runs: allocations on its :class:`Cluster`, made
    from the launch specs its launcher builds; a trial's end is published on the event bus
    (where the checkpoint GC hears of it).

    Args:
        cluster: Where allocations are queued, preempted and killed.
        launcher: Builds a trial's launch spec (raises :class:`LaunchRefused`).
        bus: Where :class:`~det_hub.service.bus.TrialsEnded` is published.
    """

    def __init__(self, cluster: Cluster, launcher: Launcher, bus: EventBus) -> None:
        self.cluster = cluster
        self.launcher = launcher
        self.bus = bus

    async def launch(self, experiment: Experiment, config: ExperimentConfig,
                     trial: Trial) -> None:
        await self.cluster.request(await self.launcher.trial_spec(experiment, config, trial))

    def allocation(self, trial_id: int) -> Allocation | None:
        return self.cluster.allocations.of_trial(trial_id)

    async def dequeue(self, alloc: Allocation) -> bool:
        return await self.cluster.dequeue(alloc)

    async def preempt(self, alloc: Allocation) -> None:
        await self.cluster.preempt(alloc)

    async def kill(self, alloc: Allocation) -> None:
        await self.cluster.kill(alloc)

    async def trials_ended(self, run: ExperimentRun, trials: list[Trial]) -> None:
        await self.bus.publish(TrialsEnded(run, tuple(trials)))

    async def rolled_back(self, run: ExperimentRun, trial: Trial, steps: int) -> None:
        await self.bus.publish(MetricsRolledBack(run.id, trial.id, trial.run_id, steps))


class _Deferred:
    """At most one pending call of an async function, made ``delay`` seconds after it is
    first asked for, as a task of its own; a failure is logged, naming ``what``."""

    def __init__(self, call: Callable[[], Awaitable[None]], what: str) -> None:
        self._call, self._what = call, what
        self._handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def ask(self, delay: float) -> None:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._handle = None
        task = asyncio.get_running_loop().create_task(self._run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        try:
            await self._call()
        except Exception as e:  # the next event tries again
            log.warning("%s could not be stored: %s", self._what, e)


class AnswerFirst:
    """Work its caller waits for only up to a point the work marks (``settled``): the rest
    goes on as a task of its own, and :meth:`caught_up` waits for those tasks."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, work: Callable[[asyncio.Future[None]], Awaitable[None]]) -> None:
        """Run ``work(settled)`` until it sets ``settled``, or ends; a failure before either
        is raised here."""
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def whole() -> None:
            try:
                await work(settled)
            finally:
                if not settled.done():
                    settled.set_result(None)

        task = asyncio.ensure_future(whole())
        await asyncio.wait((task, settled), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def caught_up(self) -> None:
        """Wait until the work that went on after its caller was answered has ended."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class ExperimentRun:
    """Drives one experiment. Made by :class:`det_hub.service.master.Master`.

    Args:
        row: The stored experiment.
        config: ``row.config`` parsed (:func:`det_hub.config.parse_experiment_config`); every
            setting the run follows is read from it.
        trials: The experiment's stored trials.
        store: Where every change is written.
        host: Runs the trials' allocations (see :class:`RunHost`).
        searcher_state, searcher_events: The search method as stored (see
            :meth:`Store.load_searcher`; :meth:`restore` reads them): None and none for a
            new experiment.
    """

    def __init__(
        self,
        row: Experiment,
        config: ExperimentConfig,
        trials: list[Trial],
        store: Store,
        host: RunHost,
        searcher_state: Mapping[str, Any] | None = None,
        searcher_events: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.row = row
        self.config = config
        self.store = store
        self.host = host
        self.lock = asyncio.Lock()
        self.trials: dict[int, Trial] = {t.id: t for t in trials}
        self.early_exits: dict[int, str] = {}
        self.done = asyncio.Event()
        # Trials told "completed" while waiting at a rung; their exit is not their end.
        self.told_to_wait: set[int] = set()
        self.max_length: int | None = config.searcher.max_units
        unit = config.searcher.length_unit
        #: What searcher lengths count: batches, records or epochs, or the 0.38 time metric.
        self.length_unit: str | None = unit.value if isinstance(unit, LengthUnit) else unit
        #: The search method as it last was: its state stored whole, then
        #: ``searcher_events`` (what it was told since) told again.
        self.searcher = SearcherJournal(row, config, searcher_state, searcher_events)
        self.method: SearchMethod = self.searcher.method
        #: Each trial's length done, as the searcher counts it.
        self.completed_lengths: dict[str, int] = self.searcher.completed_lengths
        # Inside a batch (see _batch) the searcher's state is saved, and ended trials handed
        # to the host, once, when the outermost batch ends.
        self._batch_depth = 0
        self._save_pending = self._whole_pending = False
        self._ended: list[Trial] = []
        self._done_pending = False
        # Allocations whose failure has been counted as a restart of their trial.
        self._failures_counted: set[str] = set()
        # When the progress was last figured, and figuring it again later (see
        # update_progress).
        self._progress_at = 0.0
        self._progress_later = _Deferred(lambda: self.update_progress(now=True),
                                         f"experiment {row.id}: its progress")
        # The trials by the searcher's request id.
        self._by_request: dict[str, Trial] = {t.request_id: t for t in trials}
        #: What the searcher asked for on validations already answered (see on_validation).
        self.after_answers = AnswerFirst()
        # Set while a validation's actions are carried out: the reporting trial's request id,
        # and what its report waits on (the trial's own fate settled).
        self._answering: tuple[str, asyncio.Future[None]] | None = None

    @classmethod
    async def restore(cls, row: Experiment, config: ExperimentConfig, trials: list[Trial],
                      store: Store, host: RunHost) -> ExperimentRun:
        """The run of a stored experiment (after a master restart, or to continue it): its
        search method as it last was, with the events stored after its whole state."""
        return cls(row, config, trials, store, host, *await store.load_searcher(row.id))

    # --- properties ---------------------------------------------------------------------
    @property
    def id(self) -> int:
        return self.row.id

    @property
    def state(self) -> ExperimentState:
        return ExperimentState(self.row.state)

    # --- start and recovery -------------------------------------------------------------
    async def start(self) -> None:
        """Start a new experiment: ask the searcher for its first trials."""
        async with self.lock:
            if self.state == E.ACTIVE:
                await self._apply(self.searcher.tell({"event": "initial"}), decided=True)

    async def recover(self) -> None:
        """Continue after a master restart: requeue what should run, finish what is done.

        Allocations that survived the restart were adopted by the master before this runs.
        """
        async with self.lock:
            for trial in self.trials.values():
                state = TrialState(trial.state)
                if self.host.allocation(trial.id) is not None:
                    continue
                if state == T.ACTIVE and self.state == E.ACTIVE:
                    await self._run_or_wait(trial)
                elif state.stopping:
                    await self._close_trial(trial, _stopped_state(state))
                elif state == T.ACTIVE and self.state == E.PAUSED:
                    await self._set_trial_state(trial, T.PAUSED)
            await self._maybe_finish()

    # --- user actions -------------------------------------------------------------------
    async def pause(self) -> None:
        async with self.lock:
            await self._set_state(E.PAUSED)
            for trial in self.trials.values():
                if TrialState(trial.state) == T.ACTIVE:
                    await self._set_trial_state(trial, T.PAUSED)
                    alloc = self.host.allocation(trial.id)
                    if alloc is None:
                        continue
                    if await self.host.dequeue(alloc):
                        await self._set_run_state(trial, None)
                    else:
                        await self.host.preempt(alloc)

    async def activate(self) -> None:
        async with self.lock:
            await self._set_state(E.ACTIVE)
            for trial in self.trials.values():
                if TrialState(trial.state) == T.PAUSED:
                    await self._set_trial_state(trial, T.ACTIVE)
                    # A trial still checkpointing from the pause is requeued when it exits.
                    if self.host.allocation(trial.id) is None:
                        await self._run_or_wait(trial)
            if not self.trials and not self.method.shutdown:
                await self._apply(self.searcher.tell({"event": "initial"}), decided=True)

    async def cancel(self) -> None:
        """Stop gracefully (``det experiment cancel``): running trials are asked to stop as a
        pause asks them (they checkpoint and exit) and end CANCELED, as does the experiment.
        A :meth:`kill` afterwards still stops them at once."""
        await self._stop(gracefully=True)

    async def kill(self) -> None:
        """Stop now: running trials are killed and end CANCELED, as does the experiment."""
        await self._stop(gracefully=False)

    async def _stop(self, *, gracefully: bool) -> None:
        async with self.lock:
            if self.state.terminal:
                return
            await self._set_state(E.STOPPING_CANCELED)
            for trial in self.trials.values():
                if TrialState(trial.state).terminal:
                    continue
                alloc = self.host.allocation(trial.id)
                if alloc is None or await self.host.dequeue(alloc):
                    await self._close_trial(trial, T.CANCELED)
                    continue
                await self._set_trial_state(trial, T.STOPPING_CANCELED)
                if gracefully:
                    await self.host.preempt(alloc)
                else:
                    await self.host.kill(alloc)
            await self._maybe_finish()

    async def continue_trials(self, trials: list[Trial]) -> None:
        """Reopen finished trials and train them on from their latest checkpoints
        (``det-hub experiment continue``); the experiment is ACTIVE again.

        Raises:
            ValueError: The search method cannot take one of them back; nothing was changed.
        """
        async with self.lock:
            for trial in trials:  # raises before anything changed
                self.searcher.tell({"event": "reopen", "request_id": trial.request_id})
            await self._set_state(E.ACTIVE)
            for trial in trials:
                self.told_to_wait.discard(trial.id)
                self.early_exits.pop(trial.id, None)
                trial.restarts, trial.ended_at = 0, None
                await self.store.update_trial(trial.id, restarts=0, ended_at=None)
                await self._set_trial_state(trial, T.ACTIVE)
                start = f"checkpoint {trial.latest_checkpoint}" if trial.latest_checkpoint \
                    else "the beginning (it has no checkpoint)"
                await trial_system_log(self.store, trial, "the experiment was continued; the "
                                       f"trial trains on from {start}")
                await self._request(trial)
            await self._save_searcher()

    # --- events from training code ------------------------------------------------------
    async def on_validation(self, trial: Trial, length: int, metric: float) -> None:
        """The trial reported the searcher metric after ``length`` units of training.

        Both a validation report and the completion of a searcher operation arrive here; the
        second report of the same length is dropped, so the searcher sees each result once.

        Returns once the trial's own fate is settled, which its report answers: stopped (its
        state stored as stopping, its allocation asked to stop) or training on. What else the
        searcher asked for (the trial that takes its slots, its own state saved) is carried
        out after, under the run's lock as before: a stopped trial exits meanwhile, and its
        exit is handled, and its slots handed on, only once that is done. A failure before the
        answer fails the report; one after it is logged, naming the experiment.
        """
        async def take(settled: asyncio.Future[None]) -> None:
            async with self.lock:
                if length <= self.completed_lengths.get(trial.request_id, -1):
                    return
                if TrialState(trial.state).terminal:
                    return
                actions = self.searcher.tell({
                    "event": "validation", "request_id": trial.request_id,
                    "metric": nonfinite.encode(metric), "length": length})
                if not any(isinstance(a, Stop) and a.request_id == trial.request_id
                           for a in actions):
                    settled.set_result(None)  # it trains on: nothing below changes that
                self._answering = (trial.request_id, settled)
                try:
                    await self._apply(actions, decided=True)
                except Exception as e:
                    if not settled.done():
                        raise  # not answered yet: the report fails
                    log.error("experiment %d: carrying out what the searcher decided on trial "
                              "%d's validation failed after the trial was answered: %s",
                              self.id, trial.id, e, exc_info=e)
                finally:
                    self._answering = None

        await self.after_answers.run(take)

    def operation(self, trial: Trial) -> dict[str, Any]:
        target = self.method.target_length(trial.request_id)
        if target is None:
            return {"operation": None, "completed": False}
        completed = self.completed_lengths.get(trial.request_id, 0)
        if completed >= target:
            if self.method.is_waiting(trial.request_id):
                self.told_to_wait.add(trial.id)
            return {"operation": None, "completed": True}
        validate_at = [n for n in self.method.validation_lengths(trial.request_id)
                       if n > completed]
        return {"operation": {"length": target, "validate_at": validate_at}, "completed": False}

    async def on_early_exit(self, trial: Trial, reason: str) -> None:
        self.early_exits[trial.id] = reason

    async def on_progress(self, trial: Trial, progress: float) -> None:
        trial.progress = progress
        await self.store.update_trial(trial.id, progress=progress)
        await self.update_progress()

    # --- events from the cluster --------------------------------------------------------
    async def on_run_state(self, trial_id: int, run_state: str) -> None:
        """The trial's allocation moved on (STARTING, RUNNING)."""
        trial = self.trials.get(trial_id)
        if trial is not None:
            await self._set_run_state(trial, run_state)

    async def on_allocation_exit(self, alloc: Allocation, status: ExitStatus) -> None:
        async with self.lock:
            trial = self.trials.get(alloc.spec.trial_id or -1)
            if trial is None:
                return
            # The cluster hands an exit over again when handling it failed (the database
            # could not be used): every write below comes before what it changes here, so
            # that handling it again carries on from what is stored.
            state = TrialState(trial.state)
            await self._set_run_state(trial, None)
            early = self.early_exits.get(trial.id)
            preempted = alloc.preempt_requested and not alloc.killed

            if state.terminal:
                return
            if state == T.STOPPING_CANCELED or self.state == E.STOPPING_CANCELED:
                await self._close_trial(trial, T.CANCELED)
            elif state == T.STOPPING_ERROR:
                await self._close_trial(trial, T.ERROR)
            elif state == T.STOPPING_COMPLETED:
                await self._close_trial(trial, T.COMPLETED)
            elif alloc.timed_out or status.resumable:
                # Killed for not stopping within the preemption timeout, or its agent's own
                # scheduler took the slots back (Slurm requeued its job): not the trial's fault.
                why = f"{status.reason}; " if status.resumable and status.reason else ""
                await trial_system_log(self.store, trial, f"{why}the trial resumes "
                                       f"{_resume_point(trial)} when it gets slots again")
                if state == T.ACTIVE and self.state == E.ACTIVE:
                    await self._request(trial)
            elif early in ("INVALID_HP", "USER_REQUESTED_STOP") and status.success:
                await trial_system_log(self.store, trial, f"the trial stopped early: {early}")
                await self._close_trial(trial, T.COMPLETED, early_exit=early)
            elif early == "ERRORED" or not status.success:
                await self._on_failure(trial, alloc, status, early)
            elif preempted:
                # Checkpointed for a pause or a preemption: wait, or go again if activated.
                if state == T.ACTIVE and self.state == E.ACTIVE:
                    await self._request(trial)
            elif state == T.PAUSED:
                pass  # finished before it saw the pause; activate will run it to the end
            elif trial.id in self.told_to_wait or self.method.is_waiting(trial.request_id):
                self.told_to_wait.discard(trial.id)
                # Waiting at its rung, or promoted while it was on its way out.
                await self._run_or_wait(trial)
            else:
                await self._close_trial(trial, T.COMPLETED)
            self.early_exits.pop(trial.id, None)
            await self._maybe_finish()

    async def _on_failure(self, trial: Trial, alloc: Allocation, status: ExitStatus,
                          early: str | None) -> None:
        if early == "ERRORED":
            why = "the training code reported an error"
        elif status.exit_code is not None:
            why = f"the trial's process exited with code {status.exit_code}"
        elif status.signal:
            why = f"the trial's process was killed by {status.signal}"
        else:
            why = status.reason or "the trial's process failed"
        if status.reason and status.reason not in why:
            why += f" ({status.reason})"
        max_restarts = self.config.max_restarts
        counted = alloc.id in self._failures_counted  # handled before, up to a failed write
        if counted or (trial.restarts < max_restarts and self.state in (E.ACTIVE, E.PAUSED)):
            if not counted:
                await self.store.update_trial(trial.id, restarts=trial.restarts + 1)
                trial.restarts += 1
                self._failures_counted.add(alloc.id)
            await trial_system_log(
                self.store, trial, f"{why}; restarting {_resume_point(trial)} (restart "
                                   f"{trial.restarts} of {max_restarts})")
            if self.state == E.ACTIVE and TrialState(trial.state) == T.ACTIVE:
                await self._request(trial)
        else:
            await trial_system_log(
                self.store, trial,
                f"{why}; the trial has failed (max_restarts={max_restarts} restarts used)"
                if max_restarts else f"{why}; the trial has failed")
            await self._close_trial(trial, T.ERROR, early_exit="ERRORED")

    # --- internals ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _batch(self) -> AsyncIterator[None]:
        """Within, saving the searcher's state and handing ended trials to the host wait for
        the end of the outermost batch, and happen once there: a search that closes out stops
        its waiting trials with one save and one checkpoint GC pass, not one per trial. If the
        body fails, what waits is done at the end of the next batch."""
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
        if self._batch_depth:
            return
        if self._save_pending:
            await self._save_searcher()
        if self._ended:
            ended = list(self._ended)
            await self.host.trials_ended(self, ended)
            del self._ended[:len(ended)]
        if self._done_pending:
            self._done_pending = False
            self.done.set()

    async def _apply(self, actions: list[Action], *, decided: bool = False) -> None:
        """Carry out the search method's actions; ``decided``: it answered them to what it
        was just told, so its state is saved (once, as the batch ends)."""
        async with self._batch():
            self._save_pending |= decided
            for action in actions:
                if isinstance(action, Create) and action.request_id in self._by_request:
                    # The master stopped after creating this trial and before saving the search
                    # state; the restored search asks for it again. It is the same trial, which
                    # recover() already queued if it is to run.
                    await self._apply(self.searcher.tell({"event": "created",
                                                  "request_id": action.request_id}))
                elif isinstance(action, Create):
                    # In an active experiment the trial is made queued, its first run numbered:
                    # one write, where a trial that runs again needs several (see _request).
                    active = self.state == E.ACTIVE
                    trial = await self.store.create_trial(
                        experiment_id=self.id, request_id=action.request_id,
                        hparams=dict(action.hparams),
                        seed=_trial_seed(self.row.seed, len(self.trials)),
                        state=(T.ACTIVE if active else T.PAUSED).value,
                        run_state="QUEUED" if active else None, run_id=1 if active else 0)
                    self.trials[trial.id] = trial
                    self._by_request[trial.request_id] = trial
                    await self._apply(self.searcher.tell({"event": "created",
                                                  "request_id": action.request_id}))
                    if active and trial.run_state == "QUEUED":
                        await self._request(trial, first_run=True)
                elif isinstance(action, ValidateAfter):
                    # A promotion: a trial waiting at its rung goes back to a slot. A running
                    # trial picks the new target up when it asks for its next operation.
                    promoted = self._by_request.get(action.request_id)
                    if promoted is not None and promoted.run_state == WAITING \
                            and TrialState(promoted.state) == T.ACTIVE and self.state == E.ACTIVE:
                        await self._request(promoted)
                elif isinstance(action, Stop):
                    stopping = self._by_request.get(action.request_id)
                    if stopping is not None and TrialState(stopping.state) == T.ACTIVE:
                        await self._set_trial_state(stopping, T.STOPPING_COMPLETED)
                        alloc = self.host.allocation(stopping.id)
                        if alloc is None or await self.host.dequeue(alloc):
                            await self._close_trial(stopping, T.COMPLETED)
                        else:
                            await self.host.preempt(alloc)
                    if self._answering is not None and self._answering[0] == action.request_id \
                            and not self._answering[1].done():
                        self._answering[1].set_result(None)  # its report is answered now
                elif isinstance(action, Shutdown):
                    target = E.STOPPING_ERROR if action.failure else E.STOPPING_COMPLETED
                    if not self.state.terminal and self.state != target \
                            and self.state != E.STOPPING_CANCELED:
                        await self._set_state(target)

    async def _run_or_wait(self, trial: Trial) -> None:
        """Queue an active trial, unless it waits at its rung for the searcher (having done
        its length there)."""
        target = self.method.target_length(trial.request_id)
        done = target is not None and self.completed_lengths.get(trial.request_id, 0) >= target
        if self.method.is_waiting(trial.request_id) and done:
            await self._set_run_state(trial, WAITING)
        else:
            await self._request(trial)

    async def _request(self, trial: Trial, *, first_run: bool = False) -> None:
        """Queue the trial's next run (``first_run``: a new trial, made with its first run
        numbered)."""
        if self.host.allocation(trial.id) is not None:
            # Queued already, by an earlier try at this event that failed after it.
            await self._set_run_state(trial, "QUEUED")
            return
        # QUEUED is written before the launch: once launched, the allocation may report
        # STARTING at any await, and that must not be overwritten by a late QUEUED. It comes
        # before the new run too, so that a failed write leaves no run to be counted twice.
        await self._set_run_state(trial, "QUEUED")
        if not first_run:
            steps, rolled_back = await start_trial_run(self.store, trial, self.row)
            if rolled_back:
                await self.host.rolled_back(self, trial, steps)
        try:
            await self.host.launch(self.row, self.config, trial)
        except LaunchRefused as e:
            await trial_system_log(self.store, trial,
                                   f"the trial cannot start: {e}; it has failed")
            await self._close_trial(trial, T.ERROR, early_exit="ERRORED")
            await self._maybe_finish()

    async def _set_run_state(self, trial: Trial, run_state: str | None) -> None:
        if trial.run_state != run_state:
            await self.store.update_trial(trial.id, run_state=run_state)
            trial.run_state = run_state

    async def _close_trial(self, trial: Trial, state: TrialState,
                           early_exit: str | None = None) -> None:
        async with self._batch():
            check_trial_transition(TrialState(trial.state), state)
            # Its state and its end in one write, and only then here: a write that fails leaves
            # the trial as it was, for the event to be handled again.
            ended_at = utcnow()
            await self.store.update_trial(trial.id, state=state.value, ended_at=ended_at,
                                          run_state=None)
            trial.state, trial.ended_at, trial.run_state = state.value, ended_at, None
            rid = trial.request_id
            if early_exit is not None or state == T.ERROR:
                actions = self.searcher.tell({"event": "exited_early", "request_id": rid,
                                              "reason": early_exit or "ERRORED"})
            elif state == T.CANCELED:
                actions = []
            else:
                actions = self.searcher.tell({"event": "closed", "request_id": rid})
            if self.state != E.STOPPING_CANCELED:
                await self._apply(actions)
            self._save_pending = True
            self._ended.append(trial)

    async def _maybe_finish(self) -> None:
        if not all(TrialState(t.state).terminal for t in self.trials.values()):
            return
        final = {E.STOPPING_COMPLETED: E.COMPLETED, E.STOPPING_CANCELED: E.CANCELED,
                 E.STOPPING_ERROR: E.ERROR}.get(self.state)
        if final is None:
            return
        if final == E.COMPLETED and self.trials and all(
                TrialState(t.state) == T.ERROR for t in self.trials.values()):
            final = E.ERROR
        # The search's state is stored whole as it ends: a finished experiment keeps no events.
        await self._save_searcher(whole=True)
        await self._set_state(final)
        await self.update_progress(now=True)
        if self._batch_depth:
            self._done_pending = True  # once what the batch holds back is done
        else:
            self.done.set()

    async def _set_state(self, target: ExperimentState) -> None:
        check_experiment_transition(self.state, target)
        if target == self.state:
            return
        fields: dict[str, Any] = {"state": target.value}
        if target.terminal:
            fields["ended_at"] = utcnow()
        elif self.state.terminal:
            fields["ended_at"] = None  # continued
        self.row = await self.store.update_experiment(self.id, **fields)
        log.info("experiment %d is %s", self.id, target.value)

    async def _set_trial_state(self, trial: Trial, target: TrialState) -> None:
        check_trial_transition(TrialState(trial.state), target)
        if target.value == trial.state:
            return
        await self.store.update_trial(trial.id, state=target.value)
        trial.state = target.value

    async def _save_searcher(self, *, whole: bool = False) -> None:
        """Store what the search method was told (see :meth:`SearcherJournal.save`), and
        the progress; within a batch, once at its end."""
        if self._batch_depth:
            self._save_pending = True
            self._whole_pending |= whole
            return
        await self.searcher.save(self.store, self.id, len(self.trials),
                                 whole=whole or self._whole_pending)
        self._save_pending = self._whole_pending = False
        await self.update_progress()

    async def update_progress(self, *, now: bool = False, later: bool = False) -> None:
        """Figure the experiment's progress again from its trials and the searcher, and store
        it if it changed. Figuring it walks every trial: for a search of more than
        :data:`PROGRESS_EXACT_TRIALS` trials it is done at most once every
        :data:`PROGRESS_INTERVAL` seconds (unless ``now``), and a change in between is
        figured at the end of the interval. ``later``: it is done as a task of its own,
        which the caller does not wait for (a metric report's answer: a write less between
        a trial's rung and the searcher's decision reaching the trial)."""
        wait = 0.0
        if not now and len(self.trials) > PROGRESS_EXACT_TRIALS:
            wait = self._progress_at + PROGRESS_INTERVAL - time.monotonic()
        if later or wait > 0:
            self._progress_later.ask(max(wait, 0.0))
            return
        self._progress_at = time.monotonic()
        done: dict[str, int] = {}
        for t in self.trials.values():
            length = self.completed_lengths.get(t.request_id, 0)
            if self.max_length and t.progress is not None:
                length = max(length, round(t.progress * self.max_length))
            elif self.length_unit == "batches":
                length = max(length, t.steps_completed or 0)
            done[t.request_id] = length
        progress = 1.0 if self.state == E.COMPLETED else self.method.progress(done)
        planned = self.method.planned_trials()
        if not self.max_length and planned:
            # Each trial's length is its own (Trainer.fit's): the search is as far along as
            # its trials say they are, a finished trial counting whole.
            fractions = [1.0 if TrialState(t.state).terminal else (t.progress or 0.0)
                         for t in self.trials.values()]
            progress = max(progress, min(1.0, sum(fractions) / max(planned, len(fractions))))
        if self.row.progress != progress:
            self.row = await self.store.update_experiment(self.id, progress=progress)


async def start_trial_run(store: Store, trial: Trial,
                          experiment: Experiment) -> tuple[int, int]:
    """Number the trial's next run, which trains on from its latest checkpoint (or from the
    beginning), and roll back what earlier runs reported past that point: those rows no
    longer count, and the trial's figures are recomputed from what is left. The searcher
    keeps what it saw; a result it already has is not given to it twice.

    Returns:
        The steps the run starts from, and how many rows were rolled back.
    """
    steps = 0
    if trial.latest_checkpoint:
        checkpoint = await store.get_checkpoint(trial.latest_checkpoint)
        steps = checkpoint.steps_completed if checkpoint is not None else 0
    trial.run_id, rolled_back = await store.start_trial_run(trial.id, steps)
    if rolled_back:
        await trial_system_log(
            store, trial, f"run {trial.run_id} trains on {_resume_point(trial)}: "
            + (f"{rolled_back} metric rows reported past step {steps} are"
               if rolled_back > 1 else f"1 metric row reported past step {steps} is")
            + " rolled back")
    if not rolled_back and (trial.steps_completed or 0) <= steps:
        return steps, 0
    kept = await store.get_metrics(trial.id, group="validation")
    fields: dict[str, Any] = {
        "steps_completed": steps, "latest_validation": None, "best_validation": None,
        "searcher_metric_value": None,
        **validation_fields(
            [{"steps_completed": m.steps_completed, "metrics": m.metrics} for m in kept],
            experiment.searcher_metric, experiment.smaller_is_better, None),
    }
    await store.update_trial(trial.id, **fields)
    for key, value in fields.items():
        setattr(trial, key, value)
    return steps, rolled_back


async def trial_system_log(store: Store, trial: Trial, message: str) -> None:
    """Store a line of the master's own in a trial's log (stdtype ``system``)."""
    await store.add_logs([{
        "trial_id": trial.id, "allocation_id": None, "timestamp": datetime.now(timezone.utc),
        "rank": None, "stdtype": "system", "message": message}])


def validation_length(unit: str | None, steps_completed: int,
                  metrics: dict[str, Any]) -> int | None:
    """How many searcher units a validation reported at ``steps_completed`` batches stands
    for, given the experiment's length unit (:attr:`ExperimentRun.length_unit`): the time
    metric's value (0.38 configs), or batches, records or epochs trained.
    Without a searcher length the training code decides (``Trainer.fit(max_length=...)``);
    its validations still reach the searcher, counted in batches."""
    if unit is None:
        return steps_completed
    value = metrics.get(unit)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)  # a fraction of an epoch does not reach the next whole one
    return steps_completed if unit == "batches" else None


def _resume_point(trial: Trial) -> str:
    if trial.latest_checkpoint:
        return f"from checkpoint {trial.latest_checkpoint}"
    return "from the beginning (no checkpoint yet)"


def validation_fields(rows: list[dict[str, Any]], metric: str, smaller_is_better: bool,
                      best: float | None) -> dict[str, Any]:
    """The trial fields that validation rows set: ``latest_validation`` (the row with the most
    steps), and ``searcher_metric_value`` with its ``best_validation`` row when one of them
    beats ``best`` (the trial's best so far, None for none). A NaN beats nothing; infinities
    compare as numbers."""
    if not rows:
        return {}
    last = max(rows, key=lambda r: r["steps_completed"])
    fields: dict[str, Any] = {"latest_validation": {"steps_completed": last["steps_completed"],
                                                    "metrics": last["metrics"]}}
    for r in rows:
        value = r["metrics"].get(metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            continue  # a NaN is the worst result: it never becomes the best
        if best is None or (value < best if smaller_is_better else value > best):
            best = float(value)
            fields["searcher_metric_value"] = best
            fields["best_validation"] = {"steps_completed": r["steps_completed"],
                                         "metrics": r["metrics"]}
    return fields


def _stopped_state(state: TrialState) -> TrialState:
    return {T.STOPPING_COMPLETED: T.COMPLETED, T.STOPPING_CANCELED: T.CANCELED,
            T.STOPPING_ERROR: T.ERROR}[state]


def _trial_seed(experiment_seed: int, index: int) -> int:
    # Distinct, reproducible per trial; kept in 31 bits for frameworks that want an int32.
    return (experiment_seed * 1_000_003 + index * 7_919) % (2**31 - 1)

