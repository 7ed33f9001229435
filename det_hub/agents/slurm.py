"""The Slurm agent: a resource pool backed by a Slurm partition, through Slurm's own commands.

A :class:`SlurmAgent` stands for one partition. Each task det_hub places on it becomes one batch
job, submitted with ``sbatch --parsable`` as the task owner's linked Unix account (never as
root), in a directory of its own on the filesystem the master and the nodes share
(:attr:`SlurmAgent.job_root`). The job's only step is det_hub's task runner
(:mod:`det_hub.agents.local_runner`, the local agent's): it starts
:mod:`det_hub.exec.task_start` with the task's environment, writes every output line with its
time and stream to ``task.log`` and the task's exit status to ``exit.json`` in that directory,
where the master reads them as it reads a local task's.

The agent's slots are what det_hub may have handed to Slurm at once; Slurm decides when each job
runs. A job Slurm holds back is ``PENDING`` with Slurm's reason: its allocation stays
``STARTING`` and the job queue shows that reason (:attr:`SlurmTaskHandle.waiting`). Slurm says
nothing unasked, so the agent asks ``squeue`` about all its jobs at once, at most every
:attr:`~SlurmAgent.poll_interval` seconds; a job ``squeue`` has forgotten is looked up with
``scontrol`` and ``sacct``. The runner's exit status is the task's; a job that ended without
one (cancelled before its task ran, its node lost, its time limit reached) ends with the
reason Slurm gives, never as a success. Jobs are submitted with ``--no-requeue``: det_hub, not
Slurm, restarts a failed trial, from its latest checkpoint, as ``max_restarts`` allows.

The job ids live in the master's own directory (``state_dir``), never in a place the job's user
can write; a restarted master finds its jobs there (:meth:`SlurmAgent.attach`), and every
``scancel`` runs as the job's user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traitlets import Enum, Float, Integer, List, Unicode

from det_hub.agents._base import (
    PYTHON_NAMES,
    Agent,
    AgentUnreachable,
    ExitStatus,
    LogLine,
    TaskHandle,
    TaskSpec,
)
from det_hub.agents.local import LocalTaskHandle
from det_hub.agents.slots import SlotInfo
from det_hub.config.slurm import sbatch_arg_problems
from det_hub.contract import CLUSTER_INFO_FILE
from det_hub.env_names import DATA_CACHE_ENV

#: Slurm job states in which the job waits for its resources (or for them to be set up).
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                            "REQUEUE_FED", "RESV_DEL_HOLD"})
#: Slurm job states in which the job has ended, and what each means, for exit reasons.
ENDED_STATES = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "was cancelled (scancel)",
    "TIMEOUT": "reached its time limit",
    "NODE_FAIL": "was lost with its node (NODE_FAIL)",
    "PREEMPTED": "was preempted by Slurm",
    "OUT_OF_MEMORY": "ran out of memory",
    "BOOT_FAIL": "could not boot its node (BOOT_FAIL)",
    "DEADLINE": "missed its deadline",
    "REVOKED": "was revoked by a sibling cluster",
    "SPECIAL_EXIT": "ended in SPECIAL_EXIT",
}
#: What ``squeue`` prints per job: id, state, reason, node list.
SQUEUE_FORMAT = "%i|%T|%r|%N"
#: Variables of the job's own environment that the runner hands on to the task: Slurm's, and
#: the GPUs Slurm gave the job.
PASSED_VARIABLES = ("SLURM_*", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
#: A task's ``PATH`` after its Python's directory.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: Where the Slurm commands are looked for when ``bin_dir`` is empty.
COMMAND_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# ------------------------------------------------------------------------------- pure helpers


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """A Slurm job as ``squeue``, ``scontrol`` or ``sacct`` describe it.

    ``state`` is Slurm's base state (``PENDING``, ``RUNNING``, ``CANCELLED``, ...); ``UNKNOWN``
    for a job none of them knows any more. ``exit_code`` is ``code:signal`` where known.
    """

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES or self.state == "UNKNOWN"


def _base_state(text: str) -> str:
    # sacct writes "CANCELLED by 1000"; squeue may add "+" flags.
    return text.strip().split(" ")[0].rstrip("+").upper()


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """The jobs in ``squeue --noheader --format=`` :data:`SQUEUE_FORMAT` output, by id."""
    jobs = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or not fields[0]:
            continue
        job_id, state, reason, nodes = fields[0], fields[1], fields[2], "|".join(fields[3:])
        jobs[job_id] = SlurmJob(job_id, _base_state(state), reason.strip(), nodes.strip())
    return jobs


def parse_scontrol_job(text: str) -> SlurmJob | None:
    """The job in ``scontrol --oneliner show job ID`` output (``Key=value`` pairs), or None."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    if "JobId" not in fields or "JobState" not in fields:
        return None
    return SlurmJob(fields["JobId"], _base_state(fields["JobState"]),
                    fields.get("Reason", ""), fields.get("NodeList", ""),
                    fields.get("ExitCode", ""))


def parse_sacct(text: str, job_id: str) -> SlurmJob | None:
    """The job ``job_id`` in ``sacct --noheader --parsable2 --allocations
    --format=JobID,State,ExitCode,NodeList`` output, or None."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 4 and fields[0] == job_id:
            return SlurmJob(job_id, _base_state(fields[1]), "", fields[3], fields[2])
    return None


def parse_job_id(text: str) -> str:
    """The job id ``sbatch --parsable`` prints (``ID`` or ``ID;CLUSTER``).

    Raises:
        ValueError: It printed no job id.
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {text.strip()[:200]!r}")
    return job_id


def waiting_text(job: SlurmJob) -> str:
    """Why a waiting job waits, as the job queue shows it."""
    reason = job.reason.strip("()")
    because = f": {reason}" if reason and reason != "None" else ""
    return f"Slurm job {job.job_id} is {job.state}{because}"


def _exit_code(text: str) -> tuple[int | None, str | None]:
    """``(code, signal name)`` of Slurm's ``code:signal``."""
    code_text, _, sig_text = text.partition(":")
    code = int(code_text) if code_text.strip().isdigit() else None
    sig = None
    if sig_text.strip().isdigit() and int(sig_text) > 0:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(int(sig_text)).name
    return code, sig


def exit_status_from_job(job: SlurmJob, where: str) -> ExitStatus:
    """The exit status of a job that ended without its task's own (see the module's
    docstring): never a success, since nothing says the task ran to its end.

    Args:
        where: the exit status file that is missing, for the reason.
    """
    if job.state == "UNKNOWN":
        return ExitStatus(None, reason=f"Slurm no longer knows job {job.job_id}, and its task "
                                       f"left no exit status in {where}")
    code, sig = _exit_code(job.exit_code)
    what = ENDED_STATES.get(job.state, f"ended {job.state}")
    if job.state == "COMPLETED":
        return ExitStatus(None, reason=f"Slurm job {job.job_id} completed, but its task left "
                                       f"no exit status in {where}: nothing says it ran")
    detail = f" with exit code {code}" if code else ""
    if sig:
        detail += f", signal {sig}"
    return ExitStatus(code or None, sig, reason=f"Slurm job {job.job_id} {what}{detail}")


def with_slurm_reason(status: ExitStatus, job: SlurmJob | None) -> ExitStatus:
    """The task's own exit status, with what Slurm says of its job where that says more (a
    task killed by the signal ``scancel`` sent)."""
    if job is None or status.success or job.state not in ENDED_STATES \
            or job.state == "COMPLETED":
        return status
    slurm = f"Slurm job {job.job_id} {ENDED_STATES[job.state]}"
    return dataclasses.replace(status, reason=f"{status.reason}; {slurm}" if status.reason
                               else slurm)


def sbatch_argv(*, sbatch: str, job_name: str, job_dir: str, script: str, slots: int,
                slot_type: str, cpus_per_slot: int, gres: str = "gpu",
                gpu_type: str | None = None, partition: str = "", account: str = "",
                qos: str = "", pool_args: Sequence[str] = (),
                job_args: Sequence[str] = ()) -> list[str]:
    """The ``sbatch`` command that submits one task of ``slots`` slots as one job: one task on
    one node, with ``cpus_per_slot`` CPUs per slot and, for GPU slots, one GRES ``gres`` (of
    ``gpu_type`` when given) per slot. The pool's options come after det_hub's, the
    experiment's last, so that theirs win where Slurm takes the last of an option.

    Pure: nothing here runs a command, so how a job is asked for is testable without Slurm.
    """
    argv = [sbatch, "--parsable", f"--job-name={job_name}", f"--output={job_dir}/slurm.out",
            f"--chdir={job_dir}", "--no-requeue", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={max(1, cpus_per_slot) * slots}"]
    if slot_type == "cuda":
        kind = f"{gres}:{gpu_type}" if gpu_type else gres
        argv.append(f"--gres={kind}:{slots}")
    for option, value in (("--partition", partition), ("--account", account),
                          ("--qos", qos)):
        if value:
            argv.append(f"{option}={value}")
    return [*argv, *pool_args, *job_args, script]


def job_script(python: str, job_dir: str) -> str:
    """The batch script: the task's runner as the job's one process (see the module's
    docstring)."""
    runner = [python, "-I", "-m", "det_hub.agents.local_runner", "--log",
              f"{job_dir}/task.log", "--exit-file", f"{job_dir}/exit.json", "--start",
              f"{job_dir}/start.json"]
    for name in PASSED_VARIABLES:
        runner += ["--pass-env", name]
    return ("#!/bin/sh\n"
            "# A det_hub task: its runner writes the task's log and exit status beside this.\n"
            f"exec {shlex.join(runner)}\n")


def partition_slots(sinfo: str, slot_type: str, cpus_per_slot: int, gres: str = "gpu") -> int:
    """How many slots the nodes of ``sinfo --noheader --Node --format=%N|%c|%G`` output hold:
    their CPUs by ``cpus_per_slot``, or their GRES ``gres`` for GPU slots. A node listed
    twice (in two partitions, two states) counts once."""
    seen: dict[str, tuple[int, int]] = {}
    for line in sinfo.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 3 or not fields[0]:
            continue
        cpus = int(fields[1]) if fields[1].strip().isdigit() else 0
        gpus = 0
        for item in fields[2].split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == gres and parts[-1].isdigit():
                gpus += int(parts[-1])
        seen[fields[0]] = (cpus, gpus)
    if slot_type == "cuda":
        return sum(g for _, g in seen.values())
    return sum(c // max(1, cpus_per_slot) for c, _ in seen.values())


# ------------------------------------------------------------------------------------ handles


class SlurmTaskHandle(TaskHandle):
    """A task's Slurm job, submitted by this agent or found again after a master restart."""

    def __init__(self, agent: SlurmAgent, allocation_id: str, job_id: str, job_dir: Path,
                 run_as: tuple[int, int] | None, *, log_offset: int = 0) -> None:
        self.allocation_id = allocation_id
        self.job_id = job_id
        self.job_dir = job_dir
        self.run_as = run_as
        self.pid = None
        self.where = f"Slurm job {job_id}"
        self._agent = agent
        # The runner writes the local agent's files: read them the same way.
        self._files = LocalTaskHandle(allocation_id, job_dir, None, log_offset)
        self._status: ExitStatus | None = None
        self._waiting: str | None = None
        #: When the job was first seen ended without the runner's exit status (monotonic).
        self._ended_at: float | None = None

    def __repr__(self) -> str:
        return f"SlurmTaskHandle({self.allocation_id!r}, job {self.job_id})"

    @property
    def log_offset(self) -> int:
        return self._files.log_offset

    @log_offset.setter
    def log_offset(self, value: int) -> None:
        self._files.log_offset = value

    @property
    def waiting(self) -> str | None:
        return self._waiting

    def read_logs(self) -> list[LogLine]:
        return self._files.read_logs()

    def exit_status(self) -> ExitStatus | None:
        """The runner's exit status once written, else Slurm's account of a job that ended
        without one (after :attr:`SlurmAgent.exit_file_grace`, for a shared filesystem to
        show the file); None while the job waits or runs.

        Raises:
            AgentUnreachable: Slurm's controller does not answer.
        """
        if self._status is not None:
            return self._status
        job = self._agent.job(self.job_id)
        own = self._files.exit_status()
        if own is not None:
            if not own.success and not job.ended:
                # Killed: ask Slurm now whether it did it (scancel, a time limit).
                job = self._agent.job(self.job_id, fresh=True)
            self._status = with_slurm_reason(own, job)
            self._waiting = None
            if job.nodes:
                self.where = f"Slurm job {self.job_id} on {job.nodes}"
            return self._status
        if job.ended:
            now = time.monotonic()
            if self._ended_at is None:
                self._ended_at = now
            if now - self._ended_at < self._agent.exit_file_grace:
                return None
            self._status = exit_status_from_job(job, str(self._files.exit_path))
            tail = self._agent.output_tail(self.job_dir)
            if tail:
                self._status = dataclasses.replace(
                    self._status, reason=f"{self._status.reason}; its output ends: {tail}")
            self._waiting = None
            return self._status
        self._waiting = waiting_text(job) if job.waiting else None
        if not job.waiting and job.nodes:
            self.where = f"Slurm job {self.job_id} on {job.nodes}"
        return None

    def alive(self) -> bool:
        """Whether the job waits or runs (or has just ended, its exit status still on the
        way)."""
        return self.exit_status() is None


# -------------------------------------------------------------------------------------- agent


class SlurmAgent(Agent):
    """A Slurm partition as a resource pool (see the module's docstring)."""

    kind = "slurm"
    queues_tasks = True

    partition = Unicode("", config=True, help="""The Slurm partition the pool's jobs go to
        (sbatch --partition); empty for the cluster's default partition.""")
    account = Unicode("", config=True, help="The Slurm account jobs are charged to (--account).")
    qos = Unicode("", config=True, help="The Slurm quality of service of the jobs (--qos).")
    slot_type = Enum(["cpu", "cuda"], "cpu", config=True, help="""What a slot is: `cpu`, a
        group of cpus_per_slot CPUs; `cuda`, one GPU (one GRES `gres`) with cpus_per_slot
        CPUs.""")
    cpus_per_slot = Integer(1, min=1, config=True, help="CPUs a job gets per slot.")
    gres = Unicode("gpu", config=True, help="""The GRES one GPU slot is (--gres=GRES:N, or
        GRES:TYPE:N where an experiment's slurm.gpu_type names a type).""")
    pool_slots = Integer(0, min=0, config=True, help="""How many slots the pool offers: det_hub hands
        Slurm jobs while those it has handed ask for fewer slots in all, and Slurm runs each
        when its nodes are free (a job Slurm holds back shows Slurm's reason in the job
        queue). 0: as many as the partition's nodes hold (their CPUs, or GPUs for `cuda`
        slots), found with sinfo.""")
    sbatch_args = List(Unicode(), config=True, help="""More sbatch options for every job of the
        pool (--time=..., --mem-per-cpu=..., --constraint=...); an experiment's
        slurm.sbatch_args come after them. Options det_hub sets itself (--output, --job-name,
        --chdir, --nodes, ...) are refused.""")
    job_root = Unicode("", config=True, help="""A directory that the master and every node of
        the partition see at the same path (a shared filesystem): each job gets a directory
        below it, owned by the job's user, holding its code, log and exit status. Required.""")
    python = Unicode(sys.executable, config=True, help="""The Python, with det_hub installed,
        that runs tasks on the nodes: the same path on every node (a shared installation, or
        the same one everywhere).""")
    bin_dir = Unicode("", config=True, help="""Where Slurm's commands (sbatch, squeue, scontrol,
        scancel, sinfo, sacct) are; empty to find them on the usual PATH.""")
    slurm_conf = Unicode("", config=True, help="""The slurm.conf the commands read (their
        SLURM_CONF); empty for their default.""")
    submit_as = Enum(["owner", "master"], "owner", config=True, help="""Whose account submits
        each job. `owner`: the task owner's linked Unix account (`det-hub user
        link-with-agent-user`), else MasterApp.task_user; the master must run as root to submit
        for them (it never submits as root). `master`: the master's own account, for a master
        that does not run as root; every user's jobs then run as that one account and can read
        one another's files (the admin page shows a warning).""")
    poll_interval = Float(2.0, min=0.1, config=True, help="""Seconds between asking squeue about
        the pool's jobs (one call for all of them): how soon a job that started or ended is
        seen.""")
    exit_file_grace = Float(5.0, min=0.0, config=True, help="""Seconds a job that Slurm says has
        ended may take to show its task's exit status on the shared filesystem before it is
        taken to have ended without one.""")
    command_timeout = Float(60.0, min=1.0, config=True, help="""Seconds a Slurm command may take
        before the controller is taken not to answer.""")
    environment = List(Unicode(), config=True, help="""`NAME=value` variables every task gets
        (an experiment's own environment_variables win).""")

    def __init__(self, state_dir: Path, *, private_paths: Sequence[str | Path] = (),
                 **kwargs: Any) -> None:
        """``state_dir``: the master's own directory for the agent's job ids (no job's user
        may write there). ``private_paths``: what a task may not use (the master's data
        directory): a checkpoint storage there is refused, since no node reaches it."""
        super().__init__(**kwargs)
        if not self.job_root:
            raise ValueError(f"Slurm agent {self.agent_id}: job_root is required: a directory "
                             "the master and the partition's nodes share at the same path")
        bad = [v for v in self.environment if "=" not in v]
        if bad:
            raise ValueError(f"Slurm agent {self.agent_id}: environment: {bad[0]!r} is not "
                             "NAME=value")
        problems = sbatch_arg_problems(list(self.sbatch_args), "sbatch_args")
        if problems:
            raise ValueError(f"Slurm agent {self.agent_id}: " + "; ".join(map(str, problems)))
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.private_paths = [Path(p).resolve() for p in private_paths]
        self.as_root = os.geteuid() == 0
        if self.as_root and self.submit_as == "master":
            raise ValueError(f"Slurm agent {self.agent_id}: submit_as = 'master' is refused when "
                             "the master runs as root: jobs would run as root")
        self._lock = threading.Lock()
        #: The jobs of tasks being watched, by job id, and what Slurm last said of each.
        self._tracked: set[str] = set()
        self._jobs: dict[str, SlurmJob] = {}
        self._polled_at = 0.0
        self.slots: list[SlotInfo] = []
        self._discovered = False
        try:
            self._discover_slots()
        except AgentUnreachable as e:
            # The master starts with the controller down; the slots come at the first check()
            # that reaches it.
            self.log.warning("Slurm agent %s: %s; no slots until it answers", self.agent_id, e)

    # -- Slurm's commands

    def _command(self, name: str) -> str:
        path = os.path.join(self.bin_dir, name) if self.bin_dir else shutil.which(
            name, path=COMMAND_PATH)
        if not path or not os.access(path, os.X_OK):
            raise AgentUnreachable(f"Slurm's {name} is not installed "
                                   f"({'in ' + self.bin_dir if self.bin_dir else 'on PATH'})")
        return path

    def _environment(self) -> dict[str, str]:
        env = {"PATH": COMMAND_PATH, "LANG": "C.UTF-8"}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def run_command(self, name: str, *args: str, user: tuple[int, int] | None = None,
                    cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run one of Slurm's commands, as ``user`` where given (the master being root).

        Raises:
            AgentUnreachable: the command is missing or did not answer in time.
        """
        argv = [self._command(name), *args]
        kwargs: dict[str, Any] = {}
        if user is not None and self.as_root and user[0] != 0:
            kwargs = {"user": user[0], "group": user[1], "extra_groups": []}
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=self.command_timeout, env=self._environment(),
                                  cwd=cwd or "/", stdin=subprocess.DEVNULL, **kwargs)
        except subprocess.TimeoutExpired as e:
            raise AgentUnreachable(f"{name} did not answer within {self.command_timeout:g} s")\
                from e

    @staticmethod
    def _unreachable(done: subprocess.CompletedProcess[str]) -> bool:
        text = done.stderr.lower()
        return "unable to contact slurm controller" in text or "connection refused" in text \
            or "socket timed out" in text or "zero bytes were transmitted" in text

    def check(self) -> None:
        """Ask the controller whether it is up; the first answer after a start without it
        brings the slots.

        Raises:
            AgentUnreachable: it does not answer.
        """
        done = self.run_command("scontrol", "ping")
        if done.returncode != 0 or "is UP" not in done.stdout:
            raise AgentUnreachable(f"the Slurm controller does not answer: "
                                   f"{(done.stdout + done.stderr).strip()[-300:]}")
        if not self._discovered:
            self._discover_slots()

    def _discover_slots(self) -> None:
        count = self.slots_count()
        kind = self.slot_type
        where = f"partition {self.partition}" if self.partition else "the default partition"
        self.slots = [SlotInfo(i, kind, description=f"a slot of Slurm's {where}")
                      for i in range(count)]
        self._discovered = True
        self.log.info("Slurm agent %s (%s): %d %s slot(s)", self.agent_id, where, count, kind)

    def slots_count(self) -> int:
        """:attr:`pool_slots`, or what the partition's nodes hold when it is 0.

        Raises:
            AgentUnreachable: sinfo did not answer.
        """
        if self.pool_slots:
            return int(self.pool_slots)
        args = ["--noheader", "--Node", "--format=%N|%c|%G"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        done = self.run_command("sinfo", *args)
        if done.returncode != 0:
            raise AgentUnreachable(f"sinfo failed: {done.stderr.strip()[-300:]}")
        return partition_slots(done.stdout, self.slot_type, self.cpus_per_slot, self.gres)

    # -- what Slurm says of the jobs

    def job(self, job_id: str, *, fresh: bool = False) -> SlurmJob:
        """What Slurm last said of a watched job: asked again once :attr:`poll_interval` has
        passed since the last time (for all watched jobs at once), or now (``fresh``).

        Raises:
            AgentUnreachable: the controller does not answer.
        """
        with self._lock:
            self._tracked.add(job_id)
            known = self._jobs.get(job_id)
            if known is not None and known.ended:
                return known
            if known is None or fresh or \
                    time.monotonic() - self._polled_at >= self.poll_interval:
                self._poll()
            return self._jobs[job_id]

    def _poll(self) -> None:
        ids = sorted(j for j in self._tracked
                     if j not in self._jobs or not self._jobs[j].ended)
        self._polled_at = time.monotonic()
        if not ids:
            return
        done = self.run_command("squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}",
                                f"--format={SQUEUE_FORMAT}")
        if done.returncode != 0 and "invalid job id" not in done.stderr.lower():
            raise AgentUnreachable(f"squeue failed: {done.stderr.strip()[-300:]}")
        found = parse_squeue(done.stdout) if done.returncode == 0 else {}
        for job_id in ids:
            self._jobs[job_id] = found.get(job_id) or self._look_up(job_id)

    def _look_up(self, job_id: str) -> SlurmJob:
        """A job squeue does not list: from scontrol, else from accounting (where the site
        keeps it), else UNKNOWN."""
        done = self.run_command("scontrol", "--oneliner", "show", "job", job_id)
        if done.returncode == 0:
            job = parse_scontrol_job(done.stdout)
            if job is not None:
                return job
        elif self._unreachable(done):
            raise AgentUnreachable(f"scontrol failed: {done.stderr.strip()[-300:]}")
        done = self.run_command("sacct", "--noheader", "--parsable2", "--allocations",
                                f"--jobs={job_id}", "--format=JobID,State,ExitCode,NodeList")
        if done.returncode == 0:
            job = parse_sacct(done.stdout, job_id)
            if job is not None:
                return job
        return SlurmJob(job_id, "UNKNOWN")

    def output_tail(self, job_dir: Path, lines: int = 3) -> str:
        """The last lines of what the job wrote outside its task (Slurm's own messages, a
        runner that could not start), for an exit reason."""
        try:
            with open(job_dir / "slurm.out", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())

    # -- the Agent interface

    def job_dir(self, allocation_id: str) -> Path:
        return Path(self.job_root) / self.agent_id / allocation_id

    def file_path(self, allocation_id: str, name: str) -> str:
        return str(self.job_dir(allocation_id) / name)

    def isolation_warning(self) -> str | None:
        if self.submit_as == "master":
            return (f"agent {self.agent_id} submits every user's Slurm jobs as the master's own "
                    "account (submit_as = 'master'): any job can read what that account can")
        if not self.as_root:
            return (f"agent {self.agent_id} cannot submit Slurm jobs as their owners' accounts: "
                    "the master does not run as root; it runs only admins' tasks")
        return None

    def _submitter(self, spec: TaskSpec) -> tuple[int, int] | None:
        """Whose account submits ``spec``'s job: None for the master's own."""
        if self.submit_as == "master" or not self.as_root:
            if self.submit_as == "owner" and not spec.owner_is_admin:
                raise PermissionError(
                    f"agent {self.agent_id} submits Slurm jobs as their owners' Unix accounts, "
                    "which needs a master running as root; this one runs only admins' tasks "
                    "(an operator can set submit_as = 'master' to submit every job as the "
                    "master's own account)")
            return None
        if spec.run_as is None or 0 in spec.run_as:
            raise PermissionError(f"allocation {spec.allocation_id}: no Unix account to submit "
                                  "its Slurm job as; det_hub never submits jobs as root")
        return spec.run_as

    def _storage_problem(self, spec: TaskSpec) -> str | None:
        """Why the task's checkpoint storage cannot be used from the nodes, or None."""
        try:
            info = json.loads(spec.files.get(CLUSTER_INFO_FILE, "{}"))
        except ValueError:
            return None
        storage = info.get("checkpoint_storage") or {}
        if storage.get("type") != "shared_fs" or not storage.get("host_path"):
            return None
        path = Path(str(storage["host_path"])).resolve()
        if any(path == p or p in path.parents for p in self.private_paths):
            return (f"its checkpoint storage {path} is in the master's private data directory, "
                    "which jobs on Slurm nodes cannot use: give the experiment a "
                    "checkpoint_storage on the filesystem the nodes share (shared_fs "
                    "host_path) or an object store")
        return None

    def task_environment(self, spec: TaskSpec, job_dir: Path) -> dict[str, str]:
        """The task's environment: its own, with its home, its temporary directory and its
        Python; never the master's. Slurm's variables are added on the node by the runner."""
        env: dict[str, str] = {"LANG": "C.UTF-8"}
        env.update(v.split("=", 1) for v in self.environment)  # type: ignore[misc]
        env.update(spec.env)
        cache = env.get(DATA_CACHE_ENV)
        if cache and any(Path(cache).resolve() == p or p in Path(cache).resolve().parents
                         for p in self.private_paths):
            del env[DATA_CACHE_ENV]  # the master's own directory: its home's cache instead
        env["PYTHONUNBUFFERED"] = "1"
        env["HOME"] = str(job_dir / "home")
        env["TMPDIR"] = str(job_dir / "tmp")
        env["PATH"] = os.path.dirname(self.python) + os.pathsep + env.get("PATH", DEFAULT_PATH)
        site_dir = Path(__file__).resolve().parent.parent / "compat" / "site"
        if site_dir.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(site_dir), env.get("PYTHONPATH", "")) if p)
        if self.slot_type == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["OMP_NUM_THREADS"] = str(self.cpus_per_slot * max(1, len(spec.slot_ids)))
        return env

    def launch(self, spec: TaskSpec) -> SlurmTaskHandle:
        """Lay out the task's job directory and submit its job.

        Raises:
            PermissionError: no account may submit the job (see :attr:`submit_as`).
            ValueError: the task's sbatch options or checkpoint storage cannot be used.
            RuntimeError: sbatch refused the job; nothing is left submitted.
            AgentUnreachable: the controller does not answer.
        """
        user = self._submitter(spec)
        job_args = [str(a) for a in spec.slurm.get("sbatch_args") or []]
        problems = sbatch_arg_problems(job_args, "slurm.sbatch_args")
        if problems:
            raise ValueError("; ".join(map(str, problems)))
        storage = self._storage_problem(spec)
        if storage:
            raise ValueError(storage)
        if not spec.slot_ids:
            raise ValueError(f"allocation {spec.allocation_id}: a Slurm job needs at least "
                             "one slot")
        root = self.job_dir(spec.allocation_id)
        self._lay_out(spec, root, user)
        argv = sbatch_argv(
            sbatch=self._command("sbatch"), job_name=f"det-hub-{spec.allocation_id}",
            job_dir=str(root), script=str(root / "job.sh"), slots=len(spec.slot_ids),
            slot_type=self.slot_type, cpus_per_slot=self.cpus_per_slot, gres=self.gres,
            gpu_type=spec.slurm.get("gpu_type"), partition=self.partition,
            account=self.account, qos=self.qos, pool_args=list(self.sbatch_args),
            job_args=job_args)
        try:
            done = self.run_command(os.path.basename(argv[0]), *argv[1:], user=user,
                                    cwd=str(root))
            if done.returncode != 0:
                raise RuntimeError(f"sbatch refused the job of allocation {spec.allocation_id}"
                                   f": {done.stderr.strip()[-500:] or done.stdout.strip()}")
            job_id = parse_job_id(done.stdout)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        record = {"job_id": job_id, "run_as": list(user) if user else None}
        _write_private(self.state_dir / f"{spec.allocation_id}.json",
                       json.dumps(record).encode(), replace=True)
        handle = SlurmTaskHandle(self, spec.allocation_id, job_id, root, user)
        where = f"partition {self.partition}" if self.partition else "the default partition"
        handle._waiting = f"Slurm job {job_id} was submitted to {where}"
        with self._lock:
            self._tracked.add(job_id)
        self.log.info("Slurm agent %s: allocation %s is job %s: %s", self.agent_id,
                      spec.allocation_id, job_id, shlex.join(argv))
        return handle

    def _lay_out(self, spec: TaskSpec, root: Path, user: tuple[int, int] | None) -> None:
        """The job's directory: its working directory, home and temporary directory, the
        context, its files, the runner's start file and the batch script, owned by the job's
        user (0700: no one else's)."""
        for level in (Path(self.job_root), root.parent):
            if not level.is_dir():
                level.mkdir(parents=True)
                # Made here: users reach their own job's directory, and list none.
                os.chmod(level, 0o711)
        os.chmod(root.parent, 0o711)
        if root.exists():
            shutil.rmtree(root)  # an earlier try at this allocation
        root.mkdir(mode=0o700)
        owned = [root]
        for name in ("run", "home", "tmp"):
            (root / name).mkdir(mode=0o700)
            owned.append(root / name)
        if spec.context:
            owned.append(_write_private(root / "context.tar", spec.context, mode=0o400))
        for name, text in spec.files.items():
            owned.append(_write_private(root / name, text.encode(), mode=0o400))
        argv = list(spec.argv)
        if argv and argv[0] in PYTHON_NAMES:
            argv[0] = self.python
        entry = [self.python, "-I", "-m", "det_hub.exec.task_start"]
        if spec.context:
            entry += ["--context", str(root / "context.tar"), "--into", str(root / "run")]
        start = {"argv": entry, "command": argv, "env": self.task_environment(spec, root),
                 "cwd": str(root / "run"), "sandboxed": False, "cpus": []}
        owned.append(_write_private(root / "start.json", json.dumps(start).encode()))
        owned.append(_write_private(root / "job.sh", job_script(self.python, str(root)).encode(),
                                    mode=0o500))
        if user is not None:
            for path in owned:
                os.chown(path, *user)

    def attach(self, allocation_id: str, log_offset: int,
               pid: int | None) -> SlurmTaskHandle | None:
        """The allocation's job, from the job id kept when it was submitted; None when none
        was kept. A job Slurm no longer knows is returned too: its handle says so.

        Raises:
            AgentUnreachable: the controller does not answer.
        """
        try:
            record = json.loads((self.state_dir / f"{allocation_id}.json").read_text())
        except (OSError, ValueError):
            return None
        run_as = record.get("run_as")
        handle = SlurmTaskHandle(self, allocation_id, str(record["job_id"]),
                                 self.job_dir(allocation_id),
                                 tuple(run_as) if run_as else None,
                                 log_offset=log_offset)
        handle.exit_status()  # what Slurm says of it now: waiting, running or ended
        return handle

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        """Cancel a job that waits, or that must stop now (``force``); else signal its
        processes with SIGTERM, and the runner records how the task ended. ``scancel`` runs
        as the job's user, beside the caller."""
        assert isinstance(handle, SlurmTaskHandle)
        if handle.waiting is not None or force:
            args = [handle.job_id]
        else:
            args = ["--full", "--signal=TERM", handle.job_id]

        def cancel() -> None:
            try:
                done = self.run_command("scancel", *args, user=handle.run_as)
            except AgentUnreachable as e:
                self.log.warning("could not cancel Slurm job %s: %s", handle.job_id, e)
                return
            if done.returncode != 0:
                self.log.warning("scancel %s: %s", " ".join(args), done.stderr.strip()[-300:])

        threading.Thread(target=cancel, name=f"scancel-{handle.job_id}", daemon=True).start()

    def reap(self, handle: TaskHandle) -> None:
        """Stop watching a finished job."""
        assert isinstance(handle, SlurmTaskHandle)
        with self._lock:
            self._tracked.discard(handle.job_id)
            self._jobs.pop(handle.job_id, None)

    def cleanup(self, allocation_id: str) -> None:
        """Remove what a finished job left: its directory and its kept id."""
        shutil.rmtree(self.job_dir(allocation_id), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / f"{allocation_id}.json").unlink()


def _write_private(path: Path, data: bytes, *, mode: int = 0o600, replace: bool = False) -> Path:
    """Write a new file created with ``mode`` (never readable by others in between)."""
    if replace:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


__all__ = [
    "ENDED_STATES",
    "WAITING_STATES",
    "SlurmAgent",
    "SlurmJob",
    "SlurmTaskHandle",
    "exit_status_from_job",
    "job_script",
    "parse_job_id",
    "parse_sacct",
    "parse_scontrol_job",
    "parse_squeue",
    "partition_slots",
    "sbatch_argv",
    "waiting_text",
    "with_slurm_reason",
]
