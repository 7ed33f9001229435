"""The ``det-hub`` command: parser assembly and dispatch.

Verbs follow Determined's ``det``. :func:`main` takes the argument list and returns the exit
code, so tests and other programs can run it in-process; it keeps no state between calls.

The arguments are parsed before anything heavy is imported: this module and the command
modules load only the standard library and det_hub's constants at import time, and each
command imports the SDK, the config parser or the renderer when it runs. ``det-hub --help`` and a usage error answer
at once, and ``det-hub experiment list`` loads the REST client and the table renderer only
(tests/cli/test_cli_start.py holds both to it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from det_hub import __version__
from det_hub.defaults import DEFAULT_MASTER
from det_hub.env_names import MASTER_ENV, TOKEN_ENV

from . import (
    agent,
    checkpoint,
    command,
    experiment,
    job,
    model,
    notebook,
    preview,
    resource_pool,
    service,
    shell,
    trial,
    user,
    webhook,
)

_GLOBAL_OPTIONS_WITH_VALUE = ("-m", "--master", "--token")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser of ``det-hub``."""
    parser = argparse.ArgumentParser(
        prog="det-hub",
        description="det_hub: train, search and track deep-learning experiments on a shared cluster.",
    )
    parser.add_argument(
        "-m", "--master", metavar="URL",
        help=f"master URL (default: ${MASTER_ENV}, else {DEFAULT_MASTER})",
    )
    parser.add_argument(
        "--token",
        help=f"user token (default: ${TOKEN_ENV}, else the local master's admin token file)",
    )
    parser.add_argument("--version", action="version", version=f"det-hub {__version__}")

    json_parent = argparse.ArgumentParser(add_help=False)
    json_parent.add_argument("--json", action="store_true", help="print the master's JSON answer")

    nouns = parser.add_subparsers(dest="noun", metavar="COMMAND", required=True)
    experiment.register(nouns, json_parent)
    trial.register(nouns, json_parent)
    command.register(nouns, json_parent)
    notebook.register(nouns, json_parent)
    shell.register(nouns, json_parent)
    checkpoint.register(nouns, json_parent)
    model.register(nouns, json_parent)
    agent.register(nouns, json_parent)
    job.register(nouns, json_parent)
    resource_pool.register(nouns, json_parent)
    user.register(nouns, json_parent)
    webhook.register(nouns, json_parent)
    preview.register(nouns, json_parent)
    service.register(nouns)
    return parser


def _service_call(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(verb, rest)`` when the command is ``master`` or ``up``, whose options argparse must
    pass through untouched (it cannot when they come first)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in _GLOBAL_OPTIONS_WITH_VALUE:
            i += 2
        elif any(arg.startswith(opt + "=") for opt in ("--master", "--token")) or (
            arg.startswith("-m") and len(arg) > 2
        ):
            i += 1
        elif arg in service.ENTRY_POINTS:
            return arg, list(argv[i + 1 :])
        else:
            return None
    return None


def _user_facing_errors() -> tuple[type[Exception], ...]:
    """The errors reported as a message instead of a traceback. Imported when a command
    raises, not before: a command that never reaches the SDK does not load it."""
    from det_hub.client import ContextError, DetHubError, MasterError, MasterUnreachable
    from det_hub.console import UserError

    return (UserError, ContextError, MasterError, MasterUnreachable, DetHubError)


def _report(error: BaseException) -> None:
    """Prints a user-facing error, with the master's details one per line."""
    from det_hub.client import MasterError, MasterUnreachable

    if isinstance(error, MasterUnreachable):
        print(f"Error: cannot reach the master at {error.url} (is det-hub master running?)", file=sys.stderr)
        if error.reason:
            print(f"  {error.reason}", file=sys.stderr)
        return
    print(f"Error: {error}", file=sys.stderr)
    if isinstance(error, MasterError):
        for line in error.detail_lines():
            print(f"  {line}", file=sys.stderr)
        if error.status == 401:
            print(f"  Give a token with --token or {TOKEN_ENV} (see det-hub user create).", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``det-hub`` with ``argv`` (default: ``sys.argv[1:]``) and returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    service_call = _service_call(args_list)
    if service_call is not None:
        return service.run_service(*service_call)

    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if getattr(args, "service_verb", None):
        return service.run_service(args.service_verb, args.service_argv)

    try:
        return int(args.func(args))
    except _user_facing_errors() as error:
        _report(error)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away; point stdout at devnull so the interpreter's
        # final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def entry_point() -> None:
    """Console-script wrapper: exits with :func:`main`'s code."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
