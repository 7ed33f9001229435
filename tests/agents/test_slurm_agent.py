"""The Slurm agent: how it reads Slurm's answers and asks for jobs (pure), and what it does
on the private test Slurm of ``scripts/test-services.sh start`` (a controller and two nodes
of one CPU each): jobs run as their owner's account, their logs and exit status reach the
master's side, a job Slurm holds back says why, cancels are recorded as Slurm says, and a new
agent finds a running job again. Without that Slurm the tests that need it are skipped, except
in CI, where they fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.agents import ExitStatus, TaskSpec
from det_hub.agents.slurm import (
    SlurmAgent,
    SlurmJob,
    SlurmTaskHandle,
    exit_status_from_job,
    job_script,
    parse_job_id,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
    partition_slots,
    sbatch_argv,
    waiting_text,
    with_slurm_reason,
)
from det_hub.contract import CLUSTER_INFO_FILE

NOBODY = (65534, 65534)

# ------------------------------------------------------------------------------ pure helpers


def test_squeue_lines_are_read_by_job() -> None:
    jobs = parse_squeue("12|PENDING|Resources|\n13|RUNNING|None|n1\n"
                        "14|CANCELLED|None|n2\n\nnot a job line\n")
    assert jobs == {
        "12": SlurmJob("12", "PENDING", "Resources", ""),
        "13": SlurmJob("13", "RUNNING", "None", "n1"),
        "14": SlurmJob("14", "CANCELLED", "None", "n2"),
    }
    assert jobs["12"].waiting and not jobs["12"].ended
    assert not jobs["13"].waiting and not jobs["13"].ended
    assert jobs["14"].ended


def test_scontrol_and_sacct_answers() -> None:
    text = ("JobId=7 JobName=det-hub-1.ab UserId=nobody(65534) JobState=TIMEOUT Reason=TimeLimit "
            "Dependency=(null) ExitCode=0:15 NodeList=n2 BatchHost=n2")
    assert parse_scontrol_job(text) == SlurmJob("7", "TIMEOUT", "TimeLimit", "n2", "0:15")
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified") is None
    assert parse_sacct("7|CANCELLED by 1000|0:15|n1\n7.batch|CANCELLED|0:15|n1\n", "7") == \
        SlurmJob("7", "CANCELLED", "", "n1", "0:15")
    assert parse_sacct("", "7") is None


def test_sbatch_prints_the_job_id() -> None:
    assert parse_job_id("4242\n") == "4242"
    assert parse_job_id("4242;cluster-a\n") == "4242"
    with pytest.raises(ValueError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed\n")


def test_why_a_job_waits() -> None:
    assert waiting_text(SlurmJob("3", "PENDING", "Resources")) == \
        "Slurm job 3 is PENDING: Resources"
    assert waiting_text(SlurmJob("3", "PENDING", "None")) == "Slurm job 3 is PENDING"
    assert waiting_text(SlurmJob("3", "PENDING", "(QOSMaxJobsPerUserLimit)")) == \
        "Slurm job 3 is PENDING: QOSMaxJobsPerUserLimit"


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                   "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "UNKNOWN"])
def test_a_job_that_ended_without_its_task_saying_so_never_succeeds(state: str) -> None:
    status = exit_status_from_job(SlurmJob("9", state, exit_code="0:0"), "/jobs/a/exit.json")
    assert not status.success
    assert status.reason is not None and "9" in status.reason


def test_slurm_states_read_as_reasons() -> None:
    assert exit_status_from_job(SlurmJob("9", "FAILED", exit_code="127:0"), "x") == \
        ExitStatus(127, None, "Slurm job 9 failed with exit code 127")
    assert exit_status_from_job(SlurmJob("9", "NODE_FAIL", exit_code="0:9"), "x") == \
        ExitStatus(None, "SIGKILL", "Slurm job 9 was lost with its node (NODE_FAIL), signal "
                   "SIGKILL")
    assert exit_status_from_job(SlurmJob("9", "UNKNOWN"), "/j/exit.json").reason == \
        "Slurm no longer knows job 9, and its task left no exit status in /j/exit.json"
    killed = ExitStatus(-15, "SIGTERM")
    assert with_slurm_reason(killed, SlurmJob("9", "CANCELLED")) == \
        ExitStatus(-15, "SIGTERM", "Slurm job 9 was cancelled (scancel)")
    assert with_slurm_reason(ExitStatus(0), SlurmJob("9", "CANCELLED")) == ExitStatus(0)
    assert with_slurm_reason(killed, SlurmJob("9", "RUNNING")) == killed


def test_the_sbatch_command() -> None:
    argv = sbatch_argv(sbatch="sbatch", job_name="det-hub-1.a", job_dir="/j/1.a",
                       script="/j/1.a/job.sh", slots=2, slot_type="cuda", cpus_per_slot=4,
                       gpu_type="a100", partition="gpu", account="ml", qos="high",
                       pool_args=["--time=60"], job_args=["--time=30", "--mem=8G"])
    assert argv == ["sbatch", "--parsable", "--job-name=det-hub-1.a", "--output=/j/1.a/slurm.out",
                    "--chdir=/j/1.a", "--no-requeue", "--nodes=1", "--ntasks=1",
                    "--cpus-per-task=8", "--gres=gpu:a100:2", "--partition=gpu",
                    "--account=ml", "--qos=high", "--time=60", "--time=30", "--mem=8G",
                    "/j/1.a/job.sh"]
    cpu = sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh", slots=3,
                      slot_type="cpu", cpus_per_slot=2)
    assert "--cpus-per-task=6" in cpu
    assert not any(a.startswith(("--gres", "--partition", "--account", "--qos")) for a in cpu)


def test_the_batch_script_runs_the_runner() -> None:
    script = job_script("/opt/py 3/bin/python", "/j/1.a")
    assert script.startswith("#!/bin/sh\n")
    assert ("exec '/opt/py 3/bin/python' -I -m det_hub.agents.local_runner --log /j/1.a/task.log "
            "--exit-file /j/1.a/exit.json --start /j/1.a/start.json --pass-env 'SLURM_*' "
            "--pass-env CUDA_VISIBLE_DEVICES --pass-env GPU_DEVICE_ORDINAL\n") in script


def test_slots_of_a_partition() -> None:
    sinfo = "n1|8|gpu:a100:4(S:0-1)\nn2|8|gpu:2,mps:100\nn1|8|gpu:a100:4(S:0-1)\nn3|6|(null)\n"
    assert partition_slots(sinfo, "cuda", 1) == 6
    assert partition_slots(sinfo, "cpu", 4) == 2 + 2 + 1
    assert partition_slots("", "cpu", 1) == 0


# ----------------------------------------------------------------- on the test Slurm cluster


AgentFactory = Callable[..., SlurmAgent]


@pytest.fixture
def make_agent(slurm: dict[str, str], slurm_shared: Path,
               tmp_path: Path) -> Iterator[AgentFactory]:
    made: list[SlurmAgent] = []

    def make(**traits: Any) -> SlurmAgent:
        settings = {**slurm, "agent_id": "t", "job_root": str(slurm_shared), "poll_interval": 0.3,
                    "exit_file_grace": 1.0, **traits}
        agent = SlurmAgent(tmp_path / "state", private_paths=[tmp_path / "private"], **settings)
        made.append(agent)
        return agent

    yield make
    # Whatever a test left in Slurm's queue goes: the nodes are shared by the tests.
    for agent in made:
        for record in (tmp_path / "state").glob("*.json"):
            job_id = json.loads(record.read_text())["job_id"]
            agent.run_command("scancel", str(job_id))


def spec(allocation_id: str, code: str, *, slots: int = 1, **kwargs: Any) -> TaskSpec:
    kwargs.setdefault("run_as", NOBODY)
    return TaskSpec(allocation_id, ["python3", "-c", code], {"DET_HUB_TEST": "yes"}, None,
                    list(range(slots)), {CLUSTER_INFO_FILE: "{}"}, **kwargs)


def wait_end(handle: SlurmTaskHandle, timeout: float = 60.0) -> ExitStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = handle.exit_status()
        if status is not None:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{handle} did not end within {timeout} s")


def test_a_job_runs_as_its_owner_and_reports_its_output_and_exit(
        make_agent: AgentFactory) -> None:
    agent = make_agent()
    assert [s.kind for s in agent.slots] == ["cpu", "cpu"]  # the two one-CPU nodes
    handle = agent.launch(spec("1.a", "import os, sys; print('uid', os.getuid(), "
                               "os.environ['DET_HUB_TEST'], os.environ['SLURM_JOB_ID'], "
                               "os.environ['OMP_NUM_THREADS']); "
                               "print('oops', file=sys.stderr); sys.exit(3)"))
    assert handle.waiting is not None  # submitted: not seen running yet
    status = wait_end(handle)
    assert status == ExitStatus(3, None, None)
    lines = [(line.stdtype, line.message) for line in handle.read_logs()]
    assert lines == [("stdout", f"uid 65534 yes {handle.job_id} 1"), ("stderr", "oops")]
    job_dir = agent.job_dir("1.a")
    assert (job_dir.stat().st_uid, job_dir.stat().st_mode & 0o777) == (65534, 0o700)
    assert not (job_dir / "start.json").exists()  # it held the task's environment


def test_a_job_slurm_holds_back_says_why_and_a_cancel_ends_it(
        make_agent: AgentFactory) -> None:
    agent = make_agent(pool_slots=3)
    sleep = "import time; print('up', flush=True); time.sleep(120)"
    running = [agent.launch(spec(f"2.{i}", sleep)) for i in range(2)]
    held = agent.launch(spec("2.2", sleep))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for h in (*running, held):
            assert h.exit_status() is None
        if all(h.waiting is None for h in running) and held.waiting is not None \
                and held.waiting.endswith("Resources"):
            break
        time.sleep(0.2)
    # Both nodes are busy: Slurm holds the third job for want of resources.
    assert held.waiting == f"Slurm job {held.job_id} is PENDING: Resources"
    agent.kill(held)
    status = wait_end(held)
    assert not status.success
    assert status.reason is not None and "cancelled" in status.reason
    # A running job asked to stop gets SIGTERM; the runner records the task's end.
    agent.kill(running[0])
    assert wait_end(running[0]) == ExitStatus(-15, "SIGTERM", None)
    # scancel from outside (an admin, Slurm itself): the reason says so.
    agent.run_command("scancel", running[1].job_id)
    status = wait_end(running[1])
    assert not status.success
    assert status.reason is not None and f"Slurm job {running[1].job_id}" in status.reason


def test_a_new_agent_finds_a_running_job_again(make_agent: AgentFactory) -> None:
    agent = make_agent()
    handle = agent.launch(spec("3.a", "import time; print('one', flush=True); time.sleep(4); "
                                      "print('two')"))
    deadline = time.monotonic() + 60
    while not handle.read_logs():
        assert handle.exit_status() is None and time.monotonic() < deadline
        time.sleep(0.2)
    offset = handle.log_offset
    again = make_agent().attach("3.a", offset, None)
    assert again is not None and again.job_id == handle.job_id
    assert wait_end(again) == ExitStatus(0, None, None)
    assert [line.message for line in again.read_logs()] == ["two"]
    assert make_agent().attach("never-submitted", 0, None) is None


def test_what_is_refused(make_agent: AgentFactory, tmp_path: Path) -> None:
    agent = make_agent()
    with pytest.raises(PermissionError, match="never submits jobs as root"):
        agent.launch(spec("4.a", "pass", run_as=(0, 0)))
    with pytest.raises(ValueError, match="det_hub sets --output"):
        agent.launch(spec("4.b", "pass", slurm={"sbatch_args": ["--output=/tmp/x"]}))
    private = {"checkpoint_storage": {"type": "shared_fs",
                                      "host_path": str(tmp_path / "private" / "ckpt")}}
    with pytest.raises(ValueError, match="private data directory"):
        agent.launch(TaskSpec("4.c", ["true"], {}, None, [0],
                              {CLUSTER_INFO_FILE: json.dumps(private)}, run_as=NOBODY))
    with pytest.raises(RuntimeError, match="sbatch refused"):
        agent.launch(spec("4.d", "pass", slurm={"sbatch_args": ["--partition=no-such"]}))
    assert not agent.job_dir("4.d").exists()
    with pytest.raises(ValueError, match="job_root is required"):
        make_agent(job_root="")
