"""Runs one task's process for the local agent, detached from the master.

The master starts this module in a new session with a start file (JSON, mode 0600): the
command that starts the task (bubblewrap and the drop to the task's user, then
:mod:`det_hub.exec.task_start`), the task's own command, its environment, and the CPUs to pin
it to. The runner reads and deletes that file, starts the task, hands it its environment on a
pipe (so that it never stands on a command line), writes every output line with its time and
stream to a JSON-lines log file, and when the task ends writes its exit status to a file.
Because nothing flows through pipes to the master, the task keeps running when the master
stops, and a restarted master picks up the log and the exit status from the files where it left
off. The runner stays outside the sandbox, as the master's account: the task cannot touch its
log or exit status.

    python -I -m det_hub.agents.local_runner --log LOG --exit-file EXIT --start START
        [--go-fd N] [--pass-env NAME ...] [--stop-file FILE]

The Slurm agent's batch jobs run it too, as the job's user on its node
(:mod:`det_hub.agents.slurm`); ``--pass-env`` hands the variables Slurm sets for the job
(``SLURM_*``, the GPUs it gave) on to the task. There the runner is the batch step's first
process, and Slurm signals the task's processes itself; a SIGTERM sent to the runner alone
(``sbatch --signal=B:TERM@N``: its time limit is near, or it is preempted) is Slurm asking the
task to stop soon, which ``--stop-file`` records for the master instead of passing it on.

A task the agent prepared ahead of its start (``--go-fd``) is started the same way, but its
interpreter waits inside the sandbox for the go the agent writes on ``N``
(:mod:`det_hub.exec.warm_start`); the environment in the start file is then the task's early
one, and the go brings the rest. The pipe's write end is the master's alone: a prepared task
whose master goes away reads its end, and exits without having run.

A task forked by a zygote (``--forked``, see :mod:`det_hub.exec.zygote`) is no child of the
runner: the runner gets the read ends of its standard streams and of its status and exit pipes,
and the write end of its signal pipe, and logs, signals and records it as it does a child.

    python -I -m det_hub.agents.local_runner --log LOG --exit-file EXIT
        --forked OUT,ERR,STATUS,EXIT,SIGNAL [--sandboxed]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import sys
import time

from det_hub.env_names import AGENT_ADDRESS_ENV

# A runner's start is part of every task's: what only the runners of tasks they start
# themselves use (subprocess, threading) is imported there, not by those of the tasks a zygote
# forks, and typing is left to type checkers. Such a runner's imports take 27 ms, not 45.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from typing import IO, Any


def _log_line(log: IO[str], name: str, raw: bytes) -> None:
    line = raw.decode("utf-8", errors="replace").rstrip("\r")
    log.write(json.dumps({"t": time.time(), "s": name, "m": line}) + "\n")
    log.flush()


def _pump(out: IO[bytes], err: IO[bytes], log: IO[str]) -> None:
    """Copy the task's stdout and stderr into the log a line at a time, until both end.

    One loop reads both pipes, stdout first whenever both have data: what the task wrote to
    stdout before a line on stderr (a startup hook's output, then why it failed) is logged
    before that line, which two threads reading a pipe each could not promise."""
    streams = selectors.DefaultSelector()
    # The pieces of each stream's unfinished line, joined once its newline comes: a progress
    # bar that rewrites one line with \r for hours is copied once, not at every update.
    partial: dict[str, list[bytes]] = {}
    for stream, name in ((out, "stdout"), (err, "stderr")):
        streams.register(stream.fileno(), selectors.EVENT_READ, name)
        partial[name] = []
    while streams.get_map():
        ready = sorted(streams.select(), key=lambda event: event[0].data != "stdout")
        for key, _ in ready:
            name, chunk = key.data, os.read(key.fd, 65536)
            pieces = partial[name]
            if not chunk:
                streams.unregister(key.fd)
                if pieces:
                    _log_line(log, name, b"".join(pieces))
                continue
            *ends, rest = chunk.split(b"\n")
            for n, end in enumerate(ends):
                _log_line(log, name, b"".join([*pieces, end]) if n == 0 else end)
            if ends:
                pieces.clear()
            if rest:
                pieces.append(rest)
    streams.close()


def _write_exit(path: str, status: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_stop(path: str, name: str) -> None:
    """Record that the task was asked to stop soon (written once; a repeat changes nothing)."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump({"t": time.time(), "signal": name}, f)


def _not_started(log_path: str, exit_path: str, why: str) -> int:
    """Record in the log and the exit status why the task was not started."""
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"t": time.time(), "s": "system", "m": why}) + "\n")
    _write_exit(exit_path, {"exit_code": 127, "signal": None, "reason": why})
    return 127


def _read_start(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        start = json.load(f)
    os.unlink(path)  # it holds the task's token
    return dict(start)


def _feed(fd: int, data: bytes) -> None:
    """Write ``data`` to a pipe and close it (in a thread: it may be larger than the pipe)."""
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def _exit_status(code: int, sandboxed: bool) -> dict[str, object]:
    status: dict[str, object] = {"exit_code": code, "signal": None}
    if code < 0:
        status["signal"] = signal.Signals(-code).name
    elif sandboxed and code > 128:
        # bubblewrap reports a task killed by signal N as exit code 128 + N, as shells do.
        with contextlib.suppress(ValueError):
            status["signal"] = signal.Signals(code - 128).name
    return status


class _Forked:
    """A task a zygote forked, seen through its pipes as a child process would be."""

    def __init__(self, out: int, err: int, exit_r: int, signal_w: int) -> None:
        self.stdout: IO[bytes] = os.fdopen(out, "rb", buffering=0)
        self.stderr: IO[bytes] = os.fdopen(err, "rb", buffering=0)
        self._exit_r = exit_r
        self._signal_w = signal_w

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(OSError):  # the zygote is gone: so is the task
            os.write(self._signal_w, bytes([signum]))

    def wait(self) -> tuple[int, str | None]:
        """The task's return code as subprocess gives it, once the zygote has reaped it, and
        why there is none (the zygote ended first)."""
        with os.fdopen(self._exit_r, "rb") as f:
            data = f.readline()
        try:
            return int(json.loads(data)["returncode"]), None
        except (ValueError, KeyError, TypeError):
            return -signal.SIGKILL, "the task's zygote ended before it did"


def _passed(environ: Mapping[str, str], names: list[str]) -> dict[str, str]:
    """The variables of ``environ`` that ``names`` name (``NAME``, or ``PREFIX*``)."""
    exact = {n for n in names if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
    return {k: v for k, v in environ.items() if k in exact or (prefixes and k.startswith(prefixes))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det_hub.agents.local_runner")
    parser.add_argument("--log", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--start", help="the start file (JSON) the agent wrote")
    parser.add_argument("--forked", metavar="OUT,ERR,STATUS,EXIT,SIGNAL",
                        help="a task a zygote forked: these pipes are its")
    parser.add_argument("--sandboxed", action="store_true",
                        help="with --forked: its zygote runs in a sandbox")
    parser.add_argument("--keep-fd", type=int, action="append", default=[],
                        help="hand this descriptor on to the task as it is")
    parser.add_argument("--go-fd", type=int, help="a prepared task: the read end of the pipe "
                        "the agent sends its go on, handed through to the task's interpreter")
    parser.add_argument("--pass-env", action="append", default=[], metavar="NAME",
                        help="a variable of the runner's own environment the task gets too "
                        "(over the start file's); NAME* for every one starting with NAME")
    parser.add_argument("--stop-file", help="on SIGTERM, write this file (the signal's name) "
                        "instead of passing the signal on to the task")
    parser.add_argument("--slurm-node-address", metavar="SCONTROL", help="give the task, as "
                        f"{AGENT_ADDRESS_ENV}, the NodeAddr Slurm gives the node this runs on "
                        "(SLURMD_NODENAME), asked with this scontrol")
    args = parser.parse_args(argv)
    if args.forked:
        return _run_forked(args.forked, args.log, args.exit_file, args.sandboxed)
    if not args.start:
        parser.error("--start is required, but with --forked")
    start = _read_start(args.start)
    start["env"] = {**start["env"], **_passed(os.environ, args.pass_env)}
    if args.slurm_node_address:
        from det_hub.agents.slurm_node import this_node_address

        try:
            start["env"][AGENT_ADDRESS_ENV] = this_node_address(args.slurm_node_address)
        except RuntimeError as e:
            return _not_started(args.log, args.exit_file, f"cannot find this node's address "
                                f"for the task to listen on: {e}")
    import subprocess
    import threading

    command: list[str] = list(start["command"])
    if start.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(start["cpus"]))

    env_r, env_w = os.pipe()
    why_r, why_w = os.pipe()
    passed = [env_r, why_w, *args.keep_fd]
    argv_full = [*start["argv"], "--env-fd", str(env_r), "--status-fd", str(why_w)]
    if args.go_fd is not None:
        passed.append(args.go_fd)
        argv_full += ["--go-fd", str(args.go_fd)]
    argv_full += ["--", *command]
    with open(args.log, "a", encoding="utf-8") as log:
        try:
            child = subprocess.Popen(argv_full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, pass_fds=passed,
                                     cwd=start.get("cwd"),
                                     env={"PATH": "/usr/local/bin:/usr/bin:/bin",
                                          "LANG": "C.UTF-8"},
                                     # Files the task writes are its own, readable as usual.
                                     umask=0o022)
        except OSError as e:
            for fd in (env_w, why_r):
                os.close(fd)
            return _not_started(args.log, args.exit_file,
                                f"cannot start {argv_full[0]!r}: {e.strerror}")
        finally:
            for fd in passed:
                os.close(fd)
        feeder = threading.Thread(target=_feed, args=(env_w, json.dumps(start["env"]).encode()),
                                  daemon=True)
        feeder.start()

        _forward_signals(child, args.stop_file)
        assert child.stdout is not None and child.stderr is not None
        _pump(child.stdout, child.stderr, log)
        code = child.wait()
    _record_exit(args.exit_file, _exit_status(code, bool(start.get("sandboxed"))), why_r)
    return 0


def _forward_signals(child: subprocess.Popen[bytes] | _Forked, stop_file: str | None) -> None:
    def forward(signum: int, _frame: object) -> None:
        # The master signals the whole process group; forwarding covers a direct kill of
        # this runner too. The runner itself stays to record the exit status.
        if stop_file and signum == signal.SIGTERM:
            _write_stop(stop_file, signal.Signals(signum).name)
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)


def _record_exit(exit_file: str, status: dict[str, object], why_r: int) -> None:
    """Write the exit status, with why the task could not start where it said so."""
    with os.fdopen(why_r, "rb") as f:
        why = f.read().decode("utf-8", "replace").strip()
    if why:
        status["reason"] = why
    _write_exit(exit_file, status)


def _run_forked(fds: str, log_path: str, exit_file: str, sandboxed: bool) -> int:
    """Log, signal and record a task a zygote forked (see :class:`_Forked`)."""
    try:
        out, err, why_r, exit_r, signal_w = (int(fd) for fd in fds.split(","))
    except ValueError:
        return _not_started(log_path, exit_file, f"--forked {fds!r}: not five descriptors")
    child = _Forked(out, err, exit_r, signal_w)
    with open(log_path, "a", encoding="utf-8") as log:
        _forward_signals(child, None)
        _pump(child.stdout, child.stderr, log)
        code, lost = child.wait()
    # Read as a sandboxed task's code is: a task that exits 128 + N itself looks killed by N.
    status = _exit_status(code, sandboxed)
    if lost:
        status["reason"] = lost
    _record_exit(exit_file, status, why_r)
    return 0


if __name__ == "__main__":
    code = main()
    # The agent learns of the task's end from this process's: its exit status is written and
    # its log closed, so nothing is left for the interpreter's teardown to do but take time.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
