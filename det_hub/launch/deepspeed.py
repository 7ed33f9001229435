"""Start one DeepSpeed worker per slot of the trial and watch over them.

Usage, as Determined's launcher::

    python -m det_hub.launch.deepspeed [--trace] [--nproc N] [--] python3 train.py ...

DeepSpeed's communication runs on ``torch.distributed``, and ``deepspeed.init_distributed()``
reads the same variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``). The workers are therefore started and supervised exactly
as by :mod:`det_hub.launch.torch_distributed` (same environment, ``[rank=N]`` output
prefixes, exit codes and signal handling; ``DET_HUB_DISTRIBUTED`` is ``torch``, so
:meth:`det_hub.core.DistributedContext.from_torch_distributed` works). ``LOCAL_SIZE`` is
added: DeepSpeed's CPU accelerator counts its devices from it, as DeepSpeed's own launcher
sets it.

DeepSpeed's ``deepspeed`` runner is not used: on one node it would only add a second
supervisor (and pdsh/hostfile handling) around the same processes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence

from det_hub.launch._command import LaunchError, LaunchOptions, launcher_main, slot_count
from det_hub.launch.torch_distributed import run_workers

PROG = "det_hub.launch.deepspeed"
NOT_INSTALLED = "DeepSpeed is not installed in this Python; `pip install deepspeed`"


def deepspeed_env(base: Mapping[str, str], nproc: int) -> dict[str, str]:
    """The environment the workers' own (per-rank) variables are added to.

    Args:
        base: The launcher's environment.
        nproc: The number of workers on this node.
    """
    env = dict(base)
    env["LOCAL_SIZE"] = str(nproc)
    return env


def check_installed() -> None:
    """Fail early, with one clear message, rather than once per worker.

    Raises:
        LaunchError: ``deepspeed`` cannot be imported by this Python.
    """
    if importlib.util.find_spec("deepspeed") is None:
        raise LaunchError(NOT_INSTALLED, 127)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher with ``argv`` (``sys.argv[1:]`` when None); return its exit code."""

    def start(options: LaunchOptions) -> int:
        check_installed()
        nproc = slot_count(options)
        return run_workers(options.command, nproc, env=deepspeed_env(os.environ, nproc))

    return launcher_main(PROG, argv, start)


if __name__ == "__main__":
    sys.exit(main())
