"""Start one Horovod worker per slot of the trial, through ``horovodrun`` with Gloo.

Usage, as Determined's launcher::

    python -m det_hub.launch.horovod [--trace] [--nproc N] [[HOROVODRUN OPTIONS...] --] \\
        python3 train.py ...

All workers run on this node: ``horovodrun -np N --gloo -H 127.0.0.1:N COMMAND``, N being the
number of the trial's slots. Options before ``--`` that this launcher does not know are handed
to ``horovodrun``. Its output, already marked by rank, is passed on unchanged, and its exit
code is the launcher's.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from det_hub.env_names import DISTRIBUTED_ENV
from det_hub.launch._command import (
    LaunchError,
    LaunchOptions,
    launcher_main,
    slot_count,
    threads_per_worker,
)

PROG = "det_hub.launch.horovod"
NOT_INSTALLED = "Horovod is not installed; build it with `make horovod`"


def horovodrun_command(
    options: LaunchOptions, nproc: int, horovodrun: str = "horovodrun"
) -> list[str]:
    """The ``horovodrun`` command line that runs ``options.command`` as ``nproc`` workers.

    Args:
        options: The launcher's parsed command line.
        nproc: The number of workers.
        horovodrun: The ``horovodrun`` program to run.
    """
    return [
        horovodrun,
        "-np",
        str(nproc),
        "--gloo",
        "-H",
        f"127.0.0.1:{nproc}",
        *options.passthrough,
        *options.command,
    ]


def horovod_env(base: Mapping[str, str], nproc: int) -> dict[str, str]:
    """The environment ``horovodrun`` and its workers run in."""
    env = dict(base)
    env[DISTRIBUTED_ENV] = "horovod"
    omp_threads = threads_per_worker(nproc, base)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = omp_threads
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def find_horovodrun() -> str:
    """The path of ``horovodrun``: next to this Python first, then on ``PATH``.

    Raises:
        LaunchError: Horovod is not installed.
    """
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("horovodrun")
    if found is None:
        raise LaunchError(NOT_INSTALLED, 127)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher with ``argv`` (``sys.argv[1:]`` when None).

    Returns only on an error (its exit code): on success this process becomes
    ``horovodrun``, which then receives the task's signals itself.
    """

    def start(options: LaunchOptions) -> int:
        nproc = slot_count(options)
        command = horovodrun_command(options, nproc, find_horovodrun())
        env = horovod_env(os.environ, nproc)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execve(command[0], command, env)
        except OSError as exc:
            print(f"{PROG}: cannot run {command[0]}: {exc}", file=sys.stderr)
            return 126
        return 0  # not reached: execve returns only by raising

    return launcher_main(PROG, argv, start, allow_passthrough=True)


if __name__ == "__main__":
    sys.exit(main())
