"""A resource pool on a Slurm partition, through a real master and the private test Slurm of
``scripts/test-services.sh start`` (a controller and two nodes of one CPU each).

Trials of the pool run as Slurm batch jobs: a Core API trial and a PyTorchTrial complete; a
two-slot torch.distributed trial is one job of two tasks, one on each node; a job cancelled with
``scancel`` restarts its trial from its checkpoint; a job Slurm asks to stop (SIGTERM to its
batch step), preempts (SIGTERM to all of it: a Core API trial, a PyTorchTrial and both ranks of
a two-slot trial checkpoint there) or requeues goes on from its checkpoint in a new job; a job's
priority is its Nice in Slurm's queue; a restarted master adopts a running job, and one Slurm
requeued and ran again while it was down resumes its trial without a restart; work Slurm holds
back shows Slurm's reason in the job queue and shows as queued until Slurm runs it, and is
cancelled at once when a preempting pool picks it; a notebook and a shell run as jobs and are
used through the master's proxy on their node; a hub user's server (DetSpawner) is a job of the
user's account, reached through the hub, kept across a hub restart, and ended with its job; an
ASHA search larger than the pool finishes while the queue shows why Slurm holds work back; and
pause/activate goes on exactly where the trial stopped, in a new job. Without that Slurm the
tests are skipped, except in CI, where they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.testing import MasterProcess

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow

POOL = "hpc"
TRIAL_DEFS = REPO / "tests" / "pytorch" / "pytorch_trial_defs.py"
DIST = Path(__file__).parent / "contexts" / "multi_host"
DIST_STEPS = Path(__file__).parent / "contexts" / "dist_steps"
_SUBMITTED = re.compile(r"waiting: Slurm job (\d+) was submitted")


@pytest.fixture
def shared(slurm_shared: Path) -> Path:
    """The filesystem the master and the nodes share: job directories, and checkpoints that
    every job's user may write."""
    (slurm_shared / "checkpoints").mkdir(mode=0o777)
    (slurm_shared / "checkpoints").chmod(0o1777)
    return slurm_shared


def master_config(tmp_path: Path, slurm: dict[str, str], shared: Path, *,
                  pool_slots: int = 0, scheduler: dict[str, Any] | None = None,
                  local_pool: bool = False) -> Path:
    """A master's config file with the Slurm pool (and, with ``local_pool``, the ``default``
    pool of its local agent beside it)."""
    manager: dict[str, Any] = {
        "type": "slurm", "partition": slurm["partition"], "slurm_conf": slurm["slurm_conf"],
        "python": slurm["python"], "job_root": str(shared / "jobs"), "poll_interval": 0.3,
        "exit_file_grace": 1.0, "pool_slots": pool_slots}
    pool: dict[str, Any] = {"name": POOL, "resource_manager": manager}
    if scheduler is not None:
        pool["scheduler"] = scheduler
    pools = [{"name": "default"}, pool] if local_pool else [pool]
    config = tmp_path / "det_hub_config.py"
    config.write_text(("" if local_pool else "c.MasterApp.local_agent = False\n")
                      + f"c.MasterApp.resource_pools = {pools!r}\n")
    return config


def slurm_master(tmp_path: Path, slurm: dict[str, str], shared: Path,
                 pool_slots: int = 0, scheduler: dict[str, Any] | None = None,
                 local_pool: bool = False) -> MasterProcess:
    config = master_config(tmp_path, slurm, shared, pool_slots=pool_slots,
                           scheduler=scheduler, local_pool=local_pool)
    proc = MasterProcess(tmp_path / "data", f"sqlite:///{tmp_path / 'det_hub.db'}",
                         [f"--MasterApp.config_file={config}"])
    proc.default_context = STEPS
    proc.cli_cwd = REPO
    proc.start()
    return proc


def running_master(tmp_path: Path, slurm: dict[str, str],
                   shared: Path) -> Iterator[MasterProcess]:
    """A master of the Slurm pool for a test: stopped after it, its jobs cancelled."""
    proc = slurm_master(tmp_path, slurm, shared)
    yield proc
    proc.stop()
    cancel_jobs(proc, slurm)


@pytest.fixture
def master(tmp_path: Path, slurm: dict[str, str], shared: Path) -> Iterator[MasterProcess]:
    yield from running_master(tmp_path, slurm, shared)


def cancel_jobs(master: MasterProcess, slurm: dict[str, str]) -> None:
    """Cancel the jobs a test's master left in Slurm's queue (it keeps their ids in its data
    directory): the nodes are shared by the tests."""
    ids = [json.loads(p.read_text())["job_id"]
           for p in (master.data_dir / "slurm" / POOL).glob("*.json")]
    if ids:
        subprocess.run(["scancel", *ids], env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]},
                       check=False, capture_output=True)


def on_slurm(config: dict[str, Any], shared: Path) -> dict[str, Any]:
    return {**config, "resources": {**config.get("resources", {}), "resource_pool": POOL},
            "checkpoint_storage": {"type": "shared_fs",
                                   "host_path": str(shared / "checkpoints")}}


def slurm_jobs(master: MasterProcess, trial_id: int) -> list[str]:
    """The Slurm jobs the trial's runs were, from the lines the master wrote to its log."""
    return [m.group(1) for line in master.logs(trial_id) if (m := _SUBMITTED.search(line))]


def test_a_core_api_trial_completes_as_a_slurm_job(master: MasterProcess,
                                                     shared: Path) -> None:
    eid = master.create_ok(on_slurm(steps_config(length=20, checkpoint_every=10), shared))
    exp = master.wait_state(eid, timeout=120)
    [trial] = master.trials(eid)
    logs = master.logs(trial["id"])
    assert exp["state"] == "COMPLETED", logs[-20:]
    assert trial["steps_completed"] == 20 and trial["restarts"] == 0
    assert logs.count("done") == 1
    [job] = slurm_jobs(master, trial["id"])
    assert any(line.startswith(f"started: Slurm job {job} on n") for line in logs), logs
    training = master.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert [p["steps_completed"] for p in training] == [5, 10, 15, 20]
    # Its checkpoints were written by the job's user (nobody) on the shared filesystem.
    ckpt = shared / "checkpoints" / trial["latest_checkpoint"] / "state.json"
    assert ckpt.stat().st_uid == 65534
    [agent] = master.get("/agents")["agents"]  # the local agent is off: Slurm's pool only
    assert (agent["id"], agent["type"], agent["resource_pool"]) == (POOL, "slurm", POOL)


def test_a_pytorch_trial_completes_as_a_slurm_job(master: MasterProcess, shared: Path,
                                                    tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(TRIAL_DEFS, context / TRIAL_DEFS.name)
    eid = master.create_ok(on_slurm({
        "name": "regression-on-slurm", "entrypoint": "pytorch_trial_defs:RegressionTrial",
        "hyperparameters": {"hidden": 16, "lr": 0.05, "global_batch_size": 8},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 40}},
        "min_validation_period": {"batches": 20}, "max_restarts": 0}, shared), context=context)
    exp = master.wait_state(eid, timeout=240)
    [trial] = master.trials(eid)
    assert exp["state"] == "COMPLETED", master.logs(trial["id"])[-20:]
    assert trial["steps_completed"] == 40
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validation] == [20, 40]
    assert len(slurm_jobs(master, trial["id"])) == 1


def test_a_cancelled_job_restarts_its_trial_from_its_checkpoint(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    eid = master.create_ok(on_slurm(steps_config(length=60, max_restarts=1, sleep=0.1,
                                                 checkpoint_every=10), shared))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: any(line.startswith("checkpoint ") and line.endswith(" at 20")
                            for line in master.logs(trial_id)), timeout=120)
    [job] = slurm_jobs(master, trial_id)
    done = subprocess.run(["scancel", job], env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    exp = master.wait_state(eid, timeout=180)
    trial = master.get(f"/trials/{trial_id}")["trial"]
    logs = master.logs(trial_id)
    assert exp["state"] == "COMPLETED", logs[-20:]
    assert trial["restarts"] == 1
    first, second = slurm_jobs(master, trial_id)
    assert first == job and second != job
    assert any(f"Slurm job {job} was cancelled (scancel)" in line and "restarting from "
               "checkpoint" in line and "(restart 1 of 1)" in line for line in logs), logs
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert len(resumed) == 1 and resumed[0] >= 20
    # The trial took scancel's SIGTERM as the request to stop: it went on from a checkpoint
    # it made there, having exited 0, which is still no success of a cancelled job's.
    preempted = [int(line.split()[-1]) for line in logs if line.startswith("preempted at")]
    assert preempted == resumed, logs
    assert trial["steps_completed"] == 60
    assert logs.count("done") == 1


def test_a_restarted_master_adopts_a_running_slurm_job(
        master: MasterProcess, shared: Path) -> None:
    eid = master.create_ok(on_slurm(steps_config(length=60, sleep=0.1, checkpoint_every=20),
                                    shared))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 10,
                timeout=120)
    master.stop()
    master.start()
    exp = master.wait_state(eid, timeout=120)
    trial = master.get(f"/trials/{trial_id}")["trial"]
    logs = master.logs(trial_id)
    assert exp["state"] == "COMPLETED", logs[-20:]
    assert trial["restarts"] == 0, "the running job should have been adopted, not restarted"
    assert len(slurm_jobs(master, trial_id)) == 1
    assert logs.count("done") == 1 and not any(line.startswith("resumed at") for line in logs)
    steps = [p["steps_completed"] for p in
             master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert steps == list(range(5, 61, 5)), "every report arrives exactly once"


def test_work_slurm_holds_back_shows_slurms_reason_in_the_queue(
        tmp_path: Path, slurm: dict[str, str], shared: Path) -> None:
    # Three slots offered on two one-CPU nodes: Slurm runs two jobs and holds the third.
    master = slurm_master(tmp_path, slurm, shared, pool_slots=3)
    try:
        eids = [master.create_ok(on_slurm(steps_config(name=f"hold-{i}", length=3000,
                                                       sleep=0.1), shared))
                for i in range(3)]

        def jobs() -> list[dict[str, Any]]:
            return master.get(f"/jobs?resource_pool={POOL}")["jobs"]

        def held() -> list[dict[str, Any]]:
            return [j for j in jobs() if re.fullmatch(
                r"Slurm job \d+ is PENDING: (Resources|Priority)", j.get("reason") or "")]

        def two_run_one_held() -> dict[str, Any] | None:
            listed = jobs()
            waiting = [j for j in listed if j["reason"]]
            running = [(j["state"], j["slots_allocated"]) for j in listed if not j["reason"]]
            if running == [("SCHEDULED", 1)] * 2 and len(waiting) == 1 and \
                    re.fullmatch(r"Slurm job \d+ is PENDING: (Resources|Priority)",
                                 waiting[0]["reason"]):
                return waiting[0]
            return None

        job = master.wait(two_run_one_held, timeout=120)
        assert job["state"] == "QUEUED" and job["slots_allocated"] == 0
        # The held experiment and its trial show it queued, the two Slurm runs running (once
        # their start is stored, which may come a moment after the queue shows it).

        def shown(eid: int) -> tuple[str, str, str]:
            [trial] = master.trials(eid)
            return trial["state"], trial["run_state"], master.experiment(eid)["state"]

        held_eid = job["experiment_id"]
        assert shown(held_eid) == ("QUEUED",) * 3
        for eid in eids:
            if eid != held_eid:
                master.wait(lambda eid=eid: shown(eid) == ("RUNNING",) * 3, timeout=30)
        listed = master.cli("job", "list", check=True).stdout
        # Slurm may have moved the job from one reason to the other meanwhile.
        shown = re.search(r"QUEUED \((Slurm job \d+ is PENDING: \w+)\)", listed)
        assert shown and shown.group(1).rsplit(": ", 1)[0] == job["reason"].rsplit(": ", 1)[0], \
            listed
        # Pausing the held experiment takes its job off Slurm's queue: nothing of it ran.
        assert master.api("POST", f"/experiments/{held_eid}/pause").status_code == 200
        master.wait(lambda: not held(), timeout=60)
        [trial] = master.trials(held_eid)
        assert trial["state"] in ("ACTIVE", "PAUSED") and trial["restarts"] == 0
        held_job = job["reason"].split()[2]
        shown = subprocess.run(["scontrol", "--oneliner", "show", "job", held_job],
                               env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]},
                               capture_output=True, text=True, check=True).stdout
        assert "JobState=CANCELLED" in shown and "RunTime=00:00:00" in shown, shown
        # Activated, it waits in Slurm's queue again, shown queued; it shows running once
        # Slurm runs it, when a node is free.
        assert master.api("POST", f"/experiments/{held_eid}/activate").status_code == 200
        master.wait(held, timeout=60)
        [trial] = master.trials(held_eid)
        assert (trial["state"], trial["run_state"]) == ("QUEUED", "QUEUED"), trial
        freed = next(eid for eid in eids if eid != held_eid)
        assert master.api("POST", f"/experiments/{freed}/kill").status_code == 200
        master.wait(lambda: master.trials(held_eid)[0]["state"] == "RUNNING", timeout=90)
        assert master.experiment(held_eid)["state"] == "RUNNING"
        kill_all(master, eids)
    finally:
        master.stop()
        cancel_jobs(master, slurm)


def test_a_waiting_job_picked_for_preemption_is_cancelled_at_once(
        tmp_path: Path, slurm: dict[str, str], shared: Path) -> None:
    """In a pool that preempts, a more important trial finds the pool's slots taken, the
    least important of them by a job Slurm still holds back. That job is cancelled at once
    (nothing of it ran, nothing is to checkpoint) rather than told to stop once it runs: its
    trial waits in det_hub's queue again without counting a restart, and the important trial
    takes its slot."""
    master = slurm_master(tmp_path, slurm, shared, pool_slots=3,
                          scheduler={"type": "priority", "preemption": True})
    try:
        def create(name: str, priority: int) -> int:
            config = on_slurm(steps_config(name=name, length=3000, sleep=0.1), shared)
            config["resources"]["priority"] = priority
            return master.create_ok(config)

        eids = [create(f"runs-{i}", 50) for i in range(2)]
        master.wait(lambda: all([t["state"] for t in master.trials(eid)] == ["RUNNING"]
                                for eid in eids), timeout=120)
        held_eid = create("held", 60)
        eids.append(held_eid)
        held_trial = master.wait(lambda: master.trials(held_eid))[0]["id"]
        [job] = master.wait(lambda: slurm_jobs(master, held_trial), timeout=60)
        master.wait(lambda: job_state(slurm, job) == "PENDING" and any(
            j["experiment_id"] == held_eid and HELD.fullmatch(j["reason"] or "")
            for j in master.get(f"/jobs?resource_pool={POOL}")["jobs"]), timeout=60)

        urgent_eid = create("urgent", 10)
        eids.append(urgent_eid)
        master.wait(lambda: job_state(slurm, job) == "CANCELLED", timeout=30)
        shown = slurm_command(slurm, "scontrol", "--oneliner", "show", "job", job)
        assert "RunTime=00:00:00" in shown, shown
        logs = master.wait(lambda: [
            line for line in master.logs(held_trial) if line.startswith(
                "preempted to make room for a more important job while it waited in its "
                f"agent's queue (Slurm job {job} is PENDING")], timeout=30)
        assert "it was cancelled there before it ran, with nothing to checkpoint; the trial " \
               "resumes from the beginning" in logs[0], logs
        # The important trial took its slot (Slurm holds its job until a node is free); the
        # held trial waits in det_hub's queue, with no job in Slurm's.
        urgent_trial = master.wait(lambda: master.trials(urgent_eid))[0]["id"]
        master.wait(lambda: slurm_jobs(master, urgent_trial), timeout=60)
        master.wait(lambda: [master.get(f"/trials/{held_trial}")["trial"][key] for key in (
            "state", "run_state", "restarts")] == ["QUEUED", "QUEUED", 0], timeout=30)
        assert slurm_jobs(master, held_trial) == [job]
        [queued] = master.wait(lambda: [j for j in master.get(f"/jobs?resource_pool={POOL}")[
            "jobs"] if j["experiment_id"] == held_eid])
        assert (queued["state"], queued["reason"], queued["slots_allocated"]) == \
            ("QUEUED", None, 0), queued
        kill_all(master, eids)
    finally:
        master.stop()
        cancel_jobs(master, slurm)


def slurm_command(slurm: dict[str, str], *argv: str) -> str:
    done = subprocess.run(argv, env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


def test_a_two_slot_trial_is_one_slurm_job_of_two_tasks(master: MasterProcess,
                                                         shared: Path) -> None:
    config = steps_config("dist", length=1)
    config["entrypoint"] = "python3 -m det_hub.launch.torch_distributed -- python3 train.py"
    config["resources"] = {"slots_per_trial": 2}
    eid = master.create_ok(on_slurm(config, shared), context=DIST)
    exp = master.wait_state(eid, timeout=240)
    [trial] = master.trials(eid)
    logs = master.logs(trial["id"])
    assert exp["state"] == "COMPLETED", "\n".join(logs[-30:])
    [job] = slurm_jobs(master, trial["id"])
    assert f"started: Slurm job {job} on n[1-2]" in logs, logs
    lines = [line for line in master.get_logs(trial["id"]) if " sum " in line["message"]]
    assert sorted(line["rank"] for line in lines) == [0, 1]
    for line in lines:
        rank = line["rank"]
        # Each rank is a node of its own (a Slurm task), and the all-reduce saw both: 0 + 1.
        assert re.fullmatch(rf"rank {rank} of 2 on node {rank} in container \w+ agent {rank} "
                            r"host \S+ sum 1", line["message"]), line
    validation = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [(m["steps_completed"], m["metrics"]["validation_loss"]) for m in validation] == \
        [(1, 0.5)], "the chief reports, once"
    [checkpoint] = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert sorted(checkpoint["resources"]) == ["metadata.json", "rank0.txt", "rank1.txt"]


def trial_under_way(master: MasterProcess, shared: Path,
                    max_restarts: int = 0) -> tuple[int, int, str]:
    """A 60-batch trial on the pool that checkpoints every 10 batches, once it has trained
    10: its experiment, its id and its Slurm job."""
    eid = master.create_ok(on_slurm(steps_config(length=60, max_restarts=max_restarts,
                                                 sleep=0.15, checkpoint_every=10), shared))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 10,
                timeout=120)
    [job] = slurm_jobs(master, trial_id)
    return eid, trial_id, job


def resumes_once_in_a_new_job(master: MasterProcess, eid: int, trial_id: int,
                              first_job: str, restarts: int = 0) -> list[str]:
    """The trial completed with ``restarts`` restarts counted, in a second job that went on
    from its checkpoint, every metric stored once; its log."""
    exp = master.wait_state(eid, timeout=240)
    trial = master.get(f"/trials/{trial_id}")["trial"]
    logs = master.logs(trial_id)
    assert exp["state"] == "COMPLETED", "\n".join(logs[-30:])
    assert trial["restarts"] == restarts and trial["steps_completed"] == 60
    first, second = slurm_jobs(master, trial_id)
    assert first == first_job and second != first_job
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert len(resumed) == 1 and resumed[0] >= 10, logs
    assert logs.count("done") == 1
    steps = [p["steps_completed"] for p in
             master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert steps == list(range(5, 61, 5)), "every report stored once"
    return logs


def test_a_job_slurm_asks_to_stop_checkpoints_and_goes_on_in_a_new_job(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    eid, trial_id, job = trial_under_way(master, shared)
    # What Slurm does near the job's time limit (--signal=B:TERM@N), or when it preempts it.
    slurm_command(slurm, "scancel", "--batch", "--signal=TERM", job)
    logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    assert any(line.startswith(f"Slurm asked job {job} to stop soon (SIGTERM")
               for line in logs), logs
    preempted = [int(line.split()[-1]) for line in logs if line.startswith("preempted at")]
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert preempted == resumed, "it stopped at a checkpoint of its own and went on from it"


def preempted_by_slurm(master: MasterProcess, slurm: dict[str, str], trial_id: int,
                       steps: int) -> tuple[str, str]:
    """Once the trial has reported ``steps``, Slurm preempts its job for one of a partition of
    a higher priority tier on its nodes, as a site without PreemptParameters=send_user_signal
    does: it cancels the job, SIGTERM to every process of it and SIGKILL KillWait (5 s) later.
    The trial's job and the preempting one."""
    master.wait(lambda: (master.get(f"/trials/{trial_id}")["trial"]["steps_completed"]
                         or 0) >= steps, timeout=180)
    [job] = slurm_jobs(master, trial_id)
    shown = slurm_command(slurm, "scontrol", "--oneliner", "show", "job", job)
    nodes = re.search(r" NodeList=(\S+)", shown).group(1)  # type: ignore[union-attr]
    urgent = slurm_command(slurm, "sbatch", "--parsable", "--partition=urgent",
                           f"--nodelist={nodes}", "--output=/dev/null", "--wrap", "sleep 2")
    return job, urgent.strip()


def went_on_in_a_new_job(master: MasterProcess, slurm: dict[str, str], eid: int,
                         trial_id: int, job: str, length: int) -> list[str]:
    """The trial completed its ``length`` in a second job after Slurm preempted ``job``,
    counting no restart; its log."""
    exp = master.wait_state(eid, timeout=240)
    trial = master.get(f"/trials/{trial_id}")["trial"]
    logs = master.logs(trial_id)
    assert exp["state"] == "COMPLETED", "\n".join(logs[-30:])
    assert trial["restarts"] == 0 and trial["steps_completed"] == length
    assert job_state(slurm, job) == "PREEMPTED"
    first, second = slurm_jobs(master, trial_id)
    assert first == job and second != job
    return logs


def test_a_job_slurm_preempts_checkpoints_at_its_sigterm_and_goes_on_in_a_new_job(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    """The trial takes Slurm's SIGTERM as the request to stop: it checkpoints where it is, and
    goes on from that checkpoint in a new job without counting a restart."""
    eid, trial_id, _ = trial_under_way(master, shared)
    job, urgent = preempted_by_slurm(master, slurm, trial_id, 10)
    logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    assert job_state(slurm, job) == "PREEMPTED"
    assert job_state(slurm, urgent) == "COMPLETED"
    preempted = [int(line.split()[-1]) for line in logs if line.startswith("preempted at")]
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert preempted == resumed, "it stopped at a checkpoint of its own and went on from it"
    assert any(f"SIGTERM: Slurm is ending job {job}" in line for line in logs), logs


@contextlib.contextmanager
def sending_user_signals(slurm: dict[str, str], grace: int = 30) -> Iterator[None]:
    """The test Slurm as a site that sends a preempted job its user signal:
    ``SlurmctldParameters=preempt_send_user_signal`` (Slurm 22.05's name for 23.02's
    ``PreemptParameters=send_user_signal``) and a ``GraceTime`` on the preempted partition;
    as it was again afterwards."""
    conf = Path(slurm["slurm_conf"])
    original = conf.read_text()
    debug = re.search(r"^PartitionName=debug .*$", original, re.MULTILINE)
    assert debug is not None and "SlurmctldParameters" not in original, original
    conf.write_text(original.replace(
        "PreemptMode=CANCEL\n", "PreemptMode=CANCEL\nSlurmctldParameters=preempt_send_user_signal\n")
                    .replace(debug.group(0), f"{debug.group(0)} GraceTime={grace}"))
    try:
        slurm_command(slurm, "scontrol", "reconfigure")
        assert "preempt_send_user_signal" in slurm_command(slurm, "scontrol", "show", "config")
        shown = slurm_command(slurm, "scontrol", "--oneliner", "show", "partition", "debug")
        assert f" GraceTime={grace} " in shown, shown
        yield
    finally:
        conf.write_text(original)
        slurm_command(slurm, "scontrol", "reconfigure")


def test_a_site_that_sends_the_user_signal_on_preemption_has_the_trial_checkpoint_at_once(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    """Where Slurm sends a preempted job its --signal at the start of its grace time, the
    runner takes it as the request to stop soon, the master preempts the trial, and the trial
    checkpoints and goes on from there in a new job, counting no restart: well before the
    grace time ends, and never through Slurm's cancel."""
    with sending_user_signals(slurm):
        eid, trial_id, _ = trial_under_way(master, shared)
        began = time.monotonic()
        job, urgent = preempted_by_slurm(master, slurm, trial_id, 10)
        master.wait(lambda: job_state(slurm, urgent) in ("RUNNING", "COMPLETED"), timeout=60)
        waited = time.monotonic() - began
        logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    assert any(line.startswith(f"Slurm asked job {job} to stop soon (SIGTERM")
               for line in logs), logs
    assert not any(f"SIGTERM: Slurm is ending job {job}" in line for line in logs), logs
    preempted = [int(line.split()[-1]) for line in logs if line.startswith("preempted at")]
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert preempted == resumed, "it stopped at a checkpoint of its own and went on from it"
    assert waited < 25, f"the preempting job waited {waited:.0f} s: the grace time ran out"


#: A PyTorchTrial slow enough for Slurm to preempt it in the middle of its training.
SLOW_TRIAL = """import time

from pytorch_trial_defs import RegressionTrial


class SlowTrial(RegressionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
"""


def test_a_pytorch_trial_slurm_preempts_checkpoints_at_its_sigterm(
        master: MasterProcess, shared: Path, slurm: dict[str, str], tmp_path: Path) -> None:
    """The Trainer asks should_preempt() every batch: Slurm's SIGTERM makes it checkpoint
    there, and the trial goes on from that checkpoint in a new job, every batch trained once."""
    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(TRIAL_DEFS, context / TRIAL_DEFS.name)
    (context / "slow_trial.py").write_text(SLOW_TRIAL)
    eid = master.create_ok(on_slurm({
        "name": "preempted-on-slurm", "entrypoint": "slow_trial:SlowTrial",
        "hyperparameters": {"hidden": 16, "lr": 0.05, "global_batch_size": 8},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 200}},
        "scheduling_unit": 10, "max_restarts": 0}, shared), context=context)
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    job, _ = preempted_by_slurm(master, slurm, trial_id, 20)
    logs = went_on_in_a_new_job(master, slurm, eid, trial_id, job, 200)
    # A checkpoint where Slurm stopped it, past the last step seen before, and one at the end.
    steps = sorted(c["steps_completed"] for c in
                   master.get(f"/experiments/{eid}/checkpoints")["checkpoints"])
    assert len(steps) == 2 and 20 <= steps[0] < 200 and steps[1] == 200, steps
    assert any(f"SIGTERM: Slurm is ending job {job}" in line for line in logs), logs
    trained = [m["steps_completed"] for m in
               master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert trained == list(range(10, 201, 10)), "every report stored once"


def test_a_two_slot_trial_slurm_preempts_checkpoints_on_every_rank(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    """Slurm preempts a two-task job: every process of it gets its SIGTERM (srun, the
    launchers, the ranks; the launchers pass it on too). Both ranks stop at the same batch,
    each writing its shard of one checkpoint, and go on from it in a new job."""
    config = steps_config("dist-preempted", length=80, sleep=0.1)
    config["entrypoint"] = "python3 -m det_hub.launch.torch_distributed -- python3 train.py"
    config["resources"] = {"slots_per_trial": 2}
    eid = master.create_ok(on_slurm(config, shared), context=DIST_STEPS)
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    job, _ = preempted_by_slurm(master, slurm, trial_id, 10)
    logs = went_on_in_a_new_job(master, slurm, eid, trial_id, job, 80)

    def at(prefix: str) -> list[int]:
        return [int(line.split()[-1]) for line in logs if line.startswith(prefix)]

    stopped = [at(f"rank {rank} preempted at") for rank in (0, 1)]
    resumed = [at(f"rank {rank} resumed at") for rank in (0, 1)]
    assert stopped[0] == stopped[1] == resumed[0] == resumed[1], logs
    [stop] = stopped[0]
    assert 10 <= stop < 80
    steps = sorted(c["steps_completed"] for c in
                   master.get(f"/experiments/{eid}/checkpoints")["checkpoints"])
    assert steps == [stop, 80]
    trained = [m["steps_completed"] for m in
               master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert trained == list(range(5, 81, 5)), "every report stored once"


def test_a_job_slurm_requeues_goes_on_from_its_checkpoint_in_a_new_job(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    eid = master.create_ok(on_slurm(steps_config(length=60, sleep=0.15, checkpoint_every=10),
                                    shared))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: any(line.startswith("checkpoint ") and line.endswith(" at 20")
                            for line in master.logs(trial_id)), timeout=120)
    [job] = slurm_jobs(master, trial_id)
    slurm_command(slurm, "scontrol", "requeue", job)
    logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    assert any(line.startswith(f"Slurm requeued job {job}; det_hub cancelled it there")
               and "the trial resumes from checkpoint" in line for line in logs), logs
    shown = slurm_command(slurm, "scontrol", "--oneliner", "show", "job", job)
    assert "JobState=CANCELLED" in shown and "Restarts=1" in shown, shown


def test_a_job_requeued_and_run_again_while_the_master_is_down_resumes_its_trial(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    """While the master is down, Slurm requeues a running trial's job and runs it again (its
    batch script exits at once, and the job ends FAILED). The restarted master adopts the job,
    sees Slurm's count of its requeues, and the trial goes on from its checkpoint in a new job
    without counting a restart (it has none to spare), as when the master sees a requeue."""
    eid, trial_id, job = trial_under_way(master, shared)
    # Its checkpoint at 10 is stored before the master goes: the trial resumes from there.
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["latest_checkpoint"],
                timeout=60)
    master.stop()
    slurm_command(slurm, "scontrol", "requeue", job)
    deadline = time.monotonic() + 60
    while job_state(slurm, job) != "PENDING":  # its processes are gone, it waits again
        assert time.monotonic() < deadline, slurm_command(
            slurm, "scontrol", "--oneliner", "show", "job", job)
        time.sleep(0.2)
    # At once, not after the delay Slurm gives a requeued job (BeginTime).
    slurm_command(slurm, "scontrol", "update", f"JobId={job}", "StartTime=now")
    while job_state(slurm, job) != "FAILED":
        assert time.monotonic() < deadline, slurm_command(
            slurm, "scontrol", "--oneliner", "show", "job", job)
        time.sleep(0.2)
    assert "Restarts=1" in slurm_command(slurm, "scontrol", "--oneliner", "show", "job", job)
    master.start()
    logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    assert any(line.startswith(f"Slurm requeued job {job}; its rerun ended FAILED before the "
                               "task ran again") and "the trial resumes from checkpoint" in line
               for line in logs), logs


def test_a_jobs_priority_is_its_nice_while_it_waits_in_slurms_queue(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    config = on_slurm(steps_config(length=5), shared)
    config["resources"]["priority"] = 50
    config["slurm"] = {"sbatch_args": ["--begin=now+3600"]}  # waits in Slurm's queue
    eid = master.create_ok(config)
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    job = master.wait(lambda: (slurm_jobs(master, trial_id) or [None])[0], timeout=60)

    def nice() -> int:
        shown = slurm_command(slurm, "squeue", "--noheader", f"--jobs={job}", "--format=%T|%y")
        assert shown.split("|")[0] == "PENDING", shown
        return int(shown.split("|")[1])

    assert nice() == 49
    r = master.api("PATCH", f"/jobs/exp-{eid}", json={"priority": 5})
    assert r.status_code == 200, r.text
    master.wait(lambda: nice() == 4, timeout=30)
    assert master.api("POST", f"/experiments/{eid}/kill").status_code == 200
    assert master.wait_state(eid, timeout=60)["state"] == "CANCELED"


def task_jobs(master: MasterProcess) -> set[str]:
    """The Slurm jobs of the tasks the master ran on the pool (their kept ids)."""
    return {str(json.loads(record.read_text())["job_id"])
            for record in (master.data_dir / "slurm" / POOL).glob("*.json")}


def job_state(slurm: dict[str, str], job_id: str) -> str:
    text = slurm_command(slurm, "scontrol", "--oneliner", "show", "job", job_id)
    return re.search(r"JobState=(\S+)", text).group(1)  # type: ignore[union-attr]


def test_a_notebook_and_a_shell_run_as_slurm_jobs_behind_the_masters_proxy(
        master: MasterProcess, slurm: dict[str, str], tmp_path: Path) -> None:
    from .test_proxied_tasks import execute, started_url, wait_state

    on_pool = ("--config", f"resources.resource_pool={POOL}")
    url = started_url(master, master.cli("notebook", "start", "--no-browser", *on_pool))
    [notebook] = master.get("/notebooks")["notebooks"]
    nid = notebook["id"]
    [job] = task_jobs(master)
    state, node = slurm_command(slurm, "squeue", "--noheader", f"--jobs={job}",
                                "--format=%T|%N").strip().split("|")
    assert state == "RUNNING" and node in ("n1", "n2")

    # Through the master's proxy to the node Slurm picked (NodeAddr 127.0.0.1 here), where the
    # job's user runs JupyterLab and its kernels.
    browser = requests.Session()
    page = browser.get(url, timeout=30)
    assert page.status_code == 200 and "JupyterLab" in page.text, page.text[:500]
    base = f"{master.url}/proxy/{nid}"
    assert requests.get(f"{base}/api/status", timeout=10).status_code == 401
    kernel = browser.post(f"{base}/api/kernels", json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text
    cookie = f"det_hub_task_{nid}={browser.cookies.get(f'det_hub_task_{nid}')}"
    out = execute(f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels",
                  cookie, "import os; print(os.getuid(), os.environ['SLURM_JOB_ID'])")
    assert any(m["msg_type"] == "stream" and m["content"]["text"] == f"65534 {job}\n"
               for m in out), out

    # Killing the notebook ends its Slurm job.
    master.cli("notebook", "kill", str(nid), check=True)
    ended = wait_state(master, "notebook", nid, "TERMINATED", timeout=90)
    assert ended["exit_reason"] == "killed by its owner or an admin"
    assert job_state(slurm, job) in ("COMPLETED", "CANCELLED", "FAILED")
    assert requests.get(url, timeout=10).status_code in (404, 503)

    # A shell: SSH through the master to its job's node.
    first = master.cli("shell", "start", *on_pool, "echo $SLURM_JOB_ID $(id -u); exit 3")
    assert first.returncode == 3, first.stdout + first.stderr
    [shell] = master.get("/shells")["shells"]
    [shell_job] = task_jobs(master) - {job}
    assert first.stdout.split() == [shell_job, "65534"]
    master.cli("shell", "kill", str(shell["id"]), check=True)
    wait_state(master, "shell", shell["id"], "TERMINATED", timeout=90)
    assert job_state(slurm, shell_job) in ("COMPLETED", "CANCELLED", "FAILED")


SLURM_HUB = """
c.JupyterHub.spawner_class = "det_hub.spawner.DetSpawner"
c.DetSpawner.resource_pool = {pool!r}
c.DetSpawner.queue_timeout = 120
c.DetSpawner.poll_interval = 0.5
c.Spawner.pre_spawn_hook = None
c.Spawner.cmd = [{python!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.args = []
c.Spawner.notebook_dir = {homes!r} + "/{{username}}"
# Servers outlive a hub restart.
c.JupyterHub.cleanup_servers = False
# The spawn request answers at once, and the spawn page's progress follows the start.
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
"""


def slurm_hub(tmp_path: Path, slurm: dict[str, str], shared: Path, *,
              local_pool: bool = False, hub_config: str = "") -> Any:
    """A hub (``det-hub up``) whose servers are Slurm jobs of the pool, the user ``frank``'s
    running as ``nobody`` with a home on the shared filesystem; ``hub_config`` is added to
    its JupyterHub config."""
    from det_hub.hub.up import find_proxy
    from det_hub.testing import HubProcess

    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    config = master_config(tmp_path, slurm, shared, local_pool=local_pool)
    homes = shared / "homes"
    (homes / "frank").mkdir(parents=True)
    os.chown(homes / "frank", 65534, 65534)  # the account frank's jobs run as (nobody)
    data = tmp_path / "hub"
    data.mkdir()
    (data / "jupyterhub_config.local.py").write_text(SLURM_HUB.format(
        pool=POOL, python=slurm["python"], homes=str(homes)) + hub_config)
    return HubProcess(data, ["--master-config", str(config)])


def stop_hub(hub: Any, slurm: dict[str, str]) -> None:
    """Stop a hub of :func:`slurm_hub` and cancel the Slurm jobs its master left."""
    hub.stop()
    ids = [json.loads(r.read_text())["job_id"]
           for r in (hub.data_dir / "slurm" / POOL).glob("*.json")]
    if ids:
        subprocess.run(["scancel", *map(str, ids)], check=False, capture_output=True,
                       env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]})


def kill_all(master: MasterProcess, eids: list[int]) -> None:
    """Kill the experiments and wait until each is CANCELED."""
    for eid in eids:
        master.api("POST", f"/experiments/{eid}/kill")
    for eid in eids:
        assert master.wait_state(eid, timeout=90)["state"] == "CANCELED"


def test_a_hub_users_server_runs_as_a_slurm_job(slurm: dict[str, str], shared: Path,
                                                tmp_path: Path) -> None:
    from det_hub.testing import HubProcess

    from .test_proxied_tasks import execute

    hub = slurm_hub(tmp_path, slurm, shared)
    data = hub.data_dir
    try:
        frank, admin = hub.token("frank"), hub.token("admin")
        auth = {"Authorization": f"token {frank}"}
        started = requests.post(f"{hub.url}/hub/api/users/frank/server", timeout=60,
                                headers=auth)
        assert started.status_code == 202, started.text
        with requests.get(f"{hub.url}/hub/api/users/frank/server/progress", stream=True,
                          timeout=120, headers=auth) as events:
            news = [json.loads(line[len("data:"):]) for line in
                    events.iter_lines(decode_unicode=True) if line and line.startswith("data:")]
        assert news[-1].get("ready"), news
        # The spawn page followed the job: waiting (det_hub's queue, then Slurm's reason),
        # then running while its server starts.
        assert "The server's job runs; waiting for the server to answer" in [
            n.get("message") for n in news], news

        # The server is a Slurm job of the user's account, on the node Slurm picked.
        [server] = hub.call("GET", "/hub_servers", admin).json()["hub_servers"]
        assert (server["owner"], server["state"], server["type"]) == (
            "frank", "RUNNING", "HUB_SERVER")
        [job] = {str(json.loads(r.read_text())["job_id"])
                 for r in (data / "slurm" / POOL).glob("*.json")}
        state, user = slurm_command(slurm, "squeue", "--noheader", f"--jobs={job}",
                                    "--format=%T|%u").strip().split("|")
        assert (state, user) == ("RUNNING", "nobody")
        # The hub's token for the server is nowhere in what the master shows.
        shown = hub.call("GET", f"/hub_servers/{server['id']}", frank)
        assert shown.status_code == 200 and "JUPYTERHUB_API_TOKEN" not in shown.text

        # Reached through the hub's proxy, rooted in the notebook directory the hub names,
        # seeded with the quickstart notebook.
        base = f"{hub.url}/user/frank"
        root = requests.get(f"{base}/api/contents", timeout=30, headers=auth)
        assert root.status_code == 200, root.text
        assert "quickstart.ipynb" in {item["name"] for item in root.json()["content"]}
        kernel = requests.post(f"{base}/api/kernels", timeout=60, headers=auth,
                               json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        # Its environment has the hub's token, and no process's command line shows it.
        out = execute(
            f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel.json()['id']}/channels", "",
            "import os, glob\n"
            "token = os.environ['JUPYTERHUB_API_TOKEN'].encode()\n"
            "shown = [p for p in glob.glob('/proc/[0-9]*/cmdline')\n"
            "         if token in open(p, 'rb').read()]\n"
            "print(os.getuid(), os.environ['SLURM_JOB_ID'], len(token) > 8, shown)",
            headers=auth)
        assert any(m["msg_type"] == "stream" and m["content"]["text"] == f"65534 {job} True []\n"
                   for m in out), out

        # A restarted hub (and its master) finds the server's job again and keeps it.
        hub.stop()
        hub = HubProcess(data, ["--master-config",  # on new ports
                                str(tmp_path / "det_hub_config.py")])
        status = requests.get(f"{hub.url}/user/frank/api/status", timeout=30, headers=auth)
        assert status.status_code == 200, status.text
        assert hub.call("GET", f"/hub_servers/{server['id']}", admin).json()[
            "hub_server"]["state"] == "RUNNING"

        # Stopping the server cancels its job.
        stopped = requests.delete(f"{hub.url}/hub/api/users/frank/server", timeout=90,
                                  headers=auth)
        assert stopped.status_code in (202, 204), stopped.text
        hub.wait(lambda: not requests.get(f"{hub.url}/hub/api/users/frank", timeout=10,
                                          headers=auth).json()["servers"], 90)
        [ended] = hub.call("GET", "/hub_servers", admin).json()["hub_servers"]
        assert ended["state"] == "TERMINATED"
        assert ended["exit_reason"] == "killed by its owner or an admin"
        assert job_state(slurm, job) in ("COMPLETED", "CANCELLED", "FAILED")
    finally:
        stop_hub(hub, slurm)


def hub_masters(hub: Any) -> list[Any]:
    """The hub's det_hub masters: the ``det-hub master`` processes JupyterHub runs as its
    service (one, or none while it starts it again)."""
    import psutil

    found = []
    for proc in psutil.Process(hub.proc.pid).children(recursive=True):
        try:
            if proc.cmdline()[1:4] == ["-m", "det_hub.cli.main", "master"]:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_hub_server_starting_while_the_master_restarts_runs(
        slurm: dict[str, str], shared: Path, tmp_path: Path) -> None:
    """The master dies while a hub server's job waits in Slurm's queue, and JupyterHub starts
    its service again: the restarted master adopts the job, the start goes on to a server that
    answers, and no second job is submitted for it."""
    hub = slurm_hub(tmp_path, slurm, shared)
    data = hub.data_dir
    # Both one-CPU nodes are taken, so that the server's job waits in Slurm's queue.
    blockers = [slurm_command(slurm, "sbatch", "--parsable", f"--partition={slurm['partition']}",
                              "--ntasks=1", "--output=/dev/null", "--wrap=sleep 300").strip()
                for _ in range(2)]
    try:
        frank = hub.token("frank")
        auth = {"Authorization": f"token {frank}"}
        for blocker in blockers:
            hub.wait(lambda b=blocker: job_state(slurm, b) == "RUNNING", 60)
        started = requests.post(f"{hub.url}/hub/api/users/frank/server", timeout=60,
                                headers=auth)
        assert started.status_code == 202, started.text

        def server_jobs() -> list[str]:
            return [str(json.loads(r.read_text())["job_id"])
                    for r in (data / "slurm" / POOL).glob("*.json")]

        [job] = hub.wait(server_jobs, 60)
        hub.wait(lambda: job_state(slurm, job) == "PENDING", 30)
        [old] = hub_masters(hub)
        old.kill()
        old.wait(30)
        # JupyterHub sees its service gone and starts it again, on the same port.
        hub.wait(lambda: [m.pid for m in hub_masters(hub)] not in ([], [old.pid])
                 and hub._answers(f"{hub.api}/health"), 90)
        assert job_state(slurm, job) == "PENDING"

        slurm_command(slurm, "scancel", *blockers)
        with requests.get(f"{hub.url}/hub/api/users/frank/server/progress", stream=True,
                          timeout=150, headers=auth) as events:
            news = [json.loads(line[len("data:"):]) for line in
                    events.iter_lines(decode_unicode=True) if line and line.startswith("data:")]
        assert news[-1].get("ready"), news
        status = requests.get(f"{hub.url}/user/frank/api/status", timeout=30, headers=auth)
        assert status.status_code == 200, status.text
        assert server_jobs() == [job]
        assert job_state(slurm, job) == "RUNNING"
        [server] = hub.call("GET", "/hub_servers", hub.token("admin")).json()["hub_servers"]
        assert (server["owner"], server["state"]) == ("frank", "RUNNING")
    finally:
        subprocess.run(["scancel", *blockers], check=False, capture_output=True,
                       env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]})
        stop_hub(hub, slurm)


#: What the job queue says of work Slurm holds back.
HELD = re.compile(r"Slurm job (\d+) is PENDING: \w+")


def test_an_asha_search_larger_than_the_pool_finishes_showing_slurms_reasons(
        tmp_path: Path, slurm: dict[str, str], shared: Path) -> None:
    # Three slots offered on two one-CPU nodes: det_hub hands Slurm three trials at a time,
    # Slurm runs two and holds the third back; the other trials wait in det_hub's queue.
    master = slurm_master(tmp_path, slurm, shared, pool_slots=3)
    try:
        config = steps_config("asha-on-slurm", length=16, sleep=0.05,
                              x={"type": "double", "minval": 0, "maxval": 1})
        config["searcher"] = {"name": "adaptive_asha", "metric": "validation_loss",
                              "max_length": {"batches": 16}, "max_trials": 6, "divisor": 2,
                              "max_rungs": 3, "mode": "aggressive",
                              "max_concurrent_trials": 3}
        eid = master.create_ok(on_slurm(config, shared))
        reasons: set[str] = set()
        most_submitted = 0
        deadline = time.monotonic() + 600
        while master.experiment(eid)["state"] not in ("COMPLETED", "ERROR", "CANCELED"):
            assert time.monotonic() < deadline, "the search did not end in 600 s"
            jobs = master.get(f"/jobs?resource_pool={POOL}")["jobs"]
            for job in jobs:
                if job.get("reason") and HELD.fullmatch(job["reason"]):
                    # Part of the search runs, part waits: only what Slurm runs is counted
                    # as allocated, and that is at most its two CPUs.
                    assert job["state"] in ("QUEUED", "SCHEDULED_PARTIALLY") \
                        and job["slots_allocated"] <= 2, job
                    reasons.add(job["reason"].split(": ")[-1])
            running = [t for t in master.trials(eid) if t["run_state"] in ("STARTING", "RUNNING")]
            most_submitted = max(most_submitted, len(running))
            time.sleep(0.2)
        exp = master.experiment(eid)
        trials = master.trials(eid)
        assert exp["state"] == "COMPLETED" and exp["progress"] == 1.0
        assert len(trials) == 6 and all(t["state"] == "COMPLETED" for t in trials)
        assert most_submitted <= 3, "never more of the search running than the pool's slots"
        assert reasons and reasons <= {"Resources", "Priority"}, reasons
        # Each run of each trial was a Slurm job of its own, and every one of them ended.
        jobs = [job for t in trials for job in slurm_jobs(master, t["id"])]
        assert len(jobs) >= 6 and len(set(jobs)) == len(jobs)
        assert {job_state(slurm, job) for job in jobs} == {"COMPLETED"}
        search = master.get(f"/experiments/{eid}/searcher")["searcher"]
        assert search["shutdown"] and search["waiting_trials"] == []
    finally:
        master.stop()
        cancel_jobs(master, slurm)


def test_pause_and_activate_go_on_exactly_in_a_new_job(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    eid, trial_id, job = trial_under_way(master, shared)
    assert master.api("POST", f"/experiments/{eid}/pause").status_code == 200
    # The trial checkpoints and stops through the preemption signal; its job ends and gives
    # its node back to Slurm.
    assert master.wait_state(eid, ("PAUSED",), timeout=120)["state"] == "PAUSED"
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["run_state"] is None,
                timeout=60)
    master.wait(lambda: job_state(slurm, job) == "COMPLETED", timeout=60)
    stopped = master.get(f"/trials/{trial_id}")["trial"]["steps_completed"]
    assert 10 <= stopped < 60
    assert slurm_jobs(master, trial_id) == [job], "nothing runs while it is paused"

    assert master.api("POST", f"/experiments/{eid}/activate").status_code == 200
    logs = resumes_once_in_a_new_job(master, eid, trial_id, job)
    preempted = [int(line.split()[-1]) for line in logs if line.startswith("preempted at")]
    resumed = [int(line.split()[-1]) for line in logs if line.startswith("resumed at")]
    assert len(preempted) == 1 and preempted == resumed, logs
    assert preempted[0] >= stopped, "it went on from where it stopped, not from an older point"


def test_a_trial_whose_node_is_lost_goes_on_from_its_checkpoint(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    """The node under a running trial goes down. Slurm either requeues its job (it was
    submitted ``--requeue``: det_hub cancels it there, and no restart is counted) or ends it
    NODE_FAIL (a restart, within ``max_restarts``); either way the trial goes on from its
    checkpoint in a new job (on whichever node Slurm picks: the test Slurm takes a node back
    into service as soon as its daemon registers again)."""
    eid, trial_id, job = trial_under_way(master, shared, max_restarts=1)
    node = slurm_command(slurm, "squeue", "--noheader", f"--jobs={job}", "--format=%N").strip()
    assert node in ("n1", "n2"), node
    slurm_command(slurm, "scontrol", "update", f"NodeName={node}", "State=DOWN",
                  "Reason=det_hub test: node lost")
    try:
        master.wait_state(eid, timeout=240)
        requeued = any(line.startswith(f"Slurm requeued job {job}")
                       for line in master.logs(trial_id))
        logs = resumes_once_in_a_new_job(master, eid, trial_id, job,
                                         restarts=0 if requeued else 1)
    finally:
        # Back in service for the other tests (the controller may have brought it back as
        # soon as its node daemon registered again: then Slurm refuses, and that is fine).
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                       env={**os.environ, "SLURM_CONF": slurm["slurm_conf"]},
                       capture_output=True, check=False)
    assert requeued or any(f"Slurm job {job}" in line and "NODE_FAIL" in line
                           for line in logs), logs
