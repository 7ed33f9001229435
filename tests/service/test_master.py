"""The master's manager without HTTP: real store (SQLite and PostgreSQL), real local agent.

Trials here are plain scripts that never call the API, so what is tested is the manager's own
logic: creating, running, restarting, failing and killing trials, and refusing bad input.
"""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile

import pytest
import yaml

from det_hub.service import launch
from det_hub.service.errors import BadRequest, Conflict, Forbidden
from det_hub.service.master import Master, Principal


def context(script: str) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def config(**extra: object) -> str:
    doc = {"name": "t", "entrypoint": "python3 train.py",
           "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}
    doc.update(extra)
    return yaml.safe_dump(doc)


async def finished(master: Master, eid: int, timeout: float = 30) -> str:
    run = master.experiments.runs.get(eid)
    if run is not None:
        await asyncio.wait_for(run.done.wait(), timeout)
    return (await master.experiments.get(eid)).state


async def test_a_script_runs_and_its_output_is_kept(master: Master, admin: Principal) -> None:
    row = await master.experiments.create(admin, config(), context("print('hello')\n"))
    assert await finished(master, row.id) == "COMPLETED"
    [trial] = await master.store.list_trials(row.id)
    assert trial.state == "COMPLETED" and trial.restarts == 0
    logs = await master.store.get_logs(trial.id)
    assert [(line.stdtype, line.message) for line in logs] == [("stdout", "hello")]


async def test_failures_restart_then_error_with_the_reason(
        master: Master, admin: Principal) -> None:
    row = await master.experiments.create(
        admin, config(max_restarts=2), context("import sys; print('try'); sys.exit(5)\n"))
    assert await finished(master, row.id) == "ERROR"
    [trial] = await master.store.list_trials(row.id)
    assert trial.state == "ERROR" and trial.restarts == 2
    messages = [line.message for line in await master.store.get_logs(trial.id)]
    assert messages.count("try") == 3
    assert messages[-1].startswith("the trial's process exited with code 5; the trial has failed")


async def test_kill_cancels_and_owner_rules_hold(master: Master, admin: Principal) -> None:
    row = await master.experiments.create(admin, config(), context("import time\n"
                                                                  "time.sleep(60)\n"))
    bob, _ = await master.users.create(admin, "bob", admin=False)
    with pytest.raises(Forbidden):
        await master.experiments.kill(Principal(user=bob), row.id)
    assert (await master.experiments.pause(admin, row.id)).state == "PAUSED"
    assert (await master.experiments.activate(admin, row.id)).state == "ACTIVE"
    await master.experiments.kill(admin, row.id)
    with pytest.raises(Conflict, match="only a PAUSED experiment can be activated"):
        await master.experiments.activate(admin, row.id)
    assert await finished(master, row.id) == "CANCELED"
    with pytest.raises(Conflict, match="only an ACTIVE experiment can be paused"):
        await master.experiments.pause(admin, row.id)


@pytest.mark.parametrize(("text", "path"), [
    (config(searcher={"name": "custom", "metric": "x"}), "searcher.name"),
    (config(resources={"slots_per_trial": 99}), "resources.slots_per_trial"),
    (config(resources={"resource_pool": "gpu"}), "resources.resource_pool"),
    (config(searcher={"name": "single"}), "searcher.metric"),
])
async def test_configs_this_master_cannot_run_are_refused(
        master: Master, admin: Principal, text: str, path: str) -> None:
    with pytest.raises(BadRequest) as err:
        await master.experiments.create(admin, text, None)
    assert path in [d["path"] for d in err.value.details]
    assert (await master.store.list_experiments())[1] == 0


async def test_pausing_a_queued_trial_costs_no_restart(master: Master, admin: Principal) -> None:
    sleeper = context("import time\ntime.sleep(60)\n")
    running = [await master.experiments.create(admin, config(), sleeper)
               for _ in master.cluster.agents["local"].slots]
    queued = await master.experiments.create(admin, config(), context("print('ran')\n"))
    [trial] = master.experiments.runs[queued.id].trials.values()
    assert trial.run_state == "QUEUED"
    await master.experiments.pause(admin, queued.id)
    assert trial.state == "PAUSED" and trial.run_state is None
    assert master.jobs.queue() and all(
        j["experiment_id"] != queued.id for j in master.jobs.queue())
    await master.experiments.activate(admin, queued.id)
    assert trial.run_state == "QUEUED"
    for row in running:
        await master.experiments.kill(admin, row.id)
    assert await finished(master, queued.id) == "COMPLETED"
    [done] = await master.store.list_trials(queued.id)
    assert done.restarts == 0
    assert [line.message for line in await master.store.get_logs(done.id)] == ["ran"]


FIXABLE = context(
    "import os, sys\n"
    "from det_hub.core import get_cluster_info\n"
    "hp = get_cluster_info().trial.hparams\n"
    "print('fail' if hp.get('fail') and os.environ.get('FIX') != '1' else 'ok')\n"
    "sys.exit(3 if hp.get('fail') and os.environ.get('FIX') != '1' else 0)\n")


async def test_continue_reruns_a_failed_trial_in_place_with_the_changed_config(
        master: Master, admin: Principal) -> None:
    text = config(max_restarts=0, hyperparameters={"fail": 1})
    row = await master.experiments.create(admin, text, FIXABLE)
    assert await finished(master, row.id) == "ERROR"
    [before] = await master.store.list_trials(row.id)
    first_end = (await master.experiments.get(row.id)).ended_at

    bob, _ = await master.users.create(admin, "bob", admin=False)
    with pytest.raises(Forbidden):
        await master.experiments.continue_experiment(Principal(user=bob), row.id, {})
    with pytest.raises(BadRequest) as err:
        await master.experiments.continue_experiment(admin, row.id, {"max_restarts": "many"})
    assert [d["path"] for d in err.value.details] == ["max_restarts"]
    assert (await master.experiments.get(row.id)).state == "ERROR"  # nothing changed

    continued = await master.experiments.continue_experiment(
        admin, row.id, {"name": "fixed", "environment": {"environment_variables": ["FIX=1"]}})
    assert continued.state == "ACTIVE" and continued.ended_at is None
    assert await finished(master, row.id) == "COMPLETED"
    exp = await master.experiments.get(row.id)
    [trial] = await master.store.list_trials(row.id)
    assert trial.id == before.id and trial.state == "COMPLETED" and trial.restarts == 0
    assert exp.name == "fixed" and exp.original_config == text  # as first submitted
    assert exp.ended_at is not None and first_end is not None and exp.ended_at > first_end
    messages = [line.message for line in await master.store.get_logs(trial.id)]
    assert messages[0] == "fail" and messages[-1] == "ok"
    assert any(m.startswith("the experiment was continued") for m in messages)
    await master.experiments.set_archived(admin, row.id, True)
    with pytest.raises(Conflict, match="archived; unarchive it first"):
        await master.experiments.continue_experiment(admin, row.id, {})


async def test_continue_changes_a_single_trials_hyperparameters(
        master: Master, admin: Principal) -> None:
    row = await master.experiments.create(admin, config(max_restarts=0,
                                                       hyperparameters={"fail": 1}), FIXABLE)
    assert await finished(master, row.id) == "ERROR"
    await master.experiments.continue_experiment(admin, row.id, {"hyperparameters": {"fail": 0}})
    assert await finished(master, row.id) == "COMPLETED"
    [trial] = await master.store.list_trials(row.id)
    assert trial.hparams == {"fail": 0}


async def test_continue_reruns_only_the_failed_trials_of_a_search(
        master: Master, admin: Principal) -> None:
    text = config(max_restarts=0, searcher={
        "name": "grid", "metric": "loss", "max_length": {"batches": 1}},
        hyperparameters={"fail": {"type": "categorical", "vals": [0, 1]}})
    row = await master.experiments.create(admin, text, FIXABLE)
    assert await finished(master, row.id) == "COMPLETED"
    trials = {t.hparams["fail"]: t for t in await master.store.list_trials(row.id)}
    assert (trials[0].state, trials[1].state) == ("COMPLETED", "ERROR")

    with pytest.raises(BadRequest) as err:
        await master.experiments.continue_experiment(admin, row.id,
                                                    {"hyperparameters": {"fail": 0}})
    assert [d["path"] for d in err.value.details] == ["hyperparameters"]
    await master.experiments.continue_experiment(
        admin, row.id, {"environment": {"environment_variables": ["FIX=1"]}})
    assert await finished(master, row.id) == "COMPLETED"
    after = {t.hparams["fail"]: t for t in await master.store.list_trials(row.id)}
    assert len(after) == 2 and all(t.state == "COMPLETED" for t in after.values())
    assert after[0].ended_at == trials[0].ended_at  # the completed trial did not run again
    with pytest.raises(Conflict, match="nothing to continue"):
        await master.experiments.continue_experiment(admin, row.id, {})


async def test_an_asha_search_and_an_unfinished_experiment_cannot_be_continued(
        master: Master, admin: Principal) -> None:
    sleeper = context("import time\ntime.sleep(60)\n")
    row = await master.experiments.create(admin, config(searcher={
        "name": "adaptive_asha", "metric": "loss", "max_length": {"batches": 16},
        "max_trials": 2, "max_concurrent_trials": 1}), sleeper)
    with pytest.raises(Conflict, match="only a finished experiment"):
        await master.experiments.continue_experiment(admin, row.id, {})
    await master.experiments.kill(admin, row.id)
    assert await finished(master, row.id) == "CANCELED"
    with pytest.raises(Conflict, match="adaptive_asha search cannot be continued"):
        await master.experiments.continue_experiment(admin, row.id, {"name": "renamed"})
    refused = await master.experiments.get(row.id)
    assert (refused.state, refused.name, refused.config["name"]) == ("CANCELED", "t", "t")
    assert row.id not in master.experiments.runs


async def test_a_fork_records_its_parent_and_reuses_its_context(
        master: Master, admin: Principal) -> None:
    parent = await master.experiments.create(admin, config(), context("print('from parent')\n"))
    assert await finished(master, parent.id) == "COMPLETED"
    child = await master.experiments.create(admin, config(name="child"), None,
                                           parent_id=parent.id)
    assert await finished(master, child.id) == "COMPLETED"
    assert child.parent_id == parent.id
    [trial] = await master.store.list_trials(child.id)
    assert [line.message for line in await master.store.get_logs(trial.id)] == ["from parent"]
    with pytest.raises(BadRequest, match="parent_id: experiment 999 not found"):
        await master.experiments.create(admin, config(), None, parent_id=999)


async def test_a_trial_whose_warm_start_checkpoint_is_gone_fails_with_the_reason(
        master: Master, admin: Principal) -> None:
    source = await master.experiments.create(admin, config(), context("print('x')\n"))
    assert await finished(master, source.id) == "COMPLETED"
    [trial] = await master.store.list_trials(source.id)
    uuid = "5b0d6c1e-aaaa-bbbb-cccc-000000000009"
    await master.store.add_checkpoint(
        uuid=uuid, trial_id=trial.id, experiment_id=source.id, allocation_id=None,
        state="COMPLETED", steps_completed=1, resources={}, metadata={},
        storage={"type": "shared_fs", "storage_path": None,
                 "host_path": str(master.data_dir / "checkpoints" / "admin")})
    warm = config(searcher={"name": "random", "metric": "loss", "max_trials": 2,
                            "max_length": {"batches": 1}, "source_checkpoint_uuid": uuid})
    row = await master.experiments.create(admin, warm, context("print('x')\n"), activate=False)
    await master.store.update_checkpoint(uuid, state="DELETED")  # e.g. collected meanwhile
    await master.experiments.activate(admin, row.id)
    assert await finished(master, row.id) == "ERROR"
    trials = await master.store.list_trials(row.id)
    assert len(trials) == 2 and all(t.state == "ERROR" for t in trials)
    [message] = [line.message for line in await master.store.get_logs(trials[0].id)]
    assert message == (f"the trial cannot start: checkpoint {uuid} does not exist or is not "
                       "complete; it has failed")


async def test_a_search_without_a_searcher_length_is_as_far_as_its_trials(
        master: Master, admin: Principal) -> None:
    """The length of each trial is Trainer.fit's: the experiment's progress follows the
    progress its trials report, and ends at 1."""
    row = await master.experiments.create(admin, config(searcher={
        "name": "single", "metric": "loss"}), context("import time\ntime.sleep(3)\n"))
    assert (await master.experiments.get(row.id)).progress == 0.0
    [trial] = await master.store.list_trials(row.id)
    await master.trials.report_progress(admin, trial.id, 0.5)  # as its Trainer would
    assert (await master.experiments.get(row.id)).progress == 0.5
    assert await finished(master, row.id) == "COMPLETED"
    assert (await master.experiments.get(row.id)).progress == 1.0


async def test_a_command_killed_as_its_slots_are_assigned_is_stopped(
        master: Master, admin: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the scheduler assigning a command's slots and its start being stored, the
    command is still QUEUED but can no longer be taken off the queue: a kill then stops what
    starts, rather than failing."""
    from det_hub.states import AllocationState, TaskType

    held, release = asyncio.Event(), asyncio.Event()
    update = master.store.update_allocation

    async def slow_start(alloc_id: str, **fields: object) -> object:
        if fields.get("state") == AllocationState.STARTING:
            held.set()
            await release.wait()
        return await update(alloc_id, **fields)

    monkeypatch.setattr(master.store, "update_allocation", slow_start)
    task = await master.tasks.create(admin, TaskType.COMMAND, "entrypoint: sleep 60")
    await asyncio.wait_for(held.wait(), 10)
    assert (await master.tasks.get(admin, TaskType.COMMAND, task.id)).state == "QUEUED"
    killed = await master.tasks.kill(admin, TaskType.COMMAND, task.id)
    assert killed.state == "TERMINATING"
    release.set()

    async def ended() -> str:
        while (row := await master.tasks.get(admin, TaskType.COMMAND, task.id)).state != \
                "TERMINATED":
            await asyncio.sleep(0.05)
        return str(row.exit_reason)

    assert await asyncio.wait_for(ended(), 20) == "killed by its owner or an admin"
    assert not master.cluster.allocations.of_task(task.id)


async def test_each_trial_runs_its_own_experiments_code_read_once_per_experiment(
        master: Master, admin: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    read = master.store.get_experiment_context

    async def counted(experiment_id: int) -> bytes | None:
        reads.append(experiment_id)
        return await read(experiment_id)

    monkeypatch.setattr(master.store, "get_experiment_context", counted)
    search = {"name": "random", "metric": "loss", "max_trials": 3,
              "max_length": {"batches": 1}}
    rows = [await master.experiments.create(
        admin, config(searcher=search, hyperparameters={"x": {"type": "int", "minval": 1,
                                                               "maxval": 9}}),
        context(f"print('code of {name}')\n")) for name in ("first", "second")]
    for row, name in zip(rows, ("first", "second"), strict=True):
        assert await finished(master, row.id) == "COMPLETED"
        trials = await master.store.list_trials(row.id)
        assert len(trials) == 3
        for trial in trials:
            said = [line.message for line in await master.store.get_logs(trial.id)]
            assert f"code of {name}" in said
    # Three trials each, and each experiment's archive read once.
    assert sorted(reads) == [rows[0].id, rows[1].id]

    # Past its byte budget a launcher keeps the latest experiment's archive only.
    monkeypatch.setattr(launch, "CONTEXT_CACHE_BYTES", 1)
    launcher = launch.Launcher(master.store, master.cluster, master.users,
                               master_url="http://127.0.0.1:9", base_url="/",
                               data_dir=master.data_dir)
    reads.clear()
    for row in (rows[0], rows[1], rows[1], rows[0]):
        archive = await launcher.experiment_context(row)
        assert archive is not None and archive == await read(row.id)
    assert reads == [rows[0].id, rows[1].id, rows[0].id]
