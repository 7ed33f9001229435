"""Start one Horovod worker per slot of the trial, through ``horovodrun`` with Gloo.

Usage, as Determined's launcher::

    python -m det_hub.launch.horovod [--trace] [--nproc N] [[HOROVODRUN OPTIONS...] --] \\
        python3 train.py ...

On one node: ``horovodrun -np N --gloo -H 127.0.0.1:N COMMAND``, N being the number of the
trial's slots. Options before ``--`` that this launcher does not know are handed to
``horovodrun``. Its output, already marked by rank, is passed on unchanged, and its exit code
is the launcher's.

A trial spread over several nodes (a Slurm job of one task per node, or containers on several
Docker hosts) runs one launcher per node, told its place by ``DET_HUB_NNODES``,
``DET_HUB_NODE_RANK``, ``DET_HUB_CHIEF_ADDR`` and ``DET_HUB_CHIEF_PORT``, as
:mod:`det_hub.launch.torch_distributed` is. ``horovodrun`` would start the other nodes' workers
over ssh; here each launcher starts its own node's, as horovodrun's Gloo mode would: the chief
(node 0) serves Horovod's Gloo rendezvous at the chief's address and port, and every worker
gets its place (``HOROVOD_RANK``, ``HOROVOD_LOCAL_RANK``, ``HOROVOD_CROSS_RANK`` and their
sizes), the rendezvous and the network interface of its node's address
(``DET_HUB_AGENT_ADDRESS``). Worker ``i`` of node ``n`` is rank ``n * N + i``; each line a
worker writes is marked ``[rank=R]``, and the first worker to fail stops the node's others, its
exit code the launcher's (:func:`det_hub.launch.torch_distributed.supervise`).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from det_hub.env_names import AGENT_ADDRESS_ENV, DISTRIBUTED_ENV
from det_hub.launch._command import (
    LaunchError,
    LaunchOptions,
    launcher_main,
    slot_count,
    threads_per_worker,
)
from det_hub.launch.torch_distributed import Node, supervise

if TYPE_CHECKING:
    from horovod.runner.common.util.hosts import SlotInfo

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


#: The name each node has in Horovod's plan of the job (its ``HOROVOD_HOSTNAME``).
NODE_NAME = "node-{}"


def node_worker_env(base: Mapping[str, str], slot: SlotInfo, node: Node, nproc: int,
                    iface: str) -> dict[str, str]:
    """The environment of the worker of Horovod's plan ``slot`` on this node of a job spread
    over ``node.count`` nodes: what horovodrun's Gloo mode gives a worker it starts."""
    env = horovod_env(base, nproc)
    env.update({
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": node.chief_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(node.chief_port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": iface,
    })
    return env


def interface_of(address: str) -> str:
    """The network interface that holds ``address`` (IPv4) on this host, for Gloo to talk
    on.

    Raises:
        LaunchError: No interface holds it.
    """
    import psutil  # Horovod's own requirement

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            return name
    raise LaunchError(f"no network interface of this host has the address {address} "
                      f"({AGENT_ADDRESS_ENV}) for Horovod's workers to talk on")


def run_nodes(command: Sequence[str], nproc: int, node: Node,
              env: Mapping[str, str] | None = None) -> int:
    """Run this node's ``nproc`` workers of a Horovod job spread over ``node.count`` nodes
    (see the module's docstring); the chief serves the Gloo rendezvous while its workers
    run. Returns the exit code of the first worker that failed, else 0.

    Raises:
        LaunchError: Horovod is not installed, the chief's port is taken, or this node's
            address is on no interface.
    """
    base = os.environ if env is None else env
    try:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    except ImportError:
        raise LaunchError(NOT_INSTALLED, 127) from None
    assert node.chief_port is not None
    iface = interface_of(base.get(AGENT_ADDRESS_ENV) or node.chief_addr)
    hosts = ",".join(f"{NODE_NAME.format(n)}:{nproc}" for n in range(node.count))
    plan = get_host_assignments(parse_hosts(hosts), nproc * node.count)
    server = None
    if node.rank == 0:
        try:
            server = RendezvousHTTPServer((node.chief_addr, node.chief_port), RendezvousHandler,
                                          0)
        except OSError as exc:
            raise LaunchError(f"cannot serve Horovod's rendezvous at {node.chief_addr}:"
                              f"{node.chief_port}: {exc}") from exc
        server.init(plan)
        threading.Thread(target=server.serve_forever, name="horovod-rendezvous",
                         daemon=True).start()
    mine = [slot for slot in plan if slot.hostname == NODE_NAME.format(node.rank)]
    try:
        return supervise(command, [node_worker_env(base, slot, node, nproc, iface)
                                   for slot in mine], first_rank=node.rank * nproc)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


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
        node = Node.from_env(os.environ)
        if node.count > 1:
            if options.passthrough:
                raise LaunchError(f"horovodrun options ({' '.join(options.passthrough)}) do not "
                                  "apply to a trial spread over several nodes: its workers "
                                  "start without horovodrun")
            return run_nodes(options.command, nproc, node)
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
