"""Start one ``torch.distributed`` worker per slot of the trial and watch over them.

Usage, as Determined's launcher::

    python -m det_hub.launch.torch_distributed [--trace] [--nproc N] [--] python3 train.py ...

Each worker gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``CROSS_RANK`` (the node's rank), ``CROSS_SIZE`` (the number of nodes), ``MASTER_ADDR`` and
``MASTER_PORT`` (rank 0's rendezvous address) and ``DET_HUB_DISTRIBUTED=torch``, so ``init_process_group(...)`` with the default
``env://`` and :meth:`det_hub.core.DistributedContext.from_torch_distributed` work as under
torchrun. On GPU slots worker ``i`` is meant to use ``cuda:LOCAL_RANK``.

A trial spread over several hosts runs one launcher per host. The master tells each which
node it is through ``DET_HUB_NNODES``, ``DET_HUB_NODE_RANK``, ``DET_HUB_CHIEF_ADDR`` and
``DET_HUB_CHIEF_PORT``; worker ``i`` of node ``n`` then has rank ``n * nproc + i``, and every
worker meets at the chief's address. On one host the launcher picks a free local port.

Every line a worker writes is written again by the launcher as ``[rank=N] line``, stdout to
stdout and stderr to stderr. When a worker fails the others are stopped (SIGTERM, SIGKILL
after 10 s) and the launcher exits with the failed worker's code.

torchrun's elastic agent is not used: one node with a fixed set of workers needs none of its
rendezvous or restarts, and a plain supervisor makes the output, exit-code and signal
behaviour above simple to guarantee.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import IO, Any

from det_hub.env_names import (
    CHIEF_ADDR_ENV,
    CHIEF_PORT_ENV,
    DISTRIBUTED_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
)
from det_hub.launch._command import (
    LaunchError,
    launcher_main,
    slot_count,
    threads_per_worker,
)

PROG = "det_hub.launch.torch_distributed"
KILL_GRACE_SECONDS = 10.0
_POLL_SECONDS = 0.05
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class Node:
    """Where this launcher's workers sit in the whole job."""

    rank: int = 0
    count: int = 1
    chief_addr: str = "127.0.0.1"
    chief_port: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Node:
        """The node the master described in ``DET_HUB_NNODES`` and friends; one node if none.

        Raises:
            LaunchError: The variables are there but do not make sense.
        """
        if not env.get(NNODES_ENV):
            return cls()
        try:
            node = cls(int(env[NODE_RANK_ENV]), int(env[NNODES_ENV]),
                       env[CHIEF_ADDR_ENV], int(env[CHIEF_PORT_ENV]))
        except (KeyError, ValueError) as exc:
            raise LaunchError(f"the multi-node variables {NNODES_ENV}, {NODE_RANK_ENV}, "
                              f"{CHIEF_ADDR_ENV} and {CHIEF_PORT_ENV} are incomplete: "
                              f"{exc}") from exc
        if not 0 <= node.rank < node.count:
            raise LaunchError(f"{NODE_RANK_ENV}={node.rank} is outside 0..{node.count - 1}")
        return node


def worker_env(
    base: Mapping[str, str],
    *,
    rank: int,
    size: int,
    port: int,
    omp_threads: str | None = None,
    node: Node = Node(),
) -> dict[str, str]:
    """The environment of local worker ``rank`` of ``size`` on this node.

    Args:
        base: The environment to start from (the launcher's own).
        rank: The worker's local rank, which is also its GPU index.
        size: The number of workers on this node.
        port: The rendezvous port of global rank 0 (``MASTER_PORT``).
        omp_threads: ``OMP_NUM_THREADS`` for the worker, or None to keep ``base``'s.
        node: This node's place among the job's nodes.
    """
    env = dict(base)
    env.update(
        RANK=str(node.rank * size + rank),
        WORLD_SIZE=str(size * node.count),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(size),
        CROSS_RANK=str(node.rank),
        CROSS_SIZE=str(node.count),
        MASTER_ADDR=node.chief_addr,
        MASTER_PORT=str(port),
    )
    env[DISTRIBUTED_ENV] = "torch"
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = omp_threads
    # Piped Python output is block-buffered; lines should reach the trial log as written.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def exit_code(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the worker if the launcher dies.

    Workers run in sessions of their own (so that a worker's whole process tree can be
    signalled), which takes them out of the process group that an agent kills; without
    this a SIGKILLed launcher would leave them running. Linux only.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the line above took effect
            os._exit(1)

    return preexec


def _copy_lines(source: IO[bytes], sink: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    """Copy ``source`` to ``sink`` line by line, each line with ``prefix`` in front."""
    with source:
        for line in source:
            if not line.endswith(b"\n"):
                line += b"\n"  # a last line without one must not run into another rank's
            with lock:
                sink.write(prefix + line)
                sink.flush()


def _binary(stream: IO[str]) -> IO[bytes]:
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        raise LaunchError(f"{stream!r} has no binary buffer to copy worker output to")
    return buffer


class _Workers:
    """The running workers: start, watch, signal and stop them."""

    def __init__(self, kill_grace: float) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.threads: list[threading.Thread] = []
        self.kill_grace = kill_grace
        self.failure: int | None = None
        self._kill_at: float | None = None
        self._terminated: set[int] = set()
        self.started = False
        self._early_signals: list[int] = []

    def start(self, command: Sequence[str], envs: Sequence[Mapping[str, str]]) -> None:
        preexec = _die_with_parent()
        for env in envs:
            try:
                process = subprocess.Popen(
                    list(command),
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            except OSError as exc:
                self.signal_all(signal.SIGKILL)
                self.wait_all()
                # The shell's codes: 127 for a command not found, 126 for one not runnable.
                code = 127 if isinstance(exc, FileNotFoundError) else 126
                raise LaunchError(f"cannot run {command[0]!r}: {exc}", code) from exc
            self.processes.append(process)
        self.started = True
        for sig in self._early_signals:
            self.signal_all(sig)

    def on_signal(self, sig: int) -> None:
        """Pass a signal the launcher got on to the workers (once they are all started)."""
        if self.started:
            self.signal_all(sig)
        else:
            self._early_signals.append(sig)

    def copy_output(self, stdout: IO[bytes], stderr: IO[bytes], first_rank: int = 0) -> None:
        # Started only once every worker is running: preexec_fn runs between fork and
        # exec, which is only safe while no other thread might hold a lock.
        lock = threading.Lock()
        for rank, process in enumerate(self.processes, start=first_rank):
            prefix = f"[rank={rank}] ".encode()
            for source, sink in ((process.stdout, stdout), (process.stderr, stderr)):
                assert source is not None
                thread = threading.Thread(
                    target=_copy_lines,
                    args=(source, sink, prefix, lock),
                    name=f"rank-{rank}-output",
                    daemon=True,  # a grandchild holding the pipe open must not hold us up
                )
                thread.start()
                self.threads.append(thread)

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to every worker still running, and to its whole process tree."""
        for process in self.processes:
            if process.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            if sig == signal.SIGTERM:
                self._terminated.add(process.pid)

    def stop_others(self) -> None:
        """Ask the workers still running to stop, and arm the SIGKILL that follows."""
        for process in self.processes:
            if process.returncode is None and process.pid not in self._terminated:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
                self._terminated.add(process.pid)
        if self._kill_at is None:
            self._kill_at = time.monotonic() + self.kill_grace

    def wait_all(self) -> None:
        """Wait for every worker; the first to fail stops the rest."""
        while True:
            running = False
            for process in self.processes:
                if process.returncode is not None:
                    continue
                returncode = process.poll()
                if returncode is None:
                    running = True
                elif returncode != 0 and self.failure is None:
                    self.failure = exit_code(returncode)
                    self.stop_others()
            if not running:
                return
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self.signal_all(signal.SIGKILL)
                self._kill_at = None
            time.sleep(_POLL_SECONDS)

    def join_output(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def run_workers(
    command: Sequence[str],
    nproc: int,
    *,
    env: Mapping[str, str] | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[bytes] | None = None,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> int:
    """Run ``nproc`` copies of ``command`` as one ``torch.distributed`` job on this node.

    SIGTERM and SIGINT sent to this process are passed on to every worker (when called from
    the main thread), and the workers are then waited for.

    Args:
        command: The worker command.
        nproc: The number of workers.
        env: The environment to build the workers' from; this process's when None.
        stdout: Where the workers' prefixed stdout lines go; this process's when None.
        stderr: Where the workers' prefixed stderr lines go; this process's when None.
        kill_grace: Seconds between the SIGTERM and the SIGKILL that stop the other workers
            after one has failed.

    Returns:
        0 when every worker exited 0; else the exit code of the first worker that failed
        (128 + N for a worker killed by signal N).

    Raises:
        LaunchError: The command cannot be started.
    """
    base = os.environ if env is None else env
    node = Node.from_env(base)
    port = node.chief_port or free_port()
    omp_threads = threads_per_worker(nproc, base)
    envs = [
        worker_env(base, rank=rank, size=nproc, port=port, omp_threads=omp_threads, node=node)
        for rank in range(nproc)
    ]
    return supervise(command, envs, first_rank=node.rank * nproc, stdout=stdout, stderr=stderr,
                     kill_grace=kill_grace)


def supervise(
    command: Sequence[str],
    envs: Sequence[Mapping[str, str]],
    *,
    first_rank: int = 0,
    stdout: IO[bytes] | None = None,
    stderr: IO[bytes] | None = None,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> int:
    """Run one copy of ``command`` per environment of ``envs`` (this node's workers, of global
    ranks ``first_rank`` up), each line they write marked with its rank, and watch over them
    as :func:`run_workers` says.

    Returns:
        0 when every worker exited 0; else the exit code of the first worker that failed.

    Raises:
        LaunchError: The command cannot be started.
    """
    workers = _Workers(kill_grace)

    def forward(signum: int, frame: FrameType | None) -> None:
        workers.on_signal(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    if in_main_thread:
        for sig in FORWARDED_SIGNALS:
            previous[sig] = signal.signal(sig, forward)
    try:
        workers.start(command, envs)
        workers.copy_output(
            stdout if stdout is not None else _binary(sys.stdout),
            stderr if stderr is not None else _binary(sys.stderr),
            first_rank=first_rank,
        )
        workers.wait_all()
    finally:
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    workers.join_output()
    return workers.failure if workers.failure is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher with ``argv`` (``sys.argv[1:]`` when None); return its exit code."""
    return launcher_main(
        PROG, argv, lambda options: run_workers(options.command, slot_count(options)))


if __name__ == "__main__":
    sys.exit(main())
