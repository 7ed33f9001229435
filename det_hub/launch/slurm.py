"""Run a task's command once per task of its Slurm job, as the nodes of one distributed job.

The Slurm agent submits a trial of N slots whose command is one of det_hub's multi-node
launchers (``det_hub.launch.torch_distributed``, ``det_hub.launch.deepspeed``) as one job of N
tasks, one per slot, wherever Slurm places them, and puts this module in front of the command::

    python -m det_hub.launch.slurm --srun SRUN [SRUN OPTIONS...] -- COMMAND...

In the job's batch step it picks the port the workers meet on, free on this node, and becomes
``SRUN SRUN OPTIONS... python -m det_hub.launch.slurm --task -- COMMAND...``. Slurm starts one
copy of that on each task's node; each copy is one node of the multi-node launch det_hub does
across Docker hosts, told so by the same variables: ``DET_HUB_NNODES`` (the job's task count),
``DET_HUB_NODE_RANK`` (the task's rank, ``SLURM_PROCID``), ``DET_HUB_CHIEF_ADDR`` (the address
``srun`` was run from, ``SLURM_LAUNCH_NODE_IPADDR``: the batch step's node, where Slurm puts
task 0) and ``DET_HUB_CHIEF_PORT``. Its cluster-info file names its own slot only, so the
launcher in COMMAND starts one worker there, of global rank ``SLURM_PROCID``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from det_hub.env_names import (
    CHIEF_ADDR_ENV,
    CHIEF_PORT_ENV,
    CLUSTER_INFO_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
)
from det_hub.launch._command import LaunchError
from det_hub.launch.torch_distributed import free_port

PROG = "det_hub.launch.slurm"


def srun_command(srun: str, srun_options: Sequence[str], command: Sequence[str],
                 python: str = sys.executable) -> list[str]:
    """The ``srun`` command that runs ``command`` once per task of the job, through this
    module's ``--task`` role."""
    return [srun, *srun_options, python, "-m", PROG, "--task", "--", *command]


def task_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of one task's copy of the command: ``env`` (a Slurm task's) with its
    place among the job's tasks in det_hub's multi-node variables.

    Raises:
        LaunchError: Slurm's task variables or the chief's port are missing.
    """
    try:
        rank, count = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        chief, port = env["SLURM_LAUNCH_NODE_IPADDR"], env[CHIEF_PORT_ENV]
    except (KeyError, ValueError) as exc:
        raise LaunchError(f"not a task of a Slurm job step started by {PROG}: {exc!r} is "
                          "missing or not a number") from exc
    out = dict(env)
    out.update({NNODES_ENV: str(count), NODE_RANK_ENV: str(rank), CHIEF_ADDR_ENV: chief,
                CHIEF_PORT_ENV: port})
    if env.get("SLURM_CPUS_PER_TASK"):
        # The task's CPUs are its own worker's: not the whole job's count the agent set.
        out["OMP_NUM_THREADS"] = env["SLURM_CPUS_PER_TASK"]
    return out


def task_cluster_info(info: Mapping[str, Any], rank: int, count: int,
                      chief: str) -> dict[str, Any]:
    """The cluster-info document of task ``rank`` of ``count``: its own slot, its rank among
    the tasks, and the chief's address (the others' are not known before they start).

    Raises:
        LaunchError: The document lists another number of slots than the job has tasks.
    """
    slots = [int(s) for s in info.get("slot_ids") or []] or list(range(count))
    if len(slots) != count:
        raise LaunchError(f"the job has {count} tasks but its cluster-info file lists "
                          f"{len(slots)} slots ({slots}); each task is one slot")
    return {**info, "slot_ids": [slots[rank]], "container_rank": rank,
            "container_addrs": [chief], "container_slot_counts": [1] * count}


def _run_task(command: Sequence[str]) -> int:
    env = task_env(os.environ)
    rank, count = int(env[NODE_RANK_ENV]), int(env[NNODES_ENV])
    source = env.get(CLUSTER_INFO_ENV)
    if source:
        try:
            info = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LaunchError(f"cannot read the cluster-info file {source}: {exc}") from exc
        # Beside the job's own, in its temporary directory: the job's user writes there.
        own = Path(env.get("TMPDIR") or Path(source).parent) / f"cluster-info.{rank}.json"
        own.write_text(json.dumps(task_cluster_info(info, rank, count, env[CHIEF_ADDR_ENV])),
                       encoding="utf-8")
        env[CLUSTER_INFO_ENV] = str(own)
    os.execvpe(command[0], list(command), env)


def main(argv: Sequence[str] | None = None) -> int:
    """``--srun SRUN [OPTIONS...] -- COMMAND`` in the batch step; ``--task -- COMMAND`` in each
    task. Returns an exit code only when the command could not be started."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--" not in args or args.index("--") == len(args) - 1:
            raise LaunchError("usage: python -m det_hub.launch.slurm (--srun SRUN [OPTIONS...] "
                              "| --task) -- COMMAND...", 2)
        split = args.index("--")
        options, command = args[:split], args[split + 1:]
        if options == ["--task"]:
            return _run_task(command)
        if len(options) < 2 or options[0] != "--srun":
            raise LaunchError(f"{PROG}: expected --srun SRUN [OPTIONS...] or --task before "
                              f"--, not {options}", 2)
        env = {**os.environ, CHIEF_PORT_ENV: str(free_port("0.0.0.0"))}
        full = srun_command(options[1], options[2:], command)
        os.execve(full[0], full, env)
    except LaunchError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"{PROG}: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
