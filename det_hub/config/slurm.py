"""The ``slurm`` section: what an experiment or task asks of Slurm when its pool is a Slurm
partition (Determined's ``slurm`` section, read the same way). Pools of other kinds ignore it.
"""

from __future__ import annotations

from pydantic import Field

from det_hub.config._errors import Problem
from det_hub.config._model import ConfigModel

#: ``sbatch`` options det_hub sets on every job itself: where the job's output goes, its name,
#: its working directory and environment, who runs it, its shape, whether Slurm restarts it
#: (det_hub does, from the trial's checkpoint), how Slurm tells it to stop and its priority.
#: Short forms map to their long names.
RESERVED_SBATCH_OPTIONS = {
    "--output": "--output", "-o": "--output", "--error": "--error", "-e": "--error",
    "--job-name": "--job-name", "-J": "--job-name", "--chdir": "--chdir", "-D": "--chdir",
    "--parsable": "--parsable", "--wrap": "--wrap", "--export": "--export",
    "--export-file": "--export-file", "--uid": "--uid", "--gid": "--gid",
    "--array": "--array", "-a": "--array", "--requeue": "--requeue",
    "--no-requeue": "--no-requeue", "--ntasks": "--ntasks", "-n": "--ntasks",
    "--nodes": "--nodes", "-N": "--nodes", "--ntasks-per-node": "--ntasks-per-node",
    "--wait": "--wait", "-W": "--wait", "--input": "--input", "-i": "--input",
    "--signal": "--signal", "--nice": "--nice",
}


def reserved_sbatch_option(arg: str) -> str | None:
    """The long name of the reserved option ``arg`` is (``-o``, ``--output=x`` and ``-ox`` are
    ``--output``), None for an option det_hub leaves to the user or site."""
    if arg.startswith("--"):
        return RESERVED_SBATCH_OPTIONS.get(arg.split("=", 1)[0])
    if arg.startswith("-") and len(arg) >= 2:
        return RESERVED_SBATCH_OPTIONS.get(arg[:2])
    return None


def sbatch_arg_problems(args: list[str], where: str) -> list[Problem]:
    """One problem per argument of ``args`` that names an option det_hub sets itself."""
    return [Problem(f"{where}[{i}]", f"{arg!r}: det_hub sets {name} on every job itself")
            for i, arg in enumerate(args) if (name := reserved_sbatch_option(arg))]


class SlurmConfig(ConfigModel):
    """What a trial or task asks of Slurm.

    Attributes:
        sbatch_args: More ``sbatch`` options for each of its jobs (``--time=2:00:00``,
            ``--mem=16G``, ``--constraint=a100``), after the pool's own; none of
            :data:`RESERVED_SBATCH_OPTIONS`.
        gpu_type: The GPU type its GPU slots must be (``--gres=gpu:TYPE:N``).
        slots_per_node: How many of a trial's tasks Slurm puts on one node
            (``--ntasks-per-node``) where its slots are one task each (a multi-slot trial
            started by a distributed launcher); Slurm's choice when not given.
    """

    sbatch_args: list[str] = []
    gpu_type: str | None = Field(default=None, min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    slots_per_node: int | None = Field(default=None, ge=1)

    def _semantic_problems(self) -> list[Problem]:
        return sbatch_arg_problems(self.sbatch_args, "sbatch_args")


__all__ = ["RESERVED_SBATCH_OPTIONS", "SlurmConfig", "reserved_sbatch_option",
           "sbatch_arg_problems"]
