"""The Slurm agent: how it reads Slurm's answers and asks for jobs (pure), and what it does
on the private test Slurm of ``scripts/test-services.sh start`` (a controller and two nodes
of one CPU each): jobs run as their owner's account, their logs and exit status reach the
master's side, a job Slurm holds back says why, cancels are recorded as Slurm says, and a new
agent finds a running job again. Without that Slurm the tests that need it are skipped, except
in CI, where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
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
    nice_for_priority,
    parse_job_id,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
    partition_slots,
    requeued_status,
    sbatch_argv,
    spreads_over_tasks,
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
            "Dependency=(null) Requeue=1 Restarts=2 ExitCode=0:15 NodeList=n2 BatchHost=n2")
    assert parse_scontrol_job(text) == SlurmJob("7", "TIMEOUT", "TimeLimit", "n2", "0:15", 2)
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
    assert with_slurm_reason(killed, SlurmJob("9", "RUNNING")) == killed
    # Slurm's preemption, or its requeue, takes the slots back: the task resumes later.
    assert with_slurm_reason(killed, SlurmJob("9", "PREEMPTED")) == \
        ExitStatus(-15, "SIGTERM", "Slurm job 9 was preempted by Slurm", resumable=True)
    assert exit_status_from_job(SlurmJob("9", "PREEMPTED"), "/j/exit.json").resumable
    # A task that exited 0 from a job Slurm ended stopped at Slurm's SIGTERM, not at its end:
    # resumable from a preempted job, a failure from one cancelled or timed out.
    assert with_slurm_reason(ExitStatus(0), SlurmJob("9", "PREEMPTED")) == ExitStatus(
        0, None, "Slurm job 9 was preempted by Slurm; its task checkpointed and stopped at "
        "Slurm's SIGTERM", resumable=True)
    for state, what in (("CANCELLED", "was cancelled (scancel)"),
                        ("TIMEOUT", "reached its time limit")):
        assert with_slurm_reason(ExitStatus(0), SlurmJob("9", state)) == ExitStatus(
            None, None, f"Slurm job 9 {what}; its task exited 0 at Slurm's SIGTERM, before "
            "its end")
    assert with_slurm_reason(ExitStatus(0), SlurmJob("9", "COMPLETED")) == ExitStatus(0)
    assert not exit_status_from_job(SlurmJob("9", "NODE_FAIL"), "/j/exit.json").resumable
    requeued = requeued_status("9", killed)
    assert (requeued.exit_code, requeued.signal, requeued.resumable) == (-15, "SIGTERM", True)
    assert requeued.reason is not None and requeued.reason.startswith("Slurm requeued job 9")


def test_the_sbatch_command() -> None:
    argv = sbatch_argv(sbatch="sbatch", job_name="det-hub-1.a", job_dir="/j/1.a",
                       script="/j/1.a/job.sh", slots=2, slot_type="cuda", cpus_per_slot=4,
                       gpu_type="a100", partition="gpu", account="ml", qos="high",
                       pool_args=["--time=60"], job_args=["--time=30", "--mem=8G"])
    assert argv == ["sbatch", "--parsable", "--job-name=det-hub-1.a", "--output=/j/1.a/slurm.out",
                    "--chdir=/j/1.a", "--requeue", "--nodes=1", "--ntasks=1",
                    "--cpus-per-task=8", "--gres=gpu:a100:2", "--partition=gpu",
                    "--account=ml", "--qos=high", "--time=60", "--time=30", "--mem=8G",
                    "/j/1.a/job.sh"]
    cpu = sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh", slots=3,
                      slot_type="cpu", cpus_per_slot=2)
    assert "--cpus-per-task=6" in cpu
    assert not any(a.startswith(("--gres", "--partition", "--account", "--qos", "--signal",
                                 "--nice")) for a in cpu)


def test_priority_is_slurms_nice() -> None:
    # det_hub's most important priority is no nice at all; less important ones give way.
    assert [nice_for_priority(p, 1) for p in (1, 2, 42, 99)] == [0, 1, 41, 98]
    assert [nice_for_priority(p, 100) for p in (1, 42)] == [0, 4100]
    assert nice_for_priority(42, 0) == 0
    assert nice_for_priority(0, 5) == 0  # never negative: only Slurm's operators may
    argv = sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh", slots=1,
                       slot_type="cpu", cpus_per_slot=1, nice=41)
    assert argv[-2:] == ["--nice=41", "/j/job.sh"]


def test_a_distributed_trial_is_one_task_per_slot() -> None:
    spread = sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh",
                         slots=4, slot_type="cuda", cpus_per_slot=8, gpu_type="a100",
                         spread=True, slots_per_node=2, stop_signal_seconds=120)
    assert spread[6:] == ["--ntasks=4", "--cpus-per-task=8", "--ntasks-per-node=2",
                          "--gpus-per-task=a100:1", "--signal=B:TERM@120", "/j/job.sh"]
    assert not any(a.startswith(("--nodes", "--gres")) for a in spread)
    cpu = sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh",
                      slots=2, slot_type="cpu", cpus_per_slot=1, spread=True)
    assert cpu[6:] == ["--ntasks=2", "--cpus-per-task=1", "/j/job.sh"]
    with pytest.raises(ValueError, match="GRES 'gpu', not 'mygpu'"):
        sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh", slots=2,
                    slot_type="cuda", cpus_per_slot=1, gres="mygpu", spread=True)
    # Which commands are spread: det_hub's (and Determined's) multi-node launchers only.
    assert spreads_over_tasks(["python3", "-m", "det_hub.launch.torch_distributed", "--", "x"])
    assert spreads_over_tasks(["python", "-m", "determined.launch.deepspeed", "train.py"])
    assert spreads_over_tasks(["python3", "-m", "det_hub.launch.horovod", "train.py"])
    assert not spreads_over_tasks(["python3", "-m", "det_hub.exec.harness", "model_def:T"])
    assert not spreads_over_tasks(["python3", "train.py", "-m",
                                   "det_hub.launch.torch_distributed"])
    assert not spreads_over_tasks(["python3", "-m"])


def test_the_batch_script_runs_the_runner() -> None:
    script = job_script("/opt/py 3/bin/python", "/j/1.a", "/usr/bin/scontrol")
    assert script.startswith("#!/bin/sh\n")
    # The runner gives the task its node's NodeAddr, looked up on the node.
    assert ("exec '/opt/py 3/bin/python' -I -m det_hub.agents.local_runner --log /j/1.a/task.log "
            "--exit-file /j/1.a/exit.json --start /j/1.a/start.json --stop-file "
            "/j/1.a/stop.json --slurm-node-address /usr/bin/scontrol --pass-env 'SLURM_*' "
            "--pass-env CUDA_VISIBLE_DEVICES --pass-env GPU_DEVICE_ORDINAL\n") in script
    # A job Slurm requeued and runs again does not run its task a second time, and leaves
    # its mark for when Slurm no longer keeps the job.
    assert script.index("SLURM_RESTART_COUNT") < script.index("exec ")
    assert '  echo "$SLURM_RESTART_COUNT" > /j/1.a/rerun\n  exit 1\n' in script


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


def wait_running(handle: SlurmTaskHandle, timeout: float = 120.0) -> None:
    """Until the job runs and its task has written a line (the runner is in place)."""
    deadline = time.monotonic() + timeout
    while handle.waiting is not None or not (handle.job_dir / "task.log").stat().st_size:
        assert handle.exit_status() is None, handle.read_logs()
        assert time.monotonic() < deadline, f"{handle} did not run within {timeout} s"
        time.sleep(0.2)


#: A torch.distributed worker: where it runs, and the sum of all ranks over gloo.
GLOO_SUM = ("import os, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
            "t = torch.tensor([float(dist.get_rank())]); dist.all_reduce(t); "
            "print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['SLURMD_NODENAME'], "
            "os.environ['MASTER_ADDR'], os.environ['OMP_NUM_THREADS'], t.item(), flush=True); "
            "dist.destroy_process_group()")


def run_two_slot_task(agent: SlurmAgent, allocation_id: str, launcher: str,
                      code: str) -> tuple[SlurmTaskHandle, list[str]]:
    """Run ``python3 -c code`` under ``launcher`` as a task of two slots to its end, which
    must be a success; its handle and its log lines, sorted."""
    info = {"master_url": "http://127.0.0.1:9", "allocation_id": allocation_id,
            "task_id": "trial-1", "slot_ids": [0, 1]}
    handle = agent.launch(TaskSpec(
        allocation_id, ["python3", "-m", launcher, "--", "python3", "-c", code],
        {"DET_HUB_CLUSTER_INFO": agent.file_path(allocation_id, CLUSTER_INFO_FILE)}, None,
        [0, 1], {CLUSTER_INFO_FILE: json.dumps(info)}, run_as=NOBODY))
    status = wait_end(handle, timeout=180)
    lines = sorted(line.message for line in handle.read_logs())
    assert status == ExitStatus(0, None, None), lines
    return handle, lines


def test_a_distributed_task_is_one_job_of_one_task_per_slot(make_agent: AgentFactory) -> None:
    handle, lines = run_two_slot_task(make_agent(), "5.a", "det_hub.launch.torch_distributed",
                                      GLOO_SUM)
    # One worker on each one-CPU node (one thread each), ranks 0 and 1 of 2, met at
    # 127.0.0.1: 0 + 1 = 1.
    fields = [line.split() for line in lines]
    assert [f[:3] + f[4:] for f in fields] == [
        ["[rank=0]", "0", "2", "127.0.0.1", "1", "1.0"],
        ["[rank=1]", "1", "2", "127.0.0.1", "1", "1.0"]]
    assert sorted(f[3] for f in fields) == ["n1", "n2"]
    # Each task read a cluster-info file of its own slot.
    for rank in (0, 1):
        own = json.loads((handle.job_dir / "tmp" / f"cluster-info.{rank}.json").read_text())
        assert (own["slot_ids"], own["container_rank"]) == ([rank], rank)


#: A Horovod worker: where it runs, and the sum of all ranks over Gloo.
HOROVOD_SUM = ("import os, torch, horovod.torch as hvd; hvd.init(); "
               "t = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum); "
               "print(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.cross_rank(), "
               "os.environ['SLURMD_NODENAME'], t.item(), flush=True)")


def test_a_horovod_task_is_one_job_of_one_task_per_slot_over_both_nodes(
        make_agent: AgentFactory) -> None:
    if importlib.util.find_spec("horovod") is None:
        message = "Horovod is not installed: run `make horovod`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)  # CI installs it: the test must run there
        pytest.skip(message)
    _, lines = run_two_slot_task(make_agent(), "13.a", "det_hub.launch.horovod", HOROVOD_SUM)
    # One worker on each node: ranks 0 and 1 of 2, local rank 0, cross ranks 0 and 1, met at
    # the chief's rendezvous: 0 + 1 = 1.
    fields = [line.split() for line in lines]
    assert [f[:5] + f[6:] for f in fields] == [
        ["[rank=0]", "0", "2", "0", "0", "1.0"],
        ["[rank=1]", "1", "2", "0", "1", "1.0"]]
    assert sorted(f[5] for f in fields) == ["n1", "n2"]


def test_a_sigterm_to_the_batch_step_asks_the_task_to_stop(make_agent: AgentFactory) -> None:
    agent = make_agent()
    handle = agent.launch(spec("6.a", "import time\nfor i in range(600):\n"
                                      "    print('tick', i, flush=True); time.sleep(0.2)"))
    wait_running(handle)
    assert handle.stop_requested is None
    # What Slurm does near the time limit (sbatch --signal=B:TERM@N), or on a preemption.
    done = agent.run_command("scancel", "--batch", "--signal=TERM", handle.job_id)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while handle.stop_requested is None:
        assert time.monotonic() < deadline, "the runner did not record the signal"
        time.sleep(0.2)
    assert handle.stop_requested.startswith(f"Slurm asked job {handle.job_id} to stop soon "
                                            "(SIGTERM to its batch step")
    # The task itself was not signalled: it goes on until asked through the master.
    handle.read_logs()
    time.sleep(1.0)
    assert handle.exit_status() is None and handle.read_logs()
    agent.kill(handle)
    assert wait_end(handle) == ExitStatus(-15, "SIGTERM", None)


def test_a_job_slurm_requeues_ends_resumable_and_never_runs_again(
        make_agent: AgentFactory) -> None:
    agent = make_agent()
    handle = agent.launch(spec("7.a", "import time; print('run', flush=True); time.sleep(300)"))
    wait_running(handle)
    done = agent.run_command("scontrol", "requeue", handle.job_id)
    assert done.returncode == 0, done.stderr
    status = wait_end(handle, timeout=90)
    assert status.resumable and status.signal == "SIGTERM", status
    assert status.reason is not None and \
        status.reason.startswith(f"Slurm requeued job {handle.job_id}")
    # Cancelled in Slurm's queue rather than run a second time.
    deadline = time.monotonic() + 30
    while True:
        shown = agent.run_command("scontrol", "--oneliner", "show", "job", handle.job_id).stdout
        if "JobState=CANCELLED" in shown:
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert [line.message for line in handle.read_logs()] == ["run"]


def requeue(agent: SlurmAgent, job_id: str) -> str:
    """Requeue a running job; returns the node it ran on."""
    job = parse_scontrol_job(agent.run_command("scontrol", "--oneliner", "show", "job",
                                               job_id).stdout)
    assert job is not None and job.nodes, job
    done = agent.run_command("scontrol", "requeue", job_id)
    assert done.returncode == 0, done.stderr
    return job.nodes


def rerun_at_once(agent: SlurmAgent, job_id: str, ran_on: str, timeout: float = 60.0) -> None:
    """Have a job Slurm requeued run again now rather than after the delay Slurm gives a
    requeued job (``BeginTime``); once it waits again, else Slurm sets that delay after us.
    Not on ``ran_on``, the node it ran on: that node refuses to start it again while the
    credential of its first run is revoked ("Job credential revoked"), and the job ends
    FAILED without its batch script running."""
    deadline = time.monotonic() + timeout
    while "JobState=PENDING" not in (shown := agent.run_command(
            "scontrol", "--oneliner", "show", "job", job_id).stdout):
        assert time.monotonic() < deadline, f"job {job_id} does not wait again: {shown}"
        time.sleep(0.2)
    done = agent.run_command("scontrol", "update", f"JobId={job_id}", "StartTime=now",
                             f"ExcNodeList={ran_on}")
    assert done.returncode == 0, done.stderr


def test_jobs_slurm_requeued_while_no_master_watched_end_resumable_when_found_again(
        make_agent: AgentFactory) -> None:
    """While the master is away, Slurm requeues two running jobs: one waits in its queue
    again, the other runs again at once (its batch script exits without running the task) and
    ends FAILED. A restarted master's agent takes both for requeued (Slurm counts the requeue),
    never for the task's failure: both end resumable, and the waiting one is cancelled."""
    agent = make_agent()
    sleep = "import time; print('run', flush=True); time.sleep(300)"
    waits, reran = agent.launch(spec("9.a", sleep)), agent.launch(spec("9.b", sleep))
    wait_running(waits)
    wait_running(reran)
    requeue(agent, waits.job_id)
    rerun_at_once(agent, reran.job_id, requeue(agent, reran.job_id))
    job = wait_job_ended(agent, reran.job_id)
    assert (job.state, job.restarts) == ("FAILED", 1), job

    found = make_agent()
    again = found.attach("9.b", 0, None)
    assert again is not None
    status = wait_end(again)
    assert status.resumable and status.signal == "SIGTERM", status
    assert status.reason == (f"Slurm requeued job {reran.job_id}; its rerun ended FAILED before "
                             "the task ran again, and det_hub starts the task again in a new job")
    assert [line.message for line in again.read_logs()] == ["run"]

    again = found.attach("9.a", 0, None)
    assert again is not None
    status = wait_end(again)
    assert status.resumable and status.reason is not None and status.reason.startswith(
        f"Slurm requeued job {waits.job_id}; det_hub cancelled it there"), status
    deadline = time.monotonic() + 30
    while "JobState=CANCELLED" not in (shown := agent.run_command(
            "scontrol", "--oneliner", "show", "job", waits.job_id).stdout):
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)


def wait_job_ended(agent: SlurmAgent, job_id: str, timeout: float = 60.0) -> SlurmJob:
    """The job as scontrol shows it once it has ended."""
    deadline = time.monotonic() + timeout
    while True:
        shown = agent.run_command("scontrol", "--oneliner", "show", "job", job_id).stdout
        job = parse_scontrol_job(shown)
        if job is not None and job.ended:
            return job
        assert time.monotonic() < deadline, f"job {job_id} did not end within {timeout} s: {shown}"
        time.sleep(0.5)


def test_a_job_requeued_and_run_again_between_two_looks_ends_resumable(
        make_agent: AgentFactory) -> None:
    """With the master watching, Slurm requeues a running job and runs it again before the
    agent's next look at the queue, so the job is never seen waiting again: its rerun's batch
    script exits at once and it ends FAILED. Slurm's count of its requeues tells: the task
    ends resumable, never as a failure of its own (which would count a restart)."""
    agent = make_agent()
    handle = agent.launch(spec("10.a", "import time; print('run', flush=True); time.sleep(300)"))
    wait_running(handle)
    agent.poll_interval = 600.0  # the agent's last look at the queue saw it running
    rerun_at_once(agent, handle.job_id, requeue(agent, handle.job_id))
    job = wait_job_ended(agent, handle.job_id)
    assert (job.state, job.restarts) == ("FAILED", 1), job
    status = wait_end(handle)
    assert status.resumable and status.signal == "SIGTERM", status
    assert status.reason == (f"Slurm requeued job {handle.job_id}; its rerun ended FAILED "
                             "before the task ran again, and det_hub starts the task again in "
                             "a new job")
    assert [line.message for line in handle.read_logs()] == ["run"]


def test_a_rerun_is_known_after_slurm_has_forgotten_the_job(
        make_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm requeues a running job and runs it again while no master watches, and has
    forgotten the job (``MinJobAge``, 600 s here) by the time a master finds it again: the mark
    the rerun's batch script left tells the requeue, and the task ends resumable."""
    agent = make_agent()
    handle = agent.launch(spec("11.a", "import time; print('run', flush=True); time.sleep(300)"))
    wait_running(handle)
    rerun_at_once(agent, handle.job_id, requeue(agent, handle.job_id))
    job = wait_job_ended(agent, handle.job_id)
    assert (job.state, job.restarts) == ("FAILED", 1), job
    mark = agent.job_dir("11.a") / "rerun"
    assert mark.exists(), (agent.job_dir("11.a") / "slurm.out").read_text()
    assert mark.read_text() == "1\n"

    found = make_agent()
    # What squeue, scontrol and sacct (none here) answer once Slurm has forgotten the job.
    monkeypatch.setattr(found, "job", lambda job_id, fresh=False: SlurmJob(job_id, "UNKNOWN"))
    monkeypatch.setattr(found, "requeues", lambda job_id: 0)
    again = found.attach("11.a", 0, None)
    assert again is not None
    status = wait_end(again)
    assert status.resumable and status.signal == "SIGTERM", status
    assert status.reason == (f"Slurm requeued job {handle.job_id}; its rerun ended before the "
                             "task ran again (Slurm no longer keeps the job), and det_hub starts "
                             "the task again in a new job")


def test_a_requeue_whose_rerun_never_ran_is_known_from_accounting_once_slurm_forgot_the_job(
        slurm_acct: dict[str, str], slurm_shared: Path, tmp_path: Path) -> None:
    """While no master watches, Slurm requeues a running job, and the requeued job is
    cancelled in its queue before it runs again: its batch script never ran a second time to
    leave its mark, and the controller has forgotten the job by the time a master finds it
    again. Accounting, where the site keeps it, still lists the requeued run: the task ends
    resumable, to go on in a new job, never as a cancel of its own (which would count a
    restart)."""
    def agent() -> SlurmAgent:
        return SlurmAgent(tmp_path / "state", private_paths=[tmp_path / "private"],
                          **{**slurm_acct, "agent_id": "t", "job_root": str(slurm_shared),
                             "poll_interval": 0.3, "exit_file_grace": 1.0})

    first = agent()
    handle = first.launch(spec("12.a", "import time; print('run', flush=True); time.sleep(300)"))
    try:
        wait_running(handle)
        requeue(first, handle.job_id)
        deadline = time.monotonic() + 60
        while "JobState=PENDING" not in (shown := first.run_command(
                "scontrol", "--oneliner", "show", "job", handle.job_id).stdout):
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        assert first.run_command("scancel", handle.job_id).returncode == 0
        while first.run_command("scontrol", "show", "job", handle.job_id).returncode == 0:
            assert time.monotonic() < deadline, "the controller still keeps the job"
            time.sleep(0.5)
        assert not (first.job_dir("12.a") / "rerun").exists(), "the rerun never ran"

        found = agent()
        assert found.requeues(handle.job_id) == 1  # from accounting alone
        again = found.attach("12.a", 0, None)
        assert again is not None
        status = wait_end(again)
        assert status.resumable, status
        assert status.reason == (f"Slurm requeued job {handle.job_id}; its rerun ended "
                                 "CANCELLED before the task ran again, and det_hub starts the "
                                 "task again in a new job")
        assert [line.message for line in again.read_logs()] == ["run"]
    finally:
        first.run_command("scancel", handle.job_id)


def test_a_job_that_ran_and_ended_between_two_looks_is_not_taken_for_requeued(
        make_agent: AgentFactory) -> None:
    """The agent last saw the job waiting; it ran and ended before the agent's next look at
    the queue. Its exit is its own, never a requeue (which would run the task again, and
    again)."""
    agent = make_agent(poll_interval=600.0)
    # Held at submission, so that the agent's one look surely finds it waiting (a free node
    # can start a job before that look).
    handle = agent.launch(spec("8.a", "print('quick')", slurm={"sbatch_args": ["--hold"]}))
    # What the agent saw at its one look: submitted, not yet running.
    assert handle.exit_status() is None and handle.waiting is not None
    released = agent.run_command("scontrol", "release", handle.job_id)
    assert released.returncode == 0, released.stderr
    exit_file = agent.job_dir("8.a") / "exit.json"
    deadline = time.monotonic() + 60
    while not exit_file.exists():
        assert time.monotonic() < deadline, "the job did not end within 60 s"
        time.sleep(0.1)
    status = handle.exit_status()
    assert status == ExitStatus(0, None, None) and not status.resumable, status
    assert [line.message for line in handle.read_logs()] == ["quick"]


def nice_of(agent: SlurmAgent, job_id: str) -> int:
    shown = agent.run_command("scontrol", "--oneliner", "show", "job", job_id).stdout
    job = parse_scontrol_job(shown)
    assert job is not None and job.waiting, shown
    [nice] = [int(w.split("=", 1)[1]) for w in shown.split() if w.startswith("Nice=")]
    return nice


def test_a_waiting_jobs_priority_is_its_nice(make_agent: AgentFactory) -> None:
    agent = make_agent()
    # Held back an hour by its own sbatch option: it waits in Slurm's queue for the test.
    handle = agent.launch(spec("8.a", "pass", priority=60,
                               slurm={"sbatch_args": ["--begin=now+3600"]}))
    assert nice_of(agent, handle.job_id) == 59
    agent.set_priority(handle, 10)  # runs beside the caller, as the job's user
    deadline = time.monotonic() + 30
    while nice_of(agent, handle.job_id) != 9:
        assert time.monotonic() < deadline, "scontrol update did not change its Nice"
        time.sleep(0.2)
    agent.kill(handle)
    assert not wait_end(handle).success


def test_a_job_listens_on_its_nodes_address_and_the_agent_names_it(
        make_agent: AgentFactory) -> None:
    # The pool's own address is not where its jobs run: both sides ask Slurm for the node's.
    agent = make_agent(address="login-node.invalid")
    task = TaskSpec("6.a", ["python3", "-c", "import os, time; print(os.environ["
                            "'DET_HUB_AGENT_ADDRESS'], os.environ['SLURM_JOB_NODELIST'], "
                            "flush=True); time.sleep(60)"],
                    {"DET_HUB_AGENT_ADDRESS": "login-node.invalid"}, None, [0],
                    {CLUSTER_INFO_FILE: "{}"}, run_as=NOBODY)
    handle = agent.launch(task)
    with pytest.raises(LookupError, match=f"Slurm job {handle.job_id} of allocation 6.a is"):
        agent.task_address(handle)  # not running yet: no node
    deadline = time.monotonic() + 60
    lines: list[str] = []
    while not lines:
        assert handle.exit_status() is None and time.monotonic() < deadline
        lines = [line.message for line in handle.read_logs()]
        time.sleep(0.2)
    address, node = lines[0].split()
    assert node in ("n1", "n2") and address == "127.0.0.1"  # the test nodes' NodeAddr
    assert agent.task_address(handle) == "127.0.0.1"
    agent.kill(handle)
    assert wait_end(handle).signal == "SIGTERM"
