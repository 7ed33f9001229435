"""The first process of every task, inside its sandbox or container and as the task's user.

    python -I -m det_hub.exec.task_start [--env-fd N] [--status-fd M] [--go-fd G]
        [--context ARCHIVE --into DIR] -- CMD...

It takes the task's environment from the agent (on file descriptor ``N``, as JSON, so that it
never stands on a command line or in a privileged process's environment), unpacks the
experiment's context into the working directory with the one extraction routine every agent
kind uses (:func:`det_hub.archive.extract_archive`), then becomes the task's command. Because it
runs after the task has dropped to its own user, the context is unpacked with that user's
powers only. ``-I`` keeps the user's ``PYTHON*`` variables and the working directory out of this
Python. When the task cannot start, the reason goes to stderr (the task's log) and, given
``--status-fd``, to the agent, which records it with the exit status.

As in Determined, a ``startup-hook.sh`` at the top of the context is sourced by bash in the
working directory before the command (commonly ``pip install -r requirements.txt``): what it
exports reaches the command, its output lands in the task's log, and a failure (a command that
fails, or an ``exit``) stops the task before its command runs, with a message saying so.

With ``--go-fd`` the task is prepared ahead of its start: the environment on ``N`` is the
task's early one, and the command is handed to :mod:`det_hub.exec.warm_start`, which waits on
``G`` for the go.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import sys
from collections.abc import Sequence

#: The exit code when the task cannot be prepared (the context is refused, the command cannot
#: be executed), and when its command is not found, as shells have it.
EXIT_NOT_STARTED = 126
EXIT_NOT_FOUND = 127

STARTUP_HOOK = "startup-hook.sh"

#: Sources the hook under ``set -e``, then becomes the command ($@). $1 is the status fd (or
#: empty); the EXIT trap runs only when the hook ends the shell, the command never reached.
_RUN_HOOK = r"""
status_fd=$1; shift
trap 'code=$?
  if [ "$code" -eq 0 ]; then code=126; why="exited instead of returning"
  else why="failed with exit code $code"; fi
  msg="startup-hook.sh $why; the task'"'"'s command did not run"
  echo "det_hub: $msg" >&2
  if [ -n "$status_fd" ]; then echo "$msg" >&"$status_fd"; fi
  exit "$code"' EXIT
set -e
. ./startup-hook.sh
set +e
trap - EXIT
if [ -n "$status_fd" ]; then eval "exec $status_fd>&-"; fi
exec "$@"
"""


def _read_env(fd: int) -> dict[str, str]:
    with os.fdopen(fd, "rb") as f:
        data = json.loads(f.read() or b"{}")
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError("the task environment must be a JSON object of strings")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det_hub.exec.task_start")
    parser.add_argument("--env-fd", type=int, help="read the task's environment (JSON) here")
    parser.add_argument("--status-fd", type=int, help="say here why the task did not start")
    parser.add_argument("--context", help="the context archive to unpack")
    parser.add_argument("--into", help="where to unpack it (the working directory)")
    parser.add_argument("--go-fd", type=int, help="start warm: the go comes here (see "
                        "det_hub.exec.warm_start); the environment read is the early one")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    if bool(args.context) != bool(args.into):
        parser.error("--context and --into go together")

    if args.status_fd is not None:
        os.set_inheritable(args.status_fd, False)  # closed when the command starts

    def fail(code: int, why: str) -> int:
        print(f"det_hub: {why}", file=sys.stderr, flush=True)
        if args.status_fd is not None:
            with os.fdopen(args.status_fd, "w") as status:
                status.write(why)
        return code

    env = _read_env(args.env_fd) if args.env_fd is not None else dict(os.environ)
    if args.context:
        from det_hub.archive import ContextError, extract_archive

        try:
            extract_archive(args.context, args.into)
        except (ContextError, OSError) as e:
            return fail(EXIT_NOT_STARTED, f"the context cannot be unpacked into {args.into}: {e}")
    hook = os.path.join(args.into or ".", STARTUP_HOOK)
    if os.path.isfile(hook):
        bash = shutil.which("bash", path=env.get("PATH")) or shutil.which("bash")
        if bash is None:
            return fail(EXIT_NOT_STARTED, f"{STARTUP_HOOK} needs bash, which is not installed")
        if args.status_fd is not None:
            os.set_inheritable(args.status_fd, True)  # the hook's failure is told on it
        status = "" if args.status_fd is None else str(args.status_fd)
        command = [bash, "-c", _RUN_HOOK, STARTUP_HOOK, status, *command]
    if args.go_fd is not None:
        # Wait for the go in an interpreter with the imports done; it becomes the command.
        command = [sys.executable, "-m", "det_hub.exec.warm_start", "--go-fd", str(args.go_fd),
                   "--", *command]
    program = command[0] if "/" in command[0] else shutil.which(command[0], path=env.get("PATH"))
    if program is None:
        return fail(EXIT_NOT_FOUND, f"cannot start {command[0]!r}: not found on the task's "
                                    f"PATH ({env.get('PATH', '')})")
    try:
        os.execve(program, command, env)
    except OSError as e:
        return fail(EXIT_NOT_FOUND if e.errno == errno.ENOENT else EXIT_NOT_STARTED,
                    f"cannot start {command[0]!r}: {e.strerror}")
    return EXIT_NOT_STARTED  # not reached: execve returns only by raising


if __name__ == "__main__":
    sys.exit(main())
