"""An interpreter that forks the trials following each other on a set of slots.

    python -m det_hub.exec.zygote --ctl-fd N -- PYTHON ENTRY...

The local agent starts one, with ``warm_start`` on, as a trial begins on its slots: inside a
sandbox of its own, as the trial's user, through :mod:`det_hub.exec.task_start` like any task,
with the trial's early environment (:data:`det_hub.exec.warm_start.LATE_VARIABLES` left out),
its context left packed (each child unpacks its own). It imports what the entrypoint will
(``det_hub.core``, and torch with ``--preload-torch``: the agent found that the entrypoint
imports it), then serves the agent on ``N``, a Unix datagram socket: each message asks it to
fork a child for the next trial of the same user with the same entrypoint, environment and
mounts (the agent checks that: its experiment's, or the user's next experiment's, whose
context the message names), and brings the child's pipes with it:

- its standard output and error, read by the child's own runner
  (:mod:`det_hub.agents.local_runner`, ``--forked``), which logs them as for any task;
- a status pipe to say why it could not start, and the pipe it waits on for its go;
- an exit pipe on which this process writes the child's exit status once it has reaped it;
- a signal pipe on which the runner sends the signals the task is sent (one byte each); when
  it closes, the runner is gone, and the child's whole process group is killed.

A child leaves this process at once: a session and process group of its own, the standard
streams given, the context unpacked into its own working directory, with the bytecode of the
context's modules an earlier child of the same context wrote (gathered as that child ended):
only the first children compile an experiment's own code. Then it waits for its go,
and takes it as :func:`det_hub.exec.warm_start.start` does: the entrypoint runs in the child
where a fresh interpreter would run it alike, else it is executed afresh. A child costs a fork,
not an interpreter's start and imports.

Every child of one zygote shares its sandbox: the same user's trials, one after the other on
the same slots, with their home and ``/tmp`` in common and a working directory each. What a
child leaves running when it ends is killed with its process group. When ``N`` closes (the
agent retires it, or the master stops), the zygote forks no more, waits for the children it
has, and exits: a trial it runs outlives the master, as any task does.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from det_hub.archive import ContextError, extract_archive
from det_hub.exec.warm_start import (
    EXIT_NO_GO,
    EXIT_NOT_STARTED,
    preload,
    python_entry,
    read_go,
    start,
)

#: The pipes a fork request brings, in this order.
FORK_FDS = ("stdout", "stderr", "status", "go", "exit", "signal")
#: The largest fork request.
MAX_REQUEST = 1 << 16


#: What the bytecode a child wrote is gathered from at most (see :func:`harvest_bytecode`):
#: directories looked into, entries looked at, bytes of one file, bytes in all.
HARVEST_DIRS = 200
HARVEST_ENTRIES = 20_000
HARVEST_FILE_BYTES = 1 << 20
HARVEST_BYTES = 16 << 20
#: The most contexts (experiments) whose bytecode a zygote keeps.
BYTECODE_CONTEXTS = 4


@dataclasses.dataclass
class _Child:
    pid: int
    pidfd: int
    exit_w: int
    signal_r: int | None
    workdir: str | None = None
    #: Which context it unpacked (the agent's key: its experiment).
    context_key: str = ""


def harvest_bytecode(workdir: str) -> dict[str, bytes]:
    """The bytecode Python wrote in a child's working directory as the child imported its
    modules (``__pycache__/NAME.TAG.pyc`` beside each ``NAME.py``), by path from there, for the
    next children to start with (:func:`plant_bytecode`). Looks at most
    :data:`HARVEST_DIRS` directories and :data:`HARVEST_ENTRIES` entries (a trial may have
    written a dataset there), and keeps files of at most :data:`HARVEST_FILE_BYTES`, up to
    :data:`HARVEST_BYTES` in all; what it cannot read it leaves."""
    suffix = f".{sys.implementation.cache_tag}.pyc"
    found: dict[str, bytes] = {}
    total = entries = 0
    pending, seen = [""], 0
    while pending and seen < HARVEST_DIRS and entries < HARVEST_ENTRIES:
        rel = pending.pop()
        seen += 1
        children = _listing(os.path.join(workdir, rel))
        entries += len(children)
        for entry in children:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name != "__pycache__":
                pending.append(os.path.join(rel, entry.name))
                continue
            for pyc in _listing(entry.path):
                name = pyc.name
                if not (name.endswith(suffix) and pyc.is_file(follow_symlinks=False)):
                    continue
                source = os.path.join(workdir, rel, name[:-len(suffix)] + ".py")
                try:
                    if not os.path.isfile(source) or \
                            pyc.stat(follow_symlinks=False).st_size > HARVEST_FILE_BYTES:
                        continue
                    with open(pyc.path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if total + len(data) > HARVEST_BYTES:
                    return found
                found[os.path.join(rel, "__pycache__", name)] = data
                total += len(data)
    return found


def _listing(path: str) -> list[os.DirEntry[str]]:
    """A directory's entries; none where it cannot be read."""
    try:
        with os.scandir(path) as listing:
            return list(listing)
    except OSError:
        return []


def plant_bytecode(bytecode: dict[str, bytes], workdir: str) -> None:
    """Write bytecode a child before wrote (:func:`harvest_bytecode`) into a new child's
    working directory, where its context was just unpacked alike (the same files, with the
    same times: Python takes the bytecode as that of its source only then, else compiles it
    again). A file already there is kept; one that cannot be written is left out, as it
    only saves compiling."""
    if sys.pycache_prefix is not None:  # Python looks for bytecode elsewhere
        return
    for rel, data in bytecode.items():
        path = os.path.join(workdir, rel)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _write_exit(fd: int, returncode: int) -> None:
    """Tell the child's runner how it ended (it may be gone: then nobody asks)."""
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps({"returncode": returncode}).encode() + b"\n")
    os.close(fd)


class Zygote:
    """Forks a child per request on ``ctl``; see the module's text."""

    def __init__(self, ctl: socket.socket, command: Sequence[str],
                 entry: tuple[str, str, list[str]]) -> None:
        self.ctl = ctl
        self.command = list(command)
        self.entry = entry
        self.children: dict[int, _Child] = {}
        self.selector = selectors.DefaultSelector()
        #: By context (the request's ``context_key``), the bytecode the first child that
        #: unpacked it and wrote any wrote (:func:`harvest_bytecode`), which the children
        #: forked after it with the same context start with.
        self.bytecode: dict[str, dict[str, bytes]] = {}

    def serve(self) -> int:
        self.selector.register(self.ctl, selectors.EVENT_READ, None)
        listening = True
        while listening or self.children:
            for key, _ in self.selector.select():
                if key.data is None:
                    listening = self._request()
                else:
                    kind, seen = key.data
                    child = self.children.get(seen.pid)
                    if child is None or child is not seen:
                        # Ended earlier in this wake-up: its end and its runner's loss can
                        # come together, and what is left of it was closed then.
                        continue
                    if kind == "exit":
                        self._reap(child)
                    else:
                        self._signal(child)
        return 0

    def _request(self) -> bool:
        """Take one request from the agent; False once it has closed the socket."""
        try:
            message, fds, _, _ = socket.recv_fds(self.ctl, MAX_REQUEST, len(FORK_FDS))
        except OSError as e:
            print(f"det_hub zygote: the agent's socket failed: {e}", file=sys.stderr, flush=True)
            message, fds = b"", []
        if not message:
            for fd in fds:
                os.close(fd)
            self.selector.unregister(self.ctl)
            self.ctl.close()
            return False
        if len(fds) != len(FORK_FDS):
            print(f"det_hub zygote: a fork request came with {len(fds)} pipes, not "
                  f"{len(FORK_FDS)} ({', '.join(FORK_FDS)}); refused", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            return True
        self._fork(json.loads(message), *fds)
        return True

    def _fork(self, request: dict[str, Any], out: int, err: int, status: int, go: int,
              exit_w: int, signal_r: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = EXIT_NOT_STARTED
            try:
                self._leave(exit_w, signal_r)
                code = self._child(request, out, err, status, go)
            except BaseException:  # noqa: BLE001 - told on the child's stderr, never returns
                with contextlib.suppress(Exception):
                    traceback.print_exc()
                    sys.stderr.flush()
            finally:
                os._exit(code)
        for fd in (out, err, status, go):
            os.close(fd)
        child = _Child(pid, os.pidfd_open(pid), exit_w, signal_r, str(request["dir"]),
                       str(request.get("context_key", "")))
        self.children[pid] = child
        self.selector.register(child.pidfd, selectors.EVENT_READ, ("exit", child))
        self.selector.register(signal_r, selectors.EVENT_READ, ("signal", child))

    def _leave(self, exit_w: int, signal_r: int) -> None:
        """In a new child: drop everything of the zygote's own."""
        os.setsid()
        self.selector.close()
        self.ctl.close()
        os.close(exit_w)
        os.close(signal_r)
        for other in self.children.values():
            for fd in (other.pidfd, other.exit_w, other.signal_r):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self.children.clear()
        gc.enable()
        if "numpy" in sys.modules:  # a fresh interpreter seeds numpy's global state anew
            sys.modules["numpy"].random.seed()

    def _child(self, request: dict[str, Any], out: int, err: int, status: int,
               go: int) -> int:
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, to in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, to)
            os.close(fd)
        workdir = str(request["dir"])
        try:
            os.chdir(workdir)
            if request.get("context"):
                extract_archive(str(request["context"]), workdir)
                plant_bytecode(self.bytecode.get(str(request.get("context_key", "")), {}),
                               workdir)
        except (ContextError, OSError) as e:
            why = f"the context cannot be unpacked into {workdir}: {e}"
            print(f"det_hub: {why}", file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):
                os.write(status, why.encode())
            return EXIT_NOT_STARTED
        finally:
            os.close(status)
        go_message = read_go(go)
        if go_message is None:
            return EXIT_NO_GO
        return start(self.command, self.entry, go_message)

    def _signal(self, child: _Child) -> None:
        assert child.signal_r is not None
        try:
            data = os.read(child.signal_r, 64)
        except OSError:
            data = b""
        if data:
            for signum in data:
                _kill_group(child.pid, signum)
            return
        # The runner is gone (killed): so is its task, as a runner's sandbox goes with it.
        self.selector.unregister(child.signal_r)
        os.close(child.signal_r)
        child.signal_r = None
        _kill_group(child.pid, signal.SIGKILL)

    def _reap(self, child: _Child) -> None:
        _, wait_status = os.waitpid(child.pid, 0)
        # What the task left running goes with it, as it would with its own sandbox.
        _kill_group(child.pid, signal.SIGKILL)
        _write_exit(child.exit_w, os.waitstatus_to_exitcode(wait_status))
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        if child.signal_r is not None:
            self.selector.unregister(child.signal_r)
            os.close(child.signal_r)
            child.signal_r = None
        del self.children[child.pid]
        if child.workdir and not self.bytecode.get(child.context_key):
            # After its exit is told: the next trial's start never waits for this.
            self.bytecode.pop(child.context_key, None)
            while len(self.bytecode) >= BYTECODE_CONTEXTS:  # the oldest context's goes
                del self.bytecode[next(iter(self.bytecode))]
            self.bytecode[child.context_key] = harvest_bytecode(child.workdir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det_hub.exec.zygote")
    parser.add_argument("--ctl-fd", type=int, required=True,
                        help="the agent's socket (AF_UNIX, SOCK_SEQPACKET) the requests come on")
    parser.add_argument("--preload-torch", action="store_true",
                        help="import torch too: the entrypoint does (the agent looked)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    entry = python_entry(command)
    if entry is None:
        parser.error(f"only a Python entrypoint of {sys.executable} is forked, not {command!r}")
    ctl = socket.socket(fileno=args.ctl_fd)
    ctl.set_inheritable(False)
    # No collection while the imports run: it would leave holes in pages the children share.
    gc.disable()
    preload(args.preload_torch)
    return Zygote(ctl, command, entry).serve()


if __name__ == "__main__":
    sys.exit(main())
