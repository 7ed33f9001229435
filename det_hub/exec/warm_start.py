"""A task's Python, started before its slots are free: imports done, waiting for its go.

    python -m det_hub.exec.warm_start --go-fd N -- PYTHON ENTRY...

The local agent prepares a trial's task ahead of time (see
:meth:`det_hub.agents.local.LocalAgent.prepare`, and the task that follows a trial on its slots):
its directory, its sandbox, its user, and, through :mod:`det_hub.exec.task_start`, this
interpreter, started with the task's environment less what only exists once the allocation
runs (its id, its token, where its cluster info is, the trial's id: :data:`LATE_VARIABLES`).
It imports what every trial imports (``det_hub.core`` and its HTTP stack; torch too where it
is installed and the task uses it), then blocks on ``N`` until the agent sends the go: the
task's whole environment and its CPUs, as JSON. It serves exactly one task, inside the sandbox
it was started in, and only one the agent found to be the same as the one it was prepared for
(the same experiment's code, user and mounts); nothing of another task or user ever reaches it.

On the go it becomes the task's command:

- ``PYTHON SCRIPT ARGS...`` and ``PYTHON -m MODULE ARGS...``, where ``PYTHON`` is this
  interpreter and the environment it started with is the task's (the late variables aside),
  run here, with ``sys.argv``, ``sys.path[0]``, ``__main__`` and the exit status as a fresh
  ``python`` would have them, and an uncaught exception's traceback showing the task's frames
  only;
- anything else (another program, other interpreter flags, a startup hook, an environment that
  differs in a variable the interpreter or a library may have read at start) is executed as
  :mod:`det_hub.exec.task_start` would have: a fresh process with the task's environment.

Without a go (the agent dropped the task, or the master went away) it exits with
:data:`EXIT_NO_GO` when ``N`` closes.
"""

from __future__ import annotations

import _io
import argparse
import atexit
import contextlib
import ctypes
import gc
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from det_hub.env_names import (
    AGENT_ADDRESS_ENV,
    ALLOCATION_ID_ENV,
    ALLOCATION_TOKEN_ENV,
    CHIEF_ADDR_ENV,
    CHIEF_PORT_ENV,
    CLUSTER_INFO_ENV,
    EXPERIMENT_ID_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
    TRIAL_ID_ENV,
)

#: The variables a task's environment gains only when its allocation runs, the trial's id (an
#: interpreter prepared to follow a trial serves the next trial of its experiment) and the
#: experiment's (a zygote forks the trials of its user's next experiments too); a warm
#: interpreter starts without them and takes them with the go. Nothing reads them before the
#: task's own code runs.
LATE_VARIABLES = frozenset({ALLOCATION_ID_ENV, ALLOCATION_TOKEN_ENV, CLUSTER_INFO_ENV,
                            AGENT_ADDRESS_ENV, NNODES_ENV, NODE_RANK_ENV, CHIEF_ADDR_ENV,
                            CHIEF_PORT_ENV, TRIAL_ID_ENV, EXPERIMENT_ID_ENV})

#: The exit code when no go came (the spare was dropped before its task started).
EXIT_NO_GO = 125
EXIT_NOT_FOUND = 127
EXIT_NOT_STARTED = 126

#: What a warm interpreter imports ahead of every task, each where it is installed:
#: ``det_hub.core``, and what a trial's first calls import that ``import det_hub.core``
#: leaves out for code that never makes them: the HTTP client of its first call to the
#: master (about 17 ms) and the TensorBoard event writer of its first report (about 3 ms).
PRELOAD = ("det_hub.core", "http.client", "det_hub.core._tensorboard")
#: Entrypoints that always use torch: det_hub's PyTorchTrial harness and its launchers.
TORCH_MODULES = ("det_hub.exec.harness", "det_hub.launch.")
#: A top-level line of Python that imports torch.
_IMPORTS_TORCH = re.compile(rb"^(?:import|from)[ \t]+torch\b", re.MULTILINE)
#: How much of an entry's file :func:`uses_torch` looks at.
ENTRY_HEAD_BYTES = 1 << 20


def python_entry(command: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """``("script", path, args)`` or ``("module", name, args)`` for a command this
    interpreter can run itself; None for anything else."""
    if len(command) < 2 or os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    if command[1] == "-m" and len(command) >= 3 and command[2] \
            and not command[2].startswith("-"):
        return "module", command[2], list(command[3:])
    if command[1] and not command[1].startswith("-"):
        return "script", command[1], list(command[2:])
    return None


def same_start(started: Mapping[str, str], env: Mapping[str, str]) -> bool:
    """Whether ``env`` is the environment this interpreter started with, up to the late
    variables: only then is running here the same as a fresh start."""
    def early(e: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in e.items() if k not in LATE_VARIABLES}

    return early(started) == early(env)


def entry_file(kind: str, target: str) -> str:
    """The file a ``("script", path)`` or ``("module", name)`` entry runs, from the working
    directory (for a module, where the working directory holds it)."""
    return target if kind == "script" else os.path.join(*target.split(".")) + ".py"


def uses_torch(kind: str, target: str, head: bytes | None) -> bool:
    """Whether the task imports torch as it starts: det_hub's harness does, and so does an
    entry script or a module of the working directory that imports it at its top level (an
    import inside a function may never run); ``head``: the first :data:`ENTRY_HEAD_BYTES` of
    the entry's file (:func:`entry_file`), None where there is none. torch is preloaded only
    then: it takes more than a second of CPU to import and a good part of a second more to
    exit, which a task that never imports it must not pay."""
    if kind == "module" and any(target == m or (m.endswith(".") and target.startswith(m))
                                for m in TORCH_MODULES):
        return True
    return head is not None and _IMPORTS_TORCH.search(head) is not None


def _head(path: str) -> bytes | None:
    """The first :data:`ENTRY_HEAD_BYTES` of a file, None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(ENTRY_HEAD_BYTES)
    except OSError:
        return None


def preload(with_torch: bool) -> None:
    """Import what the task will import anyway, each module where it is installed; then
    freeze what the imports made (:func:`gc.freeze`). The collector then never walks those
    objects again: a forked child does not write to their pages (they stay shared with the
    zygote), and the task's end looks for open files among its own objects only (a scan of
    every object costs tens of milliseconds once torch is imported)."""
    for name in (*PRELOAD, *(("torch",) if with_torch else ())):
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            __import__(name)
    gc.collect()
    gc.freeze()


#: Whether the task froze objects of its own (:func:`_freeze_of_task`).
_task_froze = False
_gc_freeze = gc.freeze


def _freeze_of_task() -> None:
    """:func:`gc.freeze` as the task calls it: noted, so that its end looks for open files
    among the frozen objects too (:func:`_close_open_files`). Asking the collector how many
    objects are frozen instead walks every one of them: 1.4 ms in a fresh child of a zygote
    without torch, tens of milliseconds with it."""
    global _task_froze
    _task_froze = True
    _gc_freeze()


def _pin(cpus: Sequence[int]) -> None:
    """Pin every thread of this process (the imports may have started some) to ``cpus``."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), set(cpus))
        except (ProcessLookupError, ValueError):
            pass


def _become(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Execute ``command`` as a fresh process (what task_start does)."""
    program = command[0] if "/" in command[0] else shutil.which(command[0],
                                                                 path=env.get("PATH"))
    if program is None:
        print(f"det_hub: cannot start {command[0]!r}: not found on the task's PATH "
              f"({env.get('PATH', '')})", file=sys.stderr, flush=True)
        return EXIT_NOT_FOUND
    try:
        os.execve(program, list(command), dict(env))
    except OSError as e:
        print(f"det_hub: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr,
              flush=True)
        return EXIT_NOT_FOUND if e.errno == 2 else EXIT_NOT_STARTED
    return EXIT_NOT_STARTED  # not reached


def _fresh_main() -> types.ModuleType:
    """A new, empty ``__main__`` in place of this module's."""
    import builtins

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    return main


def _report_uncaught(exc: BaseException, main: types.ModuleType) -> int:
    """Print an uncaught exception as the interpreter would (the task's frames only) and give
    its exit status; a KeyboardInterrupt ends the process by SIGINT, as Python's does."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals is not main.__dict__:
        tb = tb.tb_next
    if tb is not None:
        exc = exc.with_traceback(tb)
    sys.excepthook(type(exc), exc, exc.__traceback__)
    if isinstance(exc, KeyboardInterrupt):
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return 1


def run_here(kind: str, target: str, args: list[str]) -> int:
    """Run a script or a module as ``__main__`` of this process."""
    import runpy

    main = _fresh_main()
    try:
        if kind == "script":
            path = os.path.abspath(target)
            with open(path, "rb") as f:
                source = f.read()
            code = compile(source, path, "exec", dont_inherit=True)
            from importlib.machinery import SourceFileLoader

            main.__dict__.update(__file__=path, __cached__=None, __spec__=None,
                                 __loader__=SourceFileLoader("__main__", path))
            sys.argv = [target, *args]
            sys.path[0] = os.path.dirname(path)
            exec(code, main.__dict__)
        else:
            sys.argv = ["-m", *args]  # runpy puts the module's file first, as `-m` does
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]
    except SystemExit:
        raise
    except FileNotFoundError as e:
        if kind == "script" and e.filename == os.path.abspath(target):
            print(f"{sys.executable}: can't open file {os.path.abspath(target)!r}: "
                  f"[Errno {e.errno}] {e.strerror}", file=sys.stderr)
            return 2
        return _report_uncaught(e, main)
    except BaseException as e:  # noqa: BLE001 - reported as the interpreter would
        return _report_uncaught(e, main)
    return 0


#: The exit code of an interpreter that could not flush its standard streams as it ended.
EXIT_FLUSH_FAILED = 120


def _text_first(f: _io._IOBase) -> int:
    """Text layers before the binary streams they write to: closing one flushes it into its
    buffer, which is closed after."""
    return 0 if isinstance(f, _io._TextIOBase) else 1


def _close_open_files() -> None:
    """Close every file object the task left open for writing, as the interpreter's teardown
    would when it frees them: buffered writes reach their files, and a compressed stream
    writes its end (a ``gzip`` file's trailer). The standard streams are flushed, not closed.
    Files open only for reading have nothing to lose, and are left alone: one may be in the
    middle of a read in a daemon thread (an HTTP long poll), whose lock a close would wait on
    until the read ends."""
    standard: set[int] = set()
    for stream in (sys.stdout, sys.stderr, sys.stdin, sys.__stdout__, sys.__stderr__,
                   sys.__stdin__):
        layer: object = stream
        while layer is not None:  # the text layer, its buffer, the buffer's raw file
            standard.add(id(layer))
            layer = getattr(layer, "buffer", None) or getattr(layer, "raw", None)
    if _task_froze:
        gc.unfreeze()  # its files may be among the objects it froze
    # By type(), which never looks into an object: isinstance() asks a weak proxy whose
    # object is gone for its class, and raises.
    files = [f for f in gc.get_objects()
             if issubclass(type(f), _io._IOBase) and id(f) not in standard]
    for f in sorted(files, key=_text_first):
        try:
            if not f.closed and f.writable():
                f.close()
        except Exception:  # noqa: BLE001 - skipped, as the interpreter's own end skips it
            pass


def _end(code: int) -> NoReturn:
    """End the process with ``code`` once the task's code has returned, as a fresh
    interpreter's exit would, less the teardown of its modules (tens of milliseconds, and
    most of a second with torch imported, spent between a trial's last line and its slot
    being free).

    What a task can see of an interpreter's end still happens, in its order: non-daemon
    threads are waited for, ``atexit`` functions run (logging's flush, ``weakref.finalize``
    and ``multiprocessing``'s among them), files left open for writing are closed (see
    :func:`_close_open_files`), and Python's and C's standard streams are flushed. An error
    flushing Python's gives exit code 120, as the interpreter does."""
    main_thread = threading.main_thread()
    while True:
        others = [t for t in threading.enumerate()
                  if t is not main_thread and not t.daemon and t.is_alive()]
        if not others:
            break
        for t in others:
            t.join()
    atexit._run_exitfuncs()
    try:
        _close_open_files()
    except Exception as e:  # noqa: BLE001 - the task's own end stands; the log says what failed
        print(f"det_hub: closing the files the task left open failed: {e!r}", file=sys.stderr,
              flush=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - as the interpreter's end: exit code 120
            code = EXIT_FLUSH_FAILED
    # What C code wrote through stdio (an extension's printf) is in the C library's buffers.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)
    os._exit(code)


def exit_code(exc: SystemExit) -> int | None:
    """The exit status the interpreter gives ``exc`` (printing a message, as it does, where
    the code is not a number); None for a number it would not pass on as is."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool) or not isinstance(code, int):
        with contextlib.suppress(Exception):
            print(code, file=sys.stderr)
        return 1
    return code if 0 <= code <= 255 else None


def read_go(fd: int) -> dict[str, Any] | None:
    """The go message on ``fd`` (JSON), None when the fd closes without one."""
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    if not data:
        return None
    go = json.loads(data)
    env = go.get("env")
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("the go message's env must be a JSON object of strings")
    return dict(go)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det_hub.exec.warm_start")
    parser.add_argument("--go-fd", type=int, required=True, help="the go (JSON) comes here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    os.set_inheritable(args.go_fd, False)
    entry = python_entry(command)
    if entry is not None:
        preload(uses_torch(entry[0], entry[1], _head(entry_file(entry[0], entry[1]))))
    go = read_go(args.go_fd)
    if go is None:
        return EXIT_NO_GO
    return start(command, entry, go)


def start(command: Sequence[str], entry: tuple[str, str, list[str]] | None,
          go: Mapping[str, Any]) -> int:
    """Become the task ``go`` starts: its command run here where this interpreter started as
    a fresh one for it would have, else executed afresh. Returns only a failure to execute."""
    env: dict[str, str] = go["env"]
    _pin([int(c) for c in go.get("cpus") or ()])
    if entry is None or not same_start(os.environ, env):
        return _become(command, env)
    os.environ.clear()
    os.environ.update(env)
    gc.freeze = _freeze_of_task
    try:
        code = run_here(*entry)
    except SystemExit as e:
        status = exit_code(e)
        if status is None:  # a number past what an exit status holds: the interpreter decides
            raise
        code = status
    _end(code)


if __name__ == "__main__":
    sys.exit(main())
