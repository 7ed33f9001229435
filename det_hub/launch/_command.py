"""What the launchers share: their command line, how many workers to start, threads per worker."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from det_hub.core import ClusterInfo
from det_hub.env_names import CLUSTER_INFO_ENV


class LaunchError(Exception):
    """A launcher cannot start: bad arguments, a bad cluster-info file, a missing program.

    Args:
        message: What is wrong, for the user.
        exit_code: The launcher's exit code for it (2 for bad usage, as argparse does).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class HelpRequested(LaunchError):
    """``-h`` or ``--help`` was given; the message is the usage text."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=0)


@dataclass(frozen=True)
class LaunchOptions:
    """A launcher's parsed command line.

    Attributes:
        command: The worker command (``python3 train.py ...``).
        nproc: Workers asked for with ``--nproc``, or None to take the trial's slot count.
        trace: ``--trace`` was given (accepted for Determined's sake; it changes nothing).
        passthrough: Options before ``--`` that the launcher does not know, in order; a
            launcher that wraps another tool hands them to that tool.
    """

    command: list[str]
    nproc: int | None = None
    trace: bool = False
    passthrough: list[str] = field(default_factory=list)


def parse_launch_args(
    prog: str, argv: Sequence[str], *, allow_passthrough: bool = False
) -> LaunchOptions:
    """Parse ``[--trace] [--nproc N] [[OTHER OPTIONS...] --] COMMAND...``.

    This is Determined's launcher form: launcher options, an optional ``--``, then the worker
    command. Without ``--`` the options end at the first word that does not start with ``-``,
    so ``python3 train.py --lr 0.1`` keeps its own options.

    Args:
        prog: The launcher's module name, for messages.
        argv: The arguments after the module name.
        allow_passthrough: Keep unknown options that come before ``--`` in
            :attr:`LaunchOptions.passthrough` instead of rejecting them.

    Raises:
        LaunchError: An unknown option, a bad ``--nproc`` or no command.
    """
    help_text = usage(prog, allow_passthrough)
    args = list(argv)
    starts_with_option = bool(args) and args[0].startswith("-") and args[0] != "--"
    if allow_passthrough and starts_with_option and "--" in args:
        # Another tool's options may take values that look like commands, so the first `--`
        # alone says where they end.
        split = args.index("--")
        options, command, explicit_end = args[:split], args[split + 1 :], True
    else:
        # Options end at `--` or at the first word that is not an option (nor the value of
        # --nproc): a `--` inside the worker command belongs to the worker.
        split = 0
        while split < len(args) and args[split].startswith("-") and args[split] != "--":
            split += 2 if args[split] == "--nproc" else 1
        explicit_end = split < len(args) and args[split] == "--"
        options = args[:split]
        command = args[split + 1 :] if explicit_end else args[split:]

    nproc: int | None = None
    trace = False
    passthrough: list[str] = []
    i = 0
    while i < len(options):
        word = options[i]
        if word in ("-h", "--help"):
            raise HelpRequested(help_text)
        if word == "--trace":
            trace = True
        elif word == "--nproc" or word.startswith("--nproc="):
            if word == "--nproc":
                if i + 1 >= len(options):
                    raise LaunchError(f"--nproc needs a number\n{help_text}", 2)
                value = options[i + 1]
                i += 1
            else:
                value = word.partition("=")[2]
            try:
                nproc = int(value)
            except ValueError:
                raise LaunchError(f"--nproc must be a whole number, not {value!r}", 2) from None
            if nproc < 1:
                raise LaunchError(f"--nproc must be >= 1, not {nproc}", 2)
        elif allow_passthrough and explicit_end:
            passthrough.append(word)
        else:
            hint = (
                " (options for the wrapped tool go before a `--`)"
                if allow_passthrough
                else ""
            )
            raise LaunchError(f"unknown option {word!r}{hint}\n{help_text}", 2)
        i += 1

    if not command:
        raise LaunchError(f"no worker command given\n{help_text}", 2)
    return LaunchOptions(
        command=worker_command(command), nproc=nproc, trace=trace, passthrough=passthrough
    )


def usage(prog: str, passthrough: bool = False) -> str:
    """The launcher's usage text; ``passthrough`` for one that hands options to another tool."""
    others = "[[OPTIONS...] --]" if passthrough else "[--]"
    return (
        f"usage: python -m {prog} [--trace] [--nproc N] {others} COMMAND...\n"
        f"  Starts one worker per slot of the trial ({CLUSTER_INFO_ENV}'s slot_ids);\n"
        "  outside a trial, --nproc workers (default 1). A COMMAND that starts with a .py\n"
        "  file is run with this Python."
        + ("\n  OPTIONS before `--` are handed to the wrapped tool." if passthrough else "")
    )


def worker_command(command: Sequence[str]) -> list[str]:
    """The command as given, with this interpreter in front when it starts with a script.

    ``torchrun train.py`` runs the script with Python; the same is done here so both
    ``python3 train.py`` and ``train.py`` work.
    """
    command = list(command)
    if command and command[0].endswith(".py"):
        return [sys.executable, *command]
    return command


def slot_count(options: LaunchOptions, env: Mapping[str, str] | None = None) -> int:
    """How many workers to start.

    ``--nproc`` when given; else, inside a trial, the number of the trial's slots; else 1.
    On GPU slots (a non-empty ``CUDA_VISIBLE_DEVICES``) each worker needs a GPU of its own.

    Raises:
        LaunchError: The cluster-info file cannot be read, lists no slots, or there are more
            workers than visible GPUs.
    """
    env = os.environ if env is None else env
    if options.nproc is not None:
        count = options.nproc
    elif env.get(CLUSTER_INFO_ENV):
        try:
            info = ClusterInfo.from_file(env[CLUSTER_INFO_ENV])
        except (OSError, ValueError) as exc:
            raise LaunchError(f"cannot read the cluster-info file: {exc}") from exc
        if not info.slot_ids:
            raise LaunchError(
                f"the cluster-info file {env[CLUSTER_INFO_ENV]} lists no slot_ids"
            )
        count = len(info.slot_ids)
    else:
        count = 1
    gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if gpus and count > len(gpus):
        raise LaunchError(
            f"{count} workers but only {len(gpus)} GPUs in CUDA_VISIBLE_DEVICES "
            f"({env['CUDA_VISIBLE_DEVICES']}); each worker needs its own GPU"
        )
    return count


def threads_per_worker(nproc: int, env: Mapping[str, str] | None = None) -> str | None:
    """``OMP_NUM_THREADS`` for each of ``nproc`` workers, or None to leave it as it is.

    On CPU slots the master sets ``OMP_NUM_THREADS`` to the task's core count; every worker
    inheriting it would oversubscribe the cores ``nproc`` times over, so the cores are
    shared out. Outside a trial the cores this process may use are shared out the same way.
    """
    env = os.environ if env is None else env
    if nproc <= 1:
        return None
    given = env.get("OMP_NUM_THREADS", "").strip()
    if given:
        try:
            total = int(given)
        except ValueError:
            return None  # not ours to fix; torch warns about it itself
    else:
        total = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1
        )
    return str(max(1, total // nproc))


def launcher_main(
    prog: str,
    argv: Sequence[str] | None,
    start: Callable[[LaunchOptions], int],
    *,
    allow_passthrough: bool = False,
) -> int:
    """What every launcher's ``main`` does: parse the command line, then ``start`` the workers.

    ``--help`` prints the usage and gives 0; a :class:`LaunchError` (bad usage, a missing
    program) prints ``PROG: message`` on stderr and gives its exit code.
    """
    try:
        options = parse_launch_args(
            prog, sys.argv[1:] if argv is None else argv, allow_passthrough=allow_passthrough
        )
        return start(options)
    except HelpRequested as exc:
        print(exc)
        return 0
    except LaunchError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
