"""The Slurm agent: a resource pool backed by a Slurm partition, through Slurm's own commands.

A :class:`SlurmAgent` stands for one partition. Each task det_hub places on it becomes one batch
job, submitted with ``sbatch --parsable`` as the task owner's linked Unix account (never as
root), in a directory of its own on the filesystem the master and the nodes share
(:attr:`SlurmAgent.job_root`). The job's batch step is det_hub's task runner
(:mod:`det_hub.agents.local_runner`, the local agent's): it starts
:mod:`det_hub.exec.task_start` with the task's environment, writes every output line with its
time and stream to ``task.log`` and the task's exit status to ``exit.json`` in that directory,
where the master reads them as it reads a local task's.

A task of N slots is one task on one node, except a trial whose command is one of det_hub's
multi-node launchers (:func:`spreads_over_tasks`): that is one job of N tasks of one slot each,
wherever Slurm puts them, and the runner's command is ``srun`` starting the launcher once per
task (:mod:`det_hub.launch.slurm`), each task one node of a torch.distributed, DeepSpeed or
Horovod job.

The agent's slots are what det_hub may have handed to Slurm at once; Slurm decides when each job
runs. A job Slurm holds back is ``PENDING`` with Slurm's reason: its allocation stays
``STARTING``, its trial or task shows ``QUEUED`` until the job runs, and the job queue shows
that reason (:attr:`SlurmTaskHandle.waiting`). Slurm says nothing unasked, so the agent asks
``squeue`` about all its jobs at once, at most every
:attr:`~SlurmAgent.poll_interval` seconds; a job ``squeue`` has forgotten is looked up with
``scontrol`` and ``sacct``. The runner's exit status is the task's; a job that ended without
one (cancelled before its task ran, its node lost, its time limit reached) ends with the
reason Slurm gives, never as a success. det_hub, not Slurm, restarts a failed trial, from its
latest checkpoint, as ``max_restarts`` allows.

Slurm's own preemption, time limits and requeues are honoured. A job is asked with
``--signal=B:TERM@N`` to be told, N seconds before its time limit (or when preempted, where the
site sends that signal then), by a SIGTERM to its batch step alone; the runner records it
(``stop.json``) and the master asks the task to checkpoint and stop as for its own preemption
(:attr:`SlurmTaskHandle.stop_requested`); the trial then goes on in a new job. Where Slurm
ends the job itself (a preemption without the user signal sent, a cancel),
every process of it gets that SIGTERM, the trial's too, which takes it as the same request
(:mod:`det_hub.core._preempt`); the task's exit 0 is then read by how Slurm ended the job
(:func:`with_slurm_reason`): preempted, the trial goes on from its checkpoint in a new job;
cancelled or timed out, it is a failure, restarted as ``max_restarts`` allows. Jobs are
submitted ``--requeue`` so that Slurm may requeue them (``scontrol requeue``, a preemption in
REQUEUE mode, a lost node), but never run one twice: a job seen waiting again after it ran is
cancelled, and its task ends as resumable (:attr:`ExitStatus.resumable`), to start again from
its latest checkpoint in a new job, without counting a restart; the batch script of a rerun
exits at once, leaving its mark (:data:`RERUN_FILE`). A restarted master takes a job Slurm
counts a requeue of (``scontrol``'s ``Restarts``; after the controller has forgotten the job,
its runs accounting keeps as ``REQUEUED``, where the site keeps accounting), or whose rerun left
that mark, for one requeued while it was away, and ends it the same way, whether
it waits again, runs that script or has ended since; so does a running master a job requeued
and run again between two of its looks at the queue.

The job ids live in the master's own directory (``state_dir``), never in a place the job's user
can write; a restarted master finds its jobs there (:meth:`SlurmAgent.attach`), and every
``scancel`` runs as the job's user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
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

from traitlets import Dict, Enum, Float, Integer, List, Unicode

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
from det_hub.agents.slurm_node import node_address, scontrol_fields
from det_hub.config.slurm import sbatch_arg_problems
from det_hub.contract import CLUSTER_INFO_FILE
from det_hub.env_names import DATA_CACHE_ENV, TENSORBOARD_LOGDIRS_ENV

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
#: The file the runner writes in the job's directory when Slurm asks the job to stop soon.
STOP_FILE = "stop.json"
#: Written by the batch script of a job Slurm requeued and runs again (Slurm's count of its
#: requeues), which exits without running the task: the requeue stays known after Slurm has
#: forgotten the job (``MinJobAge``).
RERUN_FILE = "rerun"
#: Launchers that start a trial's workers on several nodes (``python -m NAME``): a multi-slot
#: task whose command is one of them is one Slurm job of one task per slot.
SPREAD_LAUNCHERS = frozenset({
    "det_hub.launch.torch_distributed", "det_hub.launch.deepspeed", "det_hub.launch.horovod",
    "determined.launch.torch_distributed", "determined.launch.deepspeed",
    "determined.launch.horovod"})
#: Seconds a task's failed exit status waits for Slurm to say how its job ended (a job being
#: requeued shows as such only once its processes are gone, after Slurm's KillWait).
ENDING_SECONDS = 90.0


# ------------------------------------------------------------------------------- pure helpers


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """A Slurm job as ``squeue``, ``scontrol`` or ``sacct`` describe it.

    ``state`` is Slurm's base state (``PENDING``, ``RUNNING``, ``CANCELLED``, ...); ``UNKNOWN``
    for a job none of them knows any more. ``exit_code`` is ``code:signal`` where known;
    ``restarts`` how often Slurm requeued it, where known (``scontrol``).
    """

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""
    restarts: int = 0

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
    fields = scontrol_fields(text)
    if "JobId" not in fields or "JobState" not in fields:
        return None
    restarts = fields.get("Restarts", "0")
    return SlurmJob(fields["JobId"], _base_state(fields["JobState"]),
                    fields.get("Reason", ""), fields.get("NodeList", ""),
                    fields.get("ExitCode", ""), int(restarts) if restarts.isdigit() else 0)


def parse_sacct(text: str, job_id: str) -> SlurmJob | None:
    """The job ``job_id`` in ``sacct --noheader --parsable2 --allocations
    --format=JobID,State,ExitCode,NodeList`` output, or None."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 4 and fields[0] == job_id:
            return SlurmJob(job_id, _base_state(fields[1]), "", fields[3], fields[2])
    return None


def count_requeued(text: str, job_id: str) -> int:
    """How many runs of job ``job_id`` Slurm requeued, in ``sacct --noheader --parsable2
    --allocations --duplicates --format=JobID,State`` output: accounting keeps every run of a
    job (``--duplicates`` lists them all), each one Slurm requeued as ``REQUEUED``."""
    return sum(1 for line in text.splitlines()
               if line.strip().split("|")[:2] == [job_id, "REQUEUED"])


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
    return ExitStatus(code or None, sig, reason=f"Slurm job {job.job_id} {what}{detail}",
                      resumable=job.state == "PREEMPTED")


def with_slurm_reason(status: ExitStatus, job: SlurmJob | None) -> ExitStatus:
    """The task's own exit status, with what Slurm says of its job where that says more (a
    task killed by the signal ``scancel`` sent).

    A task that exited 0 from a job Slurm ended otherwise than ``COMPLETED`` stopped at the
    SIGTERM Slurm sent every process of it (see :mod:`det_hub.core._preempt`), after its
    checkpoint, not at its end: from a preempted job it is resumable; from one cancelled, timed
    out or failed nothing says it ran to its end, and it is no success."""
    if job is None or job.state not in ENDED_STATES or job.state == "COMPLETED":
        return status
    slurm = f"Slurm job {job.job_id} {ENDED_STATES[job.state]}"
    if not status.success:
        return dataclasses.replace(status, reason=f"{status.reason}; {slurm}" if status.reason
                                   else slurm, resumable=job.state == "PREEMPTED")
    if job.state == "PREEMPTED":
        return dataclasses.replace(status, resumable=True, reason=(
            f"{slurm}; its task checkpointed and stopped at Slurm's SIGTERM"))
    return ExitStatus(None, reason=f"{slurm}; its task exited 0 at Slurm's SIGTERM, before its "
                                   "end")


def requeued_status(job_id: str, own: ExitStatus | None, *,
                    rerun_ended: str | None = None) -> ExitStatus:
    """How a task whose job Slurm requeued ended: resumable, with its own exit where it left
    one (killed by Slurm's signal, as a rule). ``rerun_ended``: Slurm's state of the job where
    it was not cancelled in its queue but ran again and ended, while the master was away or
    between two of its looks at the queue (the batch script of a rerun exits before its task
    runs)."""
    if rerun_ended == "UNKNOWN":
        then = ("its rerun ended before the task ran again (Slurm no longer keeps the job), "
                "and det_hub")
    elif rerun_ended:
        then = f"its rerun ended {rerun_ended} before the task ran again, and det_hub"
    else:
        then = "det_hub cancelled it there and"
    return ExitStatus(own.exit_code if own else None, own.signal if own else None,
                      reason=f"Slurm requeued job {job_id}; {then} starts the task again in a "
                             "new job", resumable=True)


def nice_for_priority(priority: int, nice_per_priority: int) -> int:
    """The Slurm ``--nice`` of a job of det_hub priority ``priority`` (1 most important .. 99
    least): ``nice_per_priority`` per step below the most important, so that det_hub's order
    holds in Slurm's queue too. Never negative: only Slurm's operators may give that."""
    return max(0, (priority - 1) * nice_per_priority)


#: What a Slurm QOS name may be made of, in ``qos_by_priority``.
QOS_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def qos_table(mapping: Any, where: str) -> list[tuple[int, str]]:
    """``qos_by_priority`` checked and sorted: ``(highest priority number, QOS)`` pairs,
    lowest number (most important) first. Keys are priorities 1..99, as numbers or as the
    strings a JSON config has; values are QOS names.

    Raises:
        ValueError: Not a mapping, a key that is no priority, two keys of the same priority,
            or a value that is no QOS name; the message names ``where`` and the entry.
    """
    if not isinstance(mapping, dict):
        raise ValueError(f"{where}: must map priorities to QOS names, such as "
                         f"{{'10': 'high', '99': 'low'}}; got {type(mapping).__name__}")
    table: dict[int, str] = {}
    for key, qos in mapping.items():
        text = str(key).strip()
        if isinstance(key, bool) or not text.isdigit() or not 1 <= int(text) <= 99:
            raise ValueError(f"{where}: key {key!r} is not a priority: keys are det_hub "
                             "priorities, whole numbers 1 (most important) to 99")
        if int(text) in table:
            raise ValueError(f"{where}: priority {int(text)} is given twice")
        if not isinstance(qos, str) or not QOS_NAME.match(qos):
            raise ValueError(f"{where}[{key!r}]: {qos!r} is not a Slurm QOS name (letters, "
                             "digits, '_', '.' and '-')")
        table[int(text)] = qos
    return sorted(table.items())


def qos_for_priority(priority: int, table: Sequence[tuple[int, str]], default: str) -> str:
    """The QOS of a job of det_hub priority ``priority``: that of the first entry of
    :func:`qos_table`'s ``table`` whose priority number is at least ``priority``; ``default``
    (the pool's ``qos``, maybe empty) for a priority past the last entry."""
    return next((qos for most, qos in table if priority <= most), default)


def names_option(args: Sequence[str], long: str, short: str) -> bool:
    """Whether ``args`` give the sbatch option ``long`` (``--qos``, ``--qos=x``) or its short
    form ``short`` (``-q``, ``-qx``)."""
    return any(a == long or a.startswith(long + "=")
               or (a.startswith(short) and not a.startswith("--")) for a in args)


def spreads_over_tasks(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts one of :data:`SPREAD_LAUNCHERS` (``python -m NAME ...``)."""
    head = list(argv[:3])
    return "-m" in head[:2] and head.index("-m") + 1 < len(head) \
        and head[head.index("-m") + 1] in SPREAD_LAUNCHERS


def sbatch_argv(*, sbatch: str, job_name: str, job_dir: str, script: str, slots: int,
                slot_type: str, cpus_per_slot: int, gres: str = "gpu",
                gpu_type: str | None = None, partition: str = "", account: str = "",
                qos: str = "", spread: bool = False, slots_per_node: int | None = None,
                stop_signal_seconds: int = 0, nice: int = 0, pool_args: Sequence[str] = (),
                job_args: Sequence[str] = ()) -> list[str]:
    """The ``sbatch`` command that submits one task of ``slots`` slots as one job.

    By default one task on one node, with ``cpus_per_slot`` CPUs per slot and, for GPU slots,
    one GRES ``gres`` (of ``gpu_type`` when given) per slot. ``spread``: one task per slot,
    with ``cpus_per_slot`` CPUs and one GPU each (``--gpus-per-task``), on the nodes Slurm
    picks (``slots_per_node`` of them on each, when given). ``stop_signal_seconds``: SIGTERM to
    the batch step that long before the time limit; ``nice``: ``--nice``. The pool's options
    come after det_hub's, the experiment's last, so that theirs win where Slurm takes the last
    of an option; ``partition``, ``account`` and ``qos`` are left out where the experiment's
    options (``job_args``) name their own.

    Pure: nothing here runs a command, so how a job is asked for is testable without Slurm.

    Raises:
        ValueError: GPU slots of a GRES other than ``gpu`` spread over tasks
            (``--gpus-per-task`` asks for GRES ``gpu``).
    """
    argv = [sbatch, "--parsable", f"--job-name={job_name}", f"--output={job_dir}/slurm.out",
            f"--chdir={job_dir}", "--requeue"]
    cpus = max(1, cpus_per_slot)
    if spread:
        argv += [f"--ntasks={slots}", f"--cpus-per-task={cpus}"]
        if slots_per_node:
            argv.append(f"--ntasks-per-node={slots_per_node}")
        if slot_type == "cuda":
            if gres != "gpu":
                raise ValueError(f"a job of one task per slot asks for its GPUs with "
                                 f"--gpus-per-task, which is GRES 'gpu', not {gres!r}")
            argv.append(f"--gpus-per-task={gpu_type + ':' if gpu_type else ''}1")
    else:
        argv += ["--nodes=1", "--ntasks=1", f"--cpus-per-task={cpus * slots}"]
        if slot_type == "cuda":
            kind = f"{gres}:{gpu_type}" if gpu_type else gres
            argv.append(f"--gres={kind}:{slots}")
    if stop_signal_seconds > 0:
        argv.append(f"--signal=B:TERM@{stop_signal_seconds}")
    if nice > 0:
        argv.append(f"--nice={nice}")
    for option, short, value in (("--partition", "-p", partition),
                                 ("--account", "-A", account), ("--qos", "-q", qos)):
        if value and not names_option(job_args, option, short):
            argv.append(f"{option}={value}")
    return [*argv, *pool_args, *job_args, script]


def job_script(python: str, job_dir: str, scontrol: str) -> str:
    """The batch script: the task's runner as the batch step's process (see the module's
    docstring), unless Slurm requeued the job and runs it again. The runner gives the task
    its node's address (``NodeAddr``, asked with ``scontrol`` on the node), where a proxied
    task listens."""
    runner = [python, "-I", "-m", "det_hub.agents.local_runner", "--log",
              f"{job_dir}/task.log", "--exit-file", f"{job_dir}/exit.json", "--start",
              f"{job_dir}/start.json", "--stop-file", f"{job_dir}/{STOP_FILE}",
              "--slurm-node-address", scontrol]
    for name in PASSED_VARIABLES:
        runner += ["--pass-env", name]
    return ("#!/bin/sh\n"
            "# A det_hub task: its runner writes the task's log and exit status beside this.\n"
            'if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then\n'
            "  echo 'det_hub: Slurm requeued this job; det_hub starts its task again in a new"
            " job instead' >&2\n"
            f'  echo "$SLURM_RESTART_COUNT" > {shlex.quote(f"{job_dir}/{RERUN_FILE}")}\n'
            "  exit 1\n"
            "fi\n"
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
        self._stop: str | None = None
        #: The ``--nice`` the job was last given.
        self.nice = 0
        #: Whether the job has run: seen running, or Slurm counts a requeue of it.
        self.ran = False
        #: Whether Slurm counted a requeue of the job that was not seen waiting again: when a
        #: restarted master found it again (:meth:`SlurmAgent.attach`), requeued while the
        #: master was away, or once it ended, requeued and run again between two looks at the
        #: queue. Its task ran in its first run and must not run again under this allocation,
        #: whatever Slurm did since.
        self.requeued = False
        #: Whether Slurm's count of the job's requeues was asked for since it ended.
        self._requeues_asked = False
        #: When the job was first seen ended without the runner's exit status (monotonic).
        self._ended_at: float | None = None
        #: When the runner's failed exit status was first seen (monotonic).
        self._failed_at: float | None = None

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

    @property
    def stop_requested(self) -> str | None:
        """Why Slurm asked the running job to stop soon, once the runner recorded its
        SIGTERM (see the module's docstring)."""
        if self._stop is None and self._status is None:
            try:
                sig = json.loads((self.job_dir / STOP_FILE).read_text()).get("signal")
            except (OSError, ValueError, AttributeError):
                return None
            self._stop = (f"Slurm asked job {self.job_id} to stop soon ({sig} to its batch "
                          "step: it is preempted, or its time limit is near); the task is "
                          "asked to checkpoint and stop, and goes on in a new job")
        return self._stop

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
        if self.requeued:
            # Waiting again, running its rerun (whose batch script exits at once) or ended
            # since: it ends here, resumable, and no rerun of it is left behind.
            if not job.ended:
                self._agent.kill(self, force=True)
            self._status = requeued_status(self.job_id, own,
                                           rerun_ended=job.state if job.ended else None)
            self._waiting = None
            return self._status
        if own is not None and not job.ended and not job.waiting and (
                not own.success or (self.job_dir / STOP_FILE).exists()):
            # Killed, or ended after a SIGTERM Slurm sent (its batch step's, or every process
            # of the job's): ask Slurm now how the job ended (scancel, a preemption, a time
            # limit, a requeue), which decides what the task's exit means.
            job = self._agent.job(self.job_id, fresh=True)
            now = time.monotonic()
            self._failed_at = self._failed_at or now
            if not job.ended and not job.waiting and now - self._failed_at < ENDING_SECONDS:
                return None  # Slurm is still ending it: how, it says once it has
        if job.ended and (own is None or not own.success) and not self._requeues_asked:
            # Requeued and run again between two looks at the queue (a rerun's batch script
            # exits at once), the job was never seen waiting again: only Slurm's count of its
            # requeues tells. Asked once: an ended job's count no longer changes.
            requeued = self.requeue_known()
            self._requeues_asked = True
            if requeued:
                self.requeued = True
                self._status = requeued_status(self.job_id, own, rerun_ended=job.state)
                self._waiting = None
                return self._status
        self.ran = self.ran or own is not None or not (job.waiting or job.ended)
        if job.waiting and self.ran:
            # What says it waits may be older than its run: a job that started and ended
            # between two looks at the queue. Only Slurm's answer now tells a requeue.
            job = self._agent.job(self.job_id, fresh=True)
        if job.waiting and self.ran:
            # Requeued by Slurm: it must not run again under this allocation.
            self._agent.kill(self, force=True)
            self._status = requeued_status(self.job_id, own)
            self._waiting = None
            return self._status
        if own is not None:
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

    def requeue_known(self) -> bool:
        """Whether Slurm counts a requeue of the job (while it keeps it), or the batch script
        of a rerun of it left its mark (:data:`RERUN_FILE`, for after that).

        Raises:
            AgentUnreachable: the controller does not answer.
        """
        return self._agent.requeues(self.job_id) > 0 or (self.job_dir / RERUN_FILE).exists()

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
    qos = Unicode("", config=True, help="""The Slurm quality of service of the jobs (--qos);
        with qos_by_priority, that of the priorities it does not cover.""")
    qos_by_priority = Dict(config=True, help="""Slurm QOS by det_hub priority: {"10": "high",
        "50": "normal", "99": "low"} submits a job of priority P (1 most important .. 99 least)
        with the QOS of the smallest key that is at least P (here 1-10 high, 11-50 normal,
        51-99 low); a priority above every key gets `qos`. Keys are priorities 1..99 (numbers
        or strings), values QOS names; checked when the master starts. An experiment's own
        --qos (or -q) in slurm.sbatch_args wins. The QOS is chosen at submission: a change of
        priority while the job waits changes its Nice, not its QOS.""")
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
    stop_signal_seconds = Integer(120, min=0, config=True, help="""Seconds before a job's time
        limit at which Slurm tells its batch step to stop (sbatch --signal=B:TERM@N; Slurm may
        send it up to a minute early): a trial then checkpoints, stops and goes on in a new
        job. Where the site has Slurm send the user signal on preemption
        (SlurmctldParameters=preempt_send_user_signal in 22.05, PreemptParameters=
        send_user_signal from 23.02) and a grace time, a preempted job is told the same way. 0: not told; the job is killed at its time limit.""")
    nice_per_priority = Integer(1, min=0, config=True, help="""Slurm nice per step of det_hub
        priority: a job of priority P (1 most important .. 99 least) is submitted with
        --nice=(P-1)*N, and a change of its priority while it waits in Slurm's queue changes
        its Nice (scontrol update). Never negative, as Slurm allows any user. 0: no --nice.""")

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
        #: ``qos_by_priority`` as :func:`qos_table` sorts it.
        self.qos_table = qos_table(self.qos_by_priority,
                                   f"Slurm agent {self.agent_id}: qos_by_priority")
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

    def requeues(self, job_id: str) -> int:
        """How often Slurm requeued the job: ``scontrol``'s ``Restarts`` while the controller
        keeps it; once it has forgotten it (``MinJobAge`` after its end), the runs accounting
        keeps as requeued, where the site keeps accounting (:func:`count_requeued`); else 0.

        Raises:
            AgentUnreachable: the controller does not answer.
        """
        done = self.run_command("scontrol", "--oneliner", "show", "job", job_id)
        if done.returncode != 0 and self._unreachable(done):
            raise AgentUnreachable(f"scontrol failed: {done.stderr.strip()[-300:]}")
        job = parse_scontrol_job(done.stdout) if done.returncode == 0 else None
        if job is not None:
            return job.restarts
        done = self.run_command("sacct", "--noheader", "--parsable2", "--allocations",
                                "--duplicates", f"--jobs={job_id}", "--format=JobID,State")
        return count_requeued(done.stdout, job_id) if done.returncode == 0 else 0

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
        """Why the task's checkpoint storage, or the TensorBoard files a TensorBoard shows,
        cannot be used from the nodes, or None."""
        try:
            logdirs = json.loads(spec.env.get(TENSORBOARD_LOGDIRS_ENV) or "{}")
        except ValueError:
            logdirs = {}
        for name, logdir in (logdirs.items() if isinstance(logdirs, dict) else ()):
            path = Path(str(logdir)).resolve()
            if any(path == p or p in path.parents for p in self.private_paths):
                # A node would show an empty TensorBoard: nothing there is readable from it.
                return (f"the TensorBoard files of {name} ({path}) are in the master's private "
                        "data directory, which jobs on Slurm nodes cannot read: run the "
                        "TensorBoard in a pool of the master's own agents, or give the "
                        "experiment a checkpoint_storage on the filesystem the nodes share "
                        "(shared_fs host_path) or an object store")
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

    def task_environment(self, spec: TaskSpec, job_dir: Path,
                         spread: bool = False) -> dict[str, str]:
        """The task's environment: its own, with its home, its temporary directory and its
        Python; never the master's. Slurm's variables are added on the node by the runner.
        ``spread``: one Slurm task per slot, each with its own CPUs."""
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
            slots = 1 if spread else max(1, len(spec.slot_ids))
            env["OMP_NUM_THREADS"] = str(self.cpus_per_slot * slots)
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
        spread = len(spec.slot_ids) > 1 and spreads_over_tasks(spec.argv)
        argv = sbatch_argv(
            sbatch=self._command("sbatch"), job_name=f"det-hub-{spec.allocation_id}",
            job_dir=str(root), script=str(root / "job.sh"), slots=len(spec.slot_ids),
            slot_type=self.slot_type, cpus_per_slot=self.cpus_per_slot, gres=self.gres,
            gpu_type=spec.slurm.get("gpu_type"), partition=self.partition,
            account=self.account,
            qos=qos_for_priority(spec.priority, self.qos_table, self.qos), spread=spread,
            slots_per_node=spec.slurm.get("slots_per_node"),
            stop_signal_seconds=self.stop_signal_seconds,
            nice=nice_for_priority(spec.priority, self.nice_per_priority),
            pool_args=list(self.sbatch_args), job_args=job_args)
        self._lay_out(spec, root, user, spread)
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
        handle.nice = nice_for_priority(spec.priority, self.nice_per_priority)
        where = f"partition {self.partition}" if self.partition else "the default partition"
        handle._waiting = f"Slurm job {job_id} was submitted to {where}"
        with self._lock:
            self._tracked.add(job_id)
        self.log.info("Slurm agent %s: allocation %s is job %s: %s", self.agent_id,
                      spec.allocation_id, job_id, shlex.join(argv))
        return handle

    def _lay_out(self, spec: TaskSpec, root: Path, user: tuple[int, int] | None,
                 spread: bool) -> None:
        """The job's directory: its working directory, home and temporary directory, the
        context, its files, the runner's start file and the batch script, owned by the job's
        user (0700: no one else's). ``spread``: the command runs once per Slurm task, through
        ``srun`` (:mod:`det_hub.launch.slurm`)."""
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
        if spread:
            options = [f"--ntasks={len(spec.slot_ids)}", f"--cpus-per-task={self.cpus_per_slot}",
                       "--kill-on-bad-exit=1"]
            if self.slot_type == "cuda":
                options.append("--gpus-per-task=1")
            argv = [self.python, "-m", "det_hub.launch.slurm", "--srun", self._command("srun"),
                    *options, "--", *argv]
        entry = [self.python, "-I", "-m", "det_hub.exec.task_start"]
        if spec.context:
            entry += ["--context", str(root / "context.tar"), "--into", str(root / "run")]
        start = {"argv": entry, "command": argv,
                 "env": self.task_environment(spec, root, spread),
                 "cwd": str(root / "run"), "sandboxed": False, "cpus": []}
        owned.append(_write_private(root / "start.json", json.dumps(start).encode()))
        script = job_script(self.python, str(root), self._command("scontrol"))
        owned.append(_write_private(root / "job.sh", script.encode(), mode=0o500))
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
        # Slurm may have requeued the job while the master was away (and run it again since,
        # or be about to): scontrol counts its requeues while it keeps the job, and a rerun's
        # batch script leaves its mark for after that.
        handle.ran = handle.requeued = handle.requeue_known()
        handle.exit_status()  # what Slurm says of it now: waiting, running or ended
        return handle

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        """Cancel a job that waits, or that must stop now (``force``); else signal its
        processes with SIGTERM, and the runner records how the task ended. ``scancel`` runs
        as the job's user, beside the caller."""
        assert isinstance(handle, SlurmTaskHandle)
        if handle.waiting is not None or force:
            self._beside(handle, "scancel", handle.job_id)
        else:
            self._beside(handle, "scancel", "--full", "--signal=TERM", handle.job_id)

    def task_address(self, handle: TaskHandle) -> str:
        """The address of the node Slurm runs the task's job on, from Slurm alone: the
        ``NodeAddr`` of the job's batch host (its first node, where the runner and a proxied
        task's server run; the runner binds the task to the same ``NodeAddr``).

        Raises:
            LookupError: the job does not run, or Slurm names no address for its node.
            AgentUnreachable: the controller does not answer.
        """
        assert isinstance(handle, SlurmTaskHandle)
        done = self.run_command("scontrol", "--oneliner", "show", "job", handle.job_id)
        if done.returncode != 0:
            if self._unreachable(done):
                raise AgentUnreachable(f"scontrol failed: {done.stderr.strip()[-300:]}")
            raise LookupError(f"Slurm job {handle.job_id} of allocation {handle.allocation_id}"
                              f": {done.stderr.strip()[-300:]}")
        fields = scontrol_fields(done.stdout)
        state = _base_state(fields.get("JobState", "UNKNOWN"))
        if state != "RUNNING":
            raise LookupError(f"Slurm job {handle.job_id} of allocation {handle.allocation_id} "
                              f"is {state}, not running: it has no node to reach")
        node = fields.get("BatchHost", "")
        if not node or node == "(null)":
            listed = self.run_command("scontrol", "show", "hostnames", fields.get("NodeList", ""))
            node = (listed.stdout.split() or [""])[0] if listed.returncode == 0 else ""
        if not node:
            raise LookupError(f"Slurm names no node for running job {handle.job_id}")
        try:
            return node_address(self._command("scontrol"), node, self._environment(),
                                self.command_timeout)
        except RuntimeError as e:
            raise LookupError(str(e)) from None

    def set_priority(self, handle: TaskHandle, priority: int) -> None:
        """Give a job that waits in Slurm's queue the ``Nice`` of its new priority
        (``scontrol update``, as the job's user, beside the caller)."""
        assert isinstance(handle, SlurmTaskHandle)
        nice = nice_for_priority(priority, self.nice_per_priority)
        if handle.waiting is None or nice == handle.nice or not self.nice_per_priority:
            return
        handle.nice = nice
        self._beside(handle, "scontrol", "update", f"JobId={handle.job_id}", f"Nice={nice}")

    def _beside(self, handle: SlurmTaskHandle, name: str, *args: str) -> None:
        """Run a Slurm command about a job as its user, in a thread of its own: the caller
        does not wait; a failure is logged."""

        def run() -> None:
            try:
                done = self.run_command(name, *args, user=handle.run_as)
            except AgentUnreachable as e:
                self.log.warning("%s %s: %s", name, " ".join(args), e)
                return
            if done.returncode != 0:
                self.log.warning("%s %s: %s", name, " ".join(args), done.stderr.strip()[-300:])

        threading.Thread(target=run, name=f"{name}-{handle.job_id}", daemon=True).start()

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
    "SPREAD_LAUNCHERS",
    "WAITING_STATES",
    "SlurmAgent",
    "SlurmJob",
    "SlurmTaskHandle",
    "count_requeued",
    "exit_status_from_job",
    "job_script",
    "names_option",
    "nice_for_priority",
    "parse_job_id",
    "parse_sacct",
    "parse_scontrol_job",
    "parse_squeue",
    "partition_slots",
    "qos_for_priority",
    "qos_table",
    "requeued_status",
    "sbatch_argv",
    "spreads_over_tasks",
    "waiting_text",
    "with_slurm_reason",
]
