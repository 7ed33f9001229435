"""``ExperimentRun`` on its own: a real store on SQLite, and a fake host in place of the master's
cluster, so that no process is started.

The tests play the cluster's part (an allocation starts, exits, is preempted) and the training
code's (validations, progress, checkpoints) by calling the run as the master does, and check
the states the run stores, its counts, and what it asked of the host.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from det_hub.agents import ExitStatus
from det_hub.config import ExperimentConfig, parse_experiment_config
from det_hub.searcher import Action, AsyncHalvingSearch, build_search_method
from det_hub.service import searcher_journal
from det_hub.service.cluster import Allocation, LaunchSpec
from det_hub.service.experiment import (
    WAITING,
    ExperimentRun,
    LaunchRefused,
    RunHost,
    validation_length,
)
from det_hub.service.searcher_journal import tell_searcher
from det_hub.states import AllocationState, CheckpointState, ExperimentState, TrialState
from det_hub.store import Store, StoreUnavailable
from det_hub.store.models import Experiment, Trial

E, T = ExperimentState, TrialState


class FakeHost:
    """A :class:`RunHost` that keeps allocations in a dict and records every call.

    ``calls`` lists ``(what, trial_id)`` in order: ``launch``, ``dequeue``, ``preempt`` and
    ``kill``; ``ended`` lists ``(trial_id, state)`` for each trial :meth:`trials_ended` got. Like the
    cluster, it dequeues only allocations that have not started, and an allocation that exits
    is no longer the trial's before the run hears of it.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.ended: list[tuple[int, str]] = []
        #: How many trials each call of trials_ended handed over.
        self.ended_together: list[int] = []
        #: ``(trial_id, run_id, steps)`` of each rollback announced.
        self.rolled_back_at: list[tuple[int, int, int]] = []
        self.open: dict[int, Allocation] = {}
        #: When set, launches are refused with this message.
        self.refusal: str | None = None
        self._launched = 0

    # --- the protocol -------------------------------------------------------------------
    async def launch(self, experiment: Experiment, config: ExperimentConfig,
                     trial: Trial) -> None:
        if self.refusal is not None:
            raise LaunchRefused(self.refusal)
        self._launched += 1
        spec = LaunchSpec(owner="alice", slots=1, argv=["python3", "train.py"], env={},
                          cluster_info={}, context=None, trial_id=trial.id,
                          experiment_id=experiment.id)
        self.open[trial.id] = Allocation(f"{trial.id}.{self._launched}", spec, token="")
        self.calls.append(("launch", trial.id))

    def allocation(self, trial_id: int) -> Allocation | None:
        return self.open.get(trial_id)

    async def dequeue(self, alloc: Allocation) -> bool:
        trial_id = _trial_id(alloc)
        self.calls.append(("dequeue", trial_id))
        if alloc.state != AllocationState.QUEUED:
            return False
        del self.open[trial_id]
        alloc.state = AllocationState.TERMINATED
        return True

    async def preempt(self, alloc: Allocation) -> None:
        self.calls.append(("preempt", _trial_id(alloc)))
        alloc.preempt_requested = True

    async def kill(self, alloc: Allocation) -> None:
        self.calls.append(("kill", _trial_id(alloc)))
        alloc.killed = True

    async def trials_ended(self, run: ExperimentRun, trials: list[Trial]) -> None:
        self.ended.extend((trial.id, trial.state) for trial in trials)
        self.ended_together.append(len(trials))

    async def rolled_back(self, run: ExperimentRun, trial: Trial, steps: int) -> None:
        self.calls.append(("rolled_back", trial.id))
        self.rolled_back_at.append((trial.id, trial.run_id, steps))

    # --- the cluster's side, driven by the tests ----------------------------------------
    def launches(self, trial_id: int | None = None) -> int:
        return sum(1 for what, tid in self.calls
                   if what == "launch" and trial_id in (None, tid))

    async def start(self, run: ExperimentRun, trial: Trial) -> None:
        """The trial's queued allocation gets slots and runs."""
        self.open[trial.id].state = AllocationState.RUNNING
        await run.on_run_state(trial.id, AllocationState.RUNNING)

    async def exit(self, run: ExperimentRun, trial: Trial, exit_code: int | None = 0, *,
                   timed_out: bool = False, resumable: str | None = None) -> None:
        """The trial's allocation ends with ``exit_code`` (None: killed by a signal);
        ``timed_out``: killed for not stopping within the preemption timeout; ``resumable``:
        why its agent's own scheduler took the slots back (a Slurm requeue)."""
        alloc = self.open.pop(trial.id)
        alloc.state = AllocationState.TERMINATED
        if timed_out:
            alloc.killed = alloc.timed_out = True
        status = ExitStatus(exit_code, signal="SIGKILL" if exit_code is None else None,
                            reason=resumable, resumable=resumable is not None)
        await run.on_allocation_exit(alloc, status)


def _trial_id(alloc: Allocation) -> int:
    assert alloc.spec.trial_id is not None
    return alloc.spec.trial_id


@pytest.fixture
async def store(sqlite_url: str) -> AsyncIterator[Store]:
    """An open store on a fresh SQLite database."""
    opened = await Store.open(sqlite_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


def config(searcher: dict[str, Any] | None = None, **extra: Any) -> ExperimentConfig:
    doc: dict[str, Any] = {
        "name": "t", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10},
                     **(searcher or {})}}
    doc.update(extra)
    return parse_experiment_config(doc)


def asha(**searcher: Any) -> ExperimentConfig:
    """``async_halving`` over two trials that train at once, with rungs at 8 and 16 batches."""
    return config({"name": "async_halving", "max_length": {"batches": 16}, "max_trials": 2,
                   "max_concurrent_trials": 2, "num_rungs": 2, "divisor": 2, **searcher})


async def new_run(store: Store, host: RunHost, cfg: ExperimentConfig, *,
                  state: ExperimentState = E.ACTIVE) -> ExperimentRun:
    """Store an experiment of ``cfg`` as the master does, and start its run."""
    owner = await store.get_user("alice") or await store.create_user("alice")
    row = await store.create_experiment(
        name=cfg.name, owner_id=owner.id, config=cfg.to_dict(), original_config="",
        context=None, state=state.value, searcher_metric=cfg.searcher.metric,
        smaller_is_better=cfg.searcher.smaller_is_better, seed=7)
    run = ExperimentRun(row, cfg, [], store, host)
    await run.start()
    return run


def rungs(run: ExperimentRun) -> list[dict[str, Any]]:
    """The rungs of an ASHA search's one bracket, as the searcher view shows them."""
    assert isinstance(run.method, AsyncHalvingSearch)
    found: list[dict[str, Any]] = run.method.rung_table()["brackets"][0]["rungs"]
    return found


async def stored(store: Store, run: ExperimentRun) -> tuple[Experiment, list[Trial]]:
    row = await store.get_experiment(run.id)
    assert row is not None
    return row, await store.list_trials(run.id)


async def messages(store: Store, trial: Trial) -> list[str]:
    return [line.message for line in await store.get_logs(trial.id)]


async def checkpoint(store: Store, trial: Trial, steps: int) -> str:
    """The training code reports a completed checkpoint (as the master records one)."""
    uuid_ = str(uuid.uuid4())
    await store.add_checkpoint(
        uuid=uuid_, trial_id=trial.id, experiment_id=trial.experiment_id, allocation_id=None,
        state=CheckpointState.COMPLETED.value, steps_completed=steps, resources={},
        metadata={}, storage={})
    trial.latest_checkpoint = uuid_
    await store.update_trial(trial.id, latest_checkpoint=uuid_)
    return uuid_


async def validations(store: Store, trial: Trial, *steps: int) -> None:
    """The training code reports validations (``loss`` = 1 / steps) at these steps."""
    await store.insert_metrics(trial.id, "validation", [
        {"steps_completed": s, "metrics": {"loss": 1 / s}} for s in steps])
    trial.steps_completed = max(steps)
    await store.update_trial(trial.id, steps_completed=trial.steps_completed)


async def validated(run: ExperimentRun, trial: Trial, length: int, metric: float) -> None:
    """A validation reported, and what the searcher asked for on it carried out (its report
    is answered before that: see ExperimentRun.on_validation)."""
    await run.on_validation(trial, length, metric)
    await run.after_answers.caught_up()


def count_searcher_saves(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each store write of the search method's state: ``events`` or ``whole``."""
    saves: list[str] = []
    add, compact = store.add_searcher_events, store.compact_searcher

    async def add_events(*args: Any) -> None:
        saves.append("events")
        await add(*args)

    async def whole(*args: Any) -> Experiment:
        saves.append("whole")
        return await compact(*args)

    monkeypatch.setattr(store, "add_searcher_events", add_events)
    monkeypatch.setattr(store, "compact_searcher", whole)
    return saves


# --- a single trial ------------------------------------------------------------------------
async def test_a_single_trial_completes(store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    assert (trial.state, trial.run_state) == ("ACTIVE", "QUEUED")
    assert host.calls == [("launch", trial.id)]

    await host.start(run, trial)
    assert trial.run_state == AllocationState.RUNNING
    assert run.operation(trial) == {"operation": {"length": 10, "validate_at": []},
                                    "completed": False}
    await run.on_progress(trial, 0.5)
    assert run.row.progress == 0.5
    await validated(run, trial, 10, 0.25)
    assert run.operation(trial) == {"operation": None, "completed": True}
    assert run.state == E.ACTIVE and not run.done.is_set()

    await host.exit(run, trial, 0)
    assert run.done.is_set()
    row, [saved] = await stored(store, run)
    assert (row.state, row.progress) == ("COMPLETED", 1.0) and row.ended_at is not None
    assert (saved.state, saved.run_state, saved.restarts) == ("COMPLETED", None, 0)
    assert saved.ended_at is not None
    state, events = await store.load_searcher(run.id)
    assert state is not None and events == []  # stored whole as the search ended
    assert state["completed_lengths"] == {trial.request_id: 10}
    assert host.ended == [(trial.id, "COMPLETED")]
    assert host.calls == [("launch", trial.id)]


async def test_a_result_reported_twice_reaches_the_searcher_once(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    run = await new_run(store, host, asha())
    first, second = run.trials.values()
    seen: list[tuple[str, float, int]] = []
    on_validation = run.method.on_validation

    def spy(request_id: str, metric: float, length: int) -> list[Action]:
        seen.append((request_id, metric, length))
        return on_validation(request_id, metric, length)

    monkeypatch.setattr(run.method, "on_validation", spy)
    await host.start(run, first)
    await validated(run, first, 8, 0.5)
    await validated(run, first, 8, 0.4)  # the operation's completion at the same length
    await validated(run, first, 4, 0.1)  # shorter than a result the searcher has
    await validated(run, first, 16, 0.3)
    assert seen == [(first.request_id, 0.5, 8), (first.request_id, 0.3, 16)]
    assert run.completed_lengths == {first.request_id: 16}
    assert [r["metric"] for r in rungs(run)[0]["results"]] == [0.5]

    await run.kill()  # the queued trial ends at once, the running one once it exits
    assert second.state == "CANCELED"
    await host.exit(run, first, None)
    await validated(run, first, 32, 0.2)  # from an ended trial: dropped
    assert len(seen) == 2 and run.state == E.CANCELED


@pytest.mark.parametrize("max_restarts", [None, 0, 2])
async def test_a_failing_trial_restarts_up_to_max_restarts_then_the_experiment_errors(
        store: Store, host: FakeHost, max_restarts: int | None) -> None:
    cfg = config() if max_restarts is None else config(max_restarts=max_restarts)
    allowed = cfg.max_restarts
    assert allowed == (5 if max_restarts is None else max_restarts)  # the model's default
    run = await new_run(store, host, cfg)
    [trial] = run.trials.values()
    for restart in range(1, allowed + 1):
        await host.start(run, trial)
        await host.exit(run, trial, 3)
        assert (trial.state, trial.restarts, trial.run_state) == ("ACTIVE", restart, "QUEUED")
        assert run.state == E.ACTIVE
        assert host.launches(trial.id) == restart + 1
    await host.start(run, trial)
    await host.exit(run, trial, 3)

    assert run.done.is_set()
    row, [saved] = await stored(store, run)
    assert row.state == "ERROR" and row.progress == 1.0
    assert (saved.state, saved.restarts) == ("ERROR", allowed)
    assert host.launches() == allowed + 1 and host.ended == [(trial.id, "ERROR")]
    logs = await messages(store, trial)
    assert len(logs) == allowed + 1
    if allowed:
        assert logs[0] == (f"the trial's process exited with code 3; restarting from the "
                           f"beginning (no checkpoint yet) (restart 1 of {allowed})")
        assert logs[-1] == (f"the trial's process exited with code 3; the trial has failed "
                            f"(max_restarts={allowed} restarts used)")
    else:
        assert logs == ["the trial's process exited with code 3; the trial has failed"]


async def test_a_restart_forgets_what_was_reported_after_the_latest_checkpoint(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config(max_restarts=1))
    [trial] = run.trials.values()
    await host.start(run, trial)
    await validations(store, trial, 2, 4)
    uuid_ = await checkpoint(store, trial, 4)
    await validations(store, trial, 6)
    await host.exit(run, trial, 1)

    assert (trial.restarts, trial.steps_completed, trial.run_state) == (1, 4, "QUEUED")
    assert trial.latest_validation == {"steps_completed": 4, "metrics": {"loss": 0.25}}
    kept = await store.get_metrics(trial.id, group="validation")
    assert [m.steps_completed for m in kept] == [2, 4]
    [gone] = await store.rolled_back_metrics(trial.id)
    assert (gone.steps_completed, gone.trial_run, gone.rolled_back_by_run) == (6, 1, 2)
    [saved] = await store.list_trials(run.id)
    assert (saved.steps_completed, saved.restarts, saved.run_id) == (4, 1, 2)
    assert (await messages(store, trial)) == [
        f"the trial's process exited with code 1; restarting from checkpoint {uuid_} "
        "(restart 1 of 1)",
        f"run 2 trains on from checkpoint {uuid_}: 1 metric row reported past step 4 is "
        "rolled back"]


async def test_a_trial_requeued_after_a_master_restart_rolls_back_past_its_checkpoint(
        store: Store, host: FakeHost) -> None:
    """A trial whose allocation did not survive a master restart starts a new run from its
    checkpoint: what it reported past that is rolled back, so each step counts once."""
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await host.start(run, trial)
    await validations(store, trial, 2, 4)
    uuid_ = await checkpoint(store, trial, 4)
    await validations(store, trial, 6, 8)
    # The master stops; the allocation is gone when it starts again.
    row, trials = await stored(store, run)
    after = FakeHost()
    recovered = await ExperimentRun.restore(row, parse_experiment_config(row.config), trials,
                                            store, after)
    await recovered.recover()
    [trial] = recovered.trials.values()
    assert after.calls == [("rolled_back", trial.id), ("launch", trial.id)]
    assert trial.run_id == 2 and after.rolled_back_at == [(trial.id, 2, 4)]
    assert trial.steps_completed == 4
    assert trial.latest_validation == {"steps_completed": 4, "metrics": {"loss": 0.25}}
    assert [m.steps_completed for m in await store.get_metrics(trial.id)] == [2, 4]
    assert [m.steps_completed for m in await store.rolled_back_metrics(trial.id)] == [6, 8]
    assert await messages(store, trial) == [
        f"run 2 trains on from checkpoint {uuid_}: 2 metric rows reported past step 4 are "
        "rolled back"]


@pytest.mark.parametrize("failing", ["start_trial_run", "update_trial"])
async def test_an_exit_handled_again_after_a_failed_write_counts_one_restart(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """The cluster hands an exit over again when the database failed while it was handled:
    the trial restarts once, queued once, whichever write failed (its new run's, or its
    queued state once the allocation was asked for)."""
    run = await new_run(store, host, config(max_restarts=3))
    [trial] = run.trials.values()
    await host.start(run, trial)
    alloc = host.open.pop(trial.id)
    alloc.state = AllocationState.TERMINATED
    real = getattr(store, failing)
    failed: list[str] = []

    async def once(*args: Any, **fields: Any) -> Any:
        if not failed and (failing == "start_trial_run" or fields.get("run_state") == "QUEUED"):
            failed.append(failing)
            raise StoreUnavailable("connection refused")
        return await real(*args, **fields)

    monkeypatch.setattr(store, failing, once)
    status = ExitStatus(3)
    with pytest.raises(StoreUnavailable):
        await run.on_allocation_exit(alloc, status)
    assert failed == [failing]
    await run.on_allocation_exit(alloc, status)
    [saved] = await store.list_trials(run.id)
    assert (trial.restarts, trial.run_state, saved.restarts, saved.run_state) == (
        1, "QUEUED", 1, "QUEUED")
    assert host.launches(trial.id) == 2 and saved.run_id == 2


async def test_a_refused_launch_fails_the_trial(store: Store, host: FakeHost) -> None:
    host.refusal = "checkpoint 1234 does not exist or is not complete"
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    assert run.done.is_set() and run.state == E.ERROR
    assert (trial.state, trial.run_state, trial.restarts) == ("ERROR", None, 0)
    assert host.calls == [] and host.ended == [(trial.id, "ERROR")]
    assert await messages(store, trial) == [
        "the trial cannot start: checkpoint 1234 does not exist or is not complete; it has "
        "failed"]


# --- ASHA ----------------------------------------------------------------------------------
async def test_a_stopped_trial_is_answered_before_the_trial_that_follows_it_is_made(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report that stops a trial at its rung returns once the stop is stored and the
    allocation asked to stop; the trial the searcher makes in its place is made after, under
    the run's lock, so the stopped trial's exit is handled only once that is done."""
    run = await new_run(store, host, asha(max_trials=3))
    good, bad = run.trials.values()
    for trial in (good, bad):
        await host.start(run, trial)
    await validated(run, good, 8, 0.5)
    release = asyncio.Event()
    create = store.create_trial

    async def held_create(**fields: Any) -> Trial:
        await release.wait()
        return await create(**fields)

    monkeypatch.setattr(store, "create_trial", held_create)
    await asyncio.wait_for(run.on_validation(bad, 8, 0.9), 10)
    assert bad.state == "STOPPING_COMPLETED" and ("preempt", bad.id) in host.calls
    assert len(run.trials) == 2 and run.lock.locked()
    exit_handled = asyncio.ensure_future(host.exit(run, bad, 0))
    await asyncio.sleep(0.05)
    assert not exit_handled.done() and bad.state == "STOPPING_COMPLETED"

    release.set()
    await run.after_answers.caught_up()
    await exit_handled
    assert bad.state == "COMPLETED" and len(run.trials) == 3
    [third] = [t for t in run.trials.values() if t not in (good, bad)]
    assert host.calls[-1] == ("launch", third.id) or ("launch", third.id) in host.calls
    _, trials = await stored(store, run)
    assert [t.state for t in trials] == ["ACTIVE", "COMPLETED", "ACTIVE"]


async def test_a_failure_after_a_validation_is_answered_is_logged(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """What fails once the report was answered cannot fail the report: it is logged, naming
    the experiment."""
    run = await new_run(store, host, asha(max_trials=3))
    good, bad = run.trials.values()
    for trial in (good, bad):
        await host.start(run, trial)
    await validated(run, good, 8, 0.5)

    async def refused(**fields: Any) -> Trial:
        raise StoreUnavailable("down for the test")

    monkeypatch.setattr(store, "create_trial", refused)
    await run.on_validation(bad, 8, 0.9)
    assert bad.state == "STOPPING_COMPLETED"
    await run.after_answers.caught_up()
    assert not run.lock.locked()
    assert any(f"experiment {run.id}: carrying out what the searcher decided on trial "
               f"{bad.id}'s validation failed after the trial was answered" in r.getMessage()
               and r.levelname == "ERROR" for r in caplog.records)


async def test_asha_stops_a_trial_that_ranks_below_its_rung(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, asha())  # stop_once: true
    good, bad = run.trials.values()
    assert host.calls == [("launch", good.id), ("launch", bad.id)]
    for trial in (good, bad):
        await host.start(run, trial)
        assert run.operation(trial) == {"operation": {"length": 16, "validate_at": [8]},
                                        "completed": False}

    await validated(run, good, 8, 0.5)
    assert TrialState(good.state) == T.ACTIVE
    await validated(run, bad, 8, 0.9)
    # Below the best half of its rung: stopped; it has started, so it is asked to checkpoint.
    assert bad.state == "STOPPING_COMPLETED"
    assert host.calls[-2:] == [("dequeue", bad.id), ("preempt", bad.id)]
    await host.exit(run, bad, 0)
    assert (bad.state, bad.run_state) == ("COMPLETED", None)
    assert run.state == E.ACTIVE

    await validated(run, good, 16, 0.2)
    await host.exit(run, good, 0)
    row, trials = await stored(store, run)
    assert row.state == "COMPLETED" and row.progress == 1.0
    assert [t.state for t in trials] == ["COMPLETED", "COMPLETED"]
    assert host.launches() == 2
    assert host.ended == [(bad.id, "COMPLETED"), (good.id, "COMPLETED")]
    assert [r["request_ids"] for r in rungs(run)] == [[good.request_id, bad.request_id],
                                                 [good.request_id]]


async def test_asha_parks_a_trial_at_its_rung_then_promotes_it(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, asha(stop_once=False))
    good, bad = run.trials.values()
    for trial in (good, bad):
        await host.start(run, trial)
        assert run.operation(trial) == {"operation": {"length": 8, "validate_at": []},
                                        "completed": False}

    # The first result at the bottom rung promotes nobody yet: the trial waits, without a slot.
    await validated(run, good, 8, 0.5)
    assert run.operation(good) == {"operation": None, "completed": True}
    await host.exit(run, good, 0)
    assert (good.state, good.run_state) == ("ACTIVE", WAITING)
    assert host.launches(good.id) == 1
    view = rungs(run)[0]
    assert view["request_ids"] == [good.request_id] and view["promoted"] == 0

    # The second result promotes the first trial, which gets a slot again, and stops itself.
    await validated(run, bad, 8, 0.9)
    assert (good.state, good.run_state) == ("ACTIVE", "QUEUED")
    assert host.launches(good.id) == 2
    assert bad.state == "STOPPING_COMPLETED"
    assert host.calls[-2:] == [("dequeue", bad.id), ("preempt", bad.id)]
    await host.exit(run, bad, 0)
    assert bad.state == "COMPLETED" and run.state == E.ACTIVE

    await host.start(run, good)
    assert run.operation(good) == {"operation": {"length": 16, "validate_at": []},
                                   "completed": False}
    await validated(run, good, 16, 0.3)
    await host.exit(run, good, 0)
    row, trials = await stored(store, run)
    assert row.state == "COMPLETED" and row.progress == 1.0
    assert [(t.state, t.restarts) for t in trials] == [("COMPLETED", 0), ("COMPLETED", 0)]
    assert host.ended == [(bad.id, "COMPLETED"), (good.id, "COMPLETED")]


async def test_a_search_that_closes_out_stops_its_waiting_trials_together(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once every trial has a result at the bottom rung, the trials waiting there that can no
    longer be promoted are stopped in that one event: with one save of the searcher's state
    and one hand-over to the host (one checkpoint GC pass), not one per trial."""
    run = await new_run(store, host, asha(stop_once=False, max_trials=6,
                                          max_concurrent_trials=6))
    trials = list(run.trials.values())
    assert len(trials) == 6
    for trial in trials:
        await host.start(run, trial)
    for i, trial in enumerate(trials[:-1]):
        await validated(run, trial, 8, 0.1 * (i + 1))
        await host.exit(run, trial, 0)  # promoted ones are queued again, the others wait
    waiting = [t for t in trials if t.run_state == WAITING]
    assert len(waiting) >= 2

    saves = count_searcher_saves(store, monkeypatch)
    host.ended_together.clear()
    await validated(run, trials[-1], 8, 0.9)  # the last result at the bottom rung
    closed = [t for t in waiting if t.state == "COMPLETED"]
    assert len(closed) >= 2 and host.ended_together == [len(closed)] and len(saves) == 1
    assert all(t.run_state is None and t.ended_at is not None for t in closed)
    [saved] = [t for t in await store.list_trials(run.id) if t.id == closed[0].id]
    assert (saved.state, saved.run_state) == ("COMPLETED", None)


async def test_the_searcher_is_stored_as_events_then_whole_and_restores_exactly(
        store: Store, host: FakeHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event stores what the method was told, not its whole state; after
    SEARCHER_EVENTS_BEFORE_WHOLE events the whole state replaces them, and when the search
    ends it is stored whole. A run restored at any point has the method exactly as it was."""
    monkeypatch.setattr(searcher_journal, "SEARCHER_EVENTS_BEFORE_WHOLE", 12)
    saves = count_searcher_saves(store, monkeypatch)
    run = await new_run(store, host, asha(stop_once=False, max_trials=6,
                                          max_concurrent_trials=6))
    assert saves == ["events"]  # the first trials, created in one batch
    trials = list(run.trials.values())
    for trial in trials:
        await host.start(run, trial)

    async def restored_matches() -> None:
        row, stored_trials = await stored(store, run)
        again = await ExperimentRun.restore(row, parse_experiment_config(row.config),
                                            stored_trials, store, FakeHost())
        assert again.method.snapshot() == run.method.snapshot()
        assert again.completed_lengths == run.completed_lengths

    for i, trial in enumerate(trials):
        await validated(run, trial, 8, 0.1 * (i + 1))
        await restored_matches()
        await host.exit(run, trial, 0)
    assert "whole" in saves and saves[0] == "events"  # 6 created + 6 validations + closes
    state, _ = await store.load_searcher(run.id)
    assert state is not None and state["events_through"] > 0
    for trial in [t for t in trials if t.run_state == "QUEUED"]:
        await host.start(run, trial)
        await validated(run, trial, 16, 0.05)
        await restored_matches()
        await host.exit(run, trial, 0)
    assert run.state == E.COMPLETED
    assert saves[-1] == "whole" and (await store.load_searcher(run.id))[1] == []


async def test_a_nonfinite_result_is_stored_and_told_again(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, asha(stop_once=False))
    good, bad = run.trials.values()
    await host.start(run, bad)
    await validated(run, bad, 8, math.nan)
    row, trials = await stored(store, run)
    [event] = [e for e in (await store.load_searcher(run.id))[1] if e["event"] == "validation"]
    assert event["metric"] == "NaN"
    again = await ExperimentRun.restore(row, parse_experiment_config(row.config), trials,
                                        store, FakeHost())
    assert again.method.snapshot() == run.method.snapshot()


def test_an_unknown_searcher_event_is_refused_with_its_number(store: Store) -> None:
    method = build_search_method(config().searcher, {}, 7)
    with pytest.raises(ValueError, match="searcher event 9: unknown kind 'jump'"):
        tell_searcher(method, {}, {"event": "jump", "seq": 9})


# --- pause, activate, preemption -----------------------------------------------------------
async def test_pause_checkpoints_a_running_trial_and_activate_resumes_it(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await host.start(run, trial)
    await run.pause()
    assert run.state == E.PAUSED and trial.state == "PAUSED"
    assert host.calls == [("launch", trial.id), ("dequeue", trial.id), ("preempt", trial.id)]

    # The training code checkpoints and exits: the trial waits for activation, no restart.
    await checkpoint(store, trial, 5)
    await host.exit(run, trial, 0)
    assert (trial.state, trial.run_state, trial.restarts) == ("PAUSED", None, 0)
    assert host.launches() == 1 and host.allocation(trial.id) is None
    row, [saved] = await stored(store, run)
    assert (row.state, saved.state) == ("PAUSED", "PAUSED")

    await run.activate()
    assert run.state == E.ACTIVE
    assert (trial.state, trial.run_state) == ("ACTIVE", "QUEUED")
    assert host.launches(trial.id) == 2
    await host.start(run, trial)
    await validated(run, trial, 10, 0.1)
    await host.exit(run, trial, 0)
    row, [saved] = await stored(store, run)
    assert (row.state, saved.state, saved.restarts) == ("COMPLETED", "COMPLETED", 0)
    assert host.ended == [(trial.id, "COMPLETED")]


async def test_pausing_a_queued_trial_takes_it_off_the_queue(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await run.pause()
    assert (trial.state, trial.run_state) == ("PAUSED", None)
    assert host.calls == [("launch", trial.id), ("dequeue", trial.id)]
    await run.activate()
    assert (trial.state, trial.run_state) == ("ACTIVE", "QUEUED")
    assert host.launches(trial.id) == 2


async def test_activating_before_the_paused_trial_exits_requeues_it_when_it_exits(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await host.start(run, trial)
    await run.pause()
    await run.activate()
    # Still checkpointing for the pause: not launched a second time yet.
    assert trial.state == "ACTIVE" and host.launches() == 1
    await host.exit(run, trial, 0)
    assert (trial.state, trial.run_state, trial.restarts) == ("ACTIVE", "QUEUED", 0)
    assert host.launches(trial.id) == 2


async def test_an_experiment_created_paused_creates_its_trials_when_activated(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config(), state=E.PAUSED)
    assert run.trials == {} and host.calls == []
    await run.activate()
    [trial] = run.trials.values()
    assert (trial.state, trial.run_state) == ("ACTIVE", "QUEUED")
    assert host.calls == [("launch", trial.id)]


async def test_a_preempted_trial_resumes_when_it_gets_slots_again(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config(max_restarts=0))
    [trial] = run.trials.values()
    await host.start(run, trial)
    # The scheduler makes room for another job: it preempts the allocation itself.
    host.open[trial.id].preempt_requested = True
    await host.exit(run, trial, 0)
    assert (trial.state, trial.run_state, trial.restarts) == ("ACTIVE", "QUEUED", 0)
    assert host.launches(trial.id) == 2

    # Too slow to stop and killed after the preemption timeout: not the trial's fault either.
    await host.start(run, trial)
    uuid_ = await checkpoint(store, trial, 3)
    host.open[trial.id].preempt_requested = True
    await host.exit(run, trial, None, timed_out=True)
    assert (trial.state, trial.run_state, trial.restarts) == ("ACTIVE", "QUEUED", 0)
    assert host.launches(trial.id) == 3
    assert await messages(store, trial) == [
        f"the trial resumes from checkpoint {uuid_} when it gets slots again"]
    assert run.state == E.ACTIVE and host.ended == []

    # Killed by its agent's own scheduler (Slurm requeued its job): no restart is counted,
    # though max_restarts is 0.
    await host.start(run, trial)
    await host.exit(run, trial, None, resumable="Slurm requeued job 12")
    assert (trial.state, trial.run_state, trial.restarts) == ("ACTIVE", "QUEUED", 0)
    assert host.launches(trial.id) == 4
    assert (await messages(store, trial))[-1] == (
        f"Slurm requeued job 12; the trial resumes from checkpoint {uuid_} when it gets slots "
        "again")


# --- kill, cancel --------------------------------------------------------------------------
@pytest.mark.parametrize(("action", "asked"), [("kill", "kill"), ("cancel", "preempt")])
async def test_kill_and_cancel_stop_running_trials_and_end_canceled(
        store: Store, host: FakeHost, action: str, asked: str) -> None:
    run = await new_run(store, host, config({"name": "random", "max_trials": 2}))
    running, queued = run.trials.values()
    await host.start(run, running)
    await getattr(run, action)()

    # The queued trial is taken off the queue and ends at once; the running one is stopped.
    assert run.state == E.STOPPING_CANCELED and not run.done.is_set()
    assert queued.state == "CANCELED" and running.state == "STOPPING_CANCELED"
    assert host.calls[2:] == [("dequeue", running.id), (asked, running.id),
                              ("dequeue", queued.id)]
    assert host.ended == [(queued.id, "CANCELED")]

    await host.exit(run, running, None if action == "kill" else 0)
    assert run.done.is_set()
    row, trials = await stored(store, run)
    assert row.state == "CANCELED" and row.ended_at is not None
    assert [(t.state, t.run_state, t.restarts) for t in trials] == [("CANCELED", None, 0)] * 2
    assert host.ended == [(queued.id, "CANCELED"), (running.id, "CANCELED")]
    assert host.launches() == 2

    # A finished experiment stays as it is.
    await run.kill()
    assert run.state == E.CANCELED and len(host.calls) == 5


async def test_killing_a_paused_experiment_ends_it_at_once(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await run.pause()
    await run.kill()
    assert run.done.is_set() and run.state == E.CANCELED
    assert (trial.state, trial.run_state) == ("CANCELED", None)
    assert host.calls == [("launch", trial.id), ("dequeue", trial.id)]
    assert host.ended == [(trial.id, "CANCELED")]


# --- close-out -----------------------------------------------------------------------------
async def test_the_experiment_completes_once_the_search_is_done_and_its_trials_ended(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config(
        {"name": "random", "max_trials": 2, "max_concurrent_trials": 1}))
    [first] = run.trials.values()
    await host.start(run, first)
    await validated(run, first, 10, 0.4)
    await host.exit(run, first, 0)

    # Half the search is done; the searcher asks for its second trial.
    assert run.state == E.ACTIVE and not run.done.is_set()
    assert run.row.progress == 0.5 and not run.method.shutdown
    _, second = run.trials.values()
    assert host.calls == [("launch", first.id), ("launch", second.id)]

    await host.start(run, second)
    await validated(run, second, 10, 0.3)
    await host.exit(run, second, 0)
    assert run.method.shutdown and run.done.is_set()
    row, trials = await stored(store, run)
    assert (row.state, row.progress) == ("COMPLETED", 1.0)
    assert [t.state for t in trials] == ["COMPLETED", "COMPLETED"]
    assert host.ended == [(first.id, "COMPLETED"), (second.id, "COMPLETED")]


async def test_a_recovered_experiment_whose_trials_all_ended_completes(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config())
    [trial] = run.trials.values()
    await host.start(run, trial)
    await validated(run, trial, 10, 0.1)
    await host.exit(run, trial, 0)
    # As if the master had stopped between the trial's end and the experiment's.
    await store.update_experiment(run.id, state="STOPPING_COMPLETED", ended_at=None,
                                  progress=0.5)
    row, trials = await stored(store, run)
    after = FakeHost()
    recovered = await ExperimentRun.restore(row, parse_experiment_config(row.config), trials,
                                            store, after)
    await recovered.recover()
    assert recovered.done.is_set()
    row, _ = await stored(store, recovered)
    assert (row.state, row.progress) == ("COMPLETED", 1.0) and row.ended_at is not None
    assert after.calls == [] and after.ended == []


async def test_an_experiment_whose_every_trial_failed_ends_in_error(
        store: Store, host: FakeHost) -> None:
    run = await new_run(store, host, config({"name": "random", "max_trials": 2},
                                            max_restarts=0))
    first, second = run.trials.values()
    for trial in (first, second):
        await host.start(run, trial)
    await host.exit(run, first, 1)
    assert run.state == E.ACTIVE and first.state == "ERROR"
    await host.exit(run, second, 1)
    row, trials = await stored(store, run)
    assert row.state == "ERROR"
    assert [t.state for t in trials] == ["ERROR", "ERROR"]


# --- recovery and the parsed config --------------------------------------------------------
async def test_a_recovered_run_requeues_active_trials_and_finishes_stopping_ones(
        store: Store, host: FakeHost) -> None:
    first_run = await new_run(store, host, asha())
    running, stopping = first_run.trials.values()
    await host.start(first_run, running)
    await host.start(first_run, stopping)
    await first_run.on_validation(running, 8, 0.1)
    await first_run.on_validation(stopping, 8, 0.9)
    assert stopping.state == "STOPPING_COMPLETED"

    # The master restarts; neither allocation survives it.
    row, trials = await stored(store, first_run)
    after = FakeHost()
    run = await ExperimentRun.restore(row, parse_experiment_config(row.config), trials, store,
                                      after)
    await run.recover()
    again, stopped = run.trials.values()
    assert (again.state, again.run_state) == ("ACTIVE", "QUEUED")
    assert stopped.state == "COMPLETED"
    assert after.calls == [("launch", again.id)]
    assert after.ended == [(stopped.id, "COMPLETED")]
    # The search goes on where it stopped: the promoted trial trains to the top rung.
    assert run.operation(again) == {"operation": {"length": 16, "validate_at": []},
                                    "completed": False}


@pytest.mark.parametrize(("searcher", "steps", "metrics", "length"), [
    ({"max_length": {"batches": 10}}, 6, {}, 6),
    ({"max_length": {"epochs": 3}}, 6, {"epochs": 2.5}, 2),
    ({"max_length": {"records": 300}}, 6, {}, None),
    ({"max_length": None, "time_metric": "samples", "max_time": 500}, 6, {"samples": 320}, 320),
    ({"max_length": None}, 6, {}, 6),
])
async def test_searcher_lengths_follow_the_parsed_config(
        store: Store, host: FakeHost, searcher: dict[str, Any], steps: int,
        metrics: dict[str, Any], length: int | None) -> None:
    run = await new_run(store, host, config(searcher, records_per_epoch=100))
    assert validation_length(run.length_unit, steps, metrics) == length
    assert run.max_length == run.config.searcher.max_units
