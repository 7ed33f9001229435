"""Where a Slurm job runs: the address of its node, as Slurm's own configuration gives it.

A notebook, shell or TensorBoard on a Slurm pool listens on the node Slurm picked for its job,
and the master's proxy sends its users there. Both sides take that address from Slurm, never
from the task: on the node, the job's runner asks for the ``NodeAddr`` of the node it runs on
(``SLURMD_NODENAME``) and the task binds there; on the master, the agent asks for the job's
batch host and that node's ``NodeAddr`` (:meth:`det_hub.agents.slurm.SlurmAgent.task_address`).

Kept apart from :mod:`det_hub.agents.slurm` so that the runner in a job imports only this.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

#: Seconds ``scontrol`` may take on a node before the lookup fails.
LOOKUP_TIMEOUT = 60.0


def scontrol_fields(text: str) -> dict[str, str]:
    """The ``Key=value`` pairs of one ``scontrol --oneliner show ...`` record (the first of a
    repeated key)."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def parse_node_address(text: str) -> str | None:
    """The ``NodeAddr`` in ``scontrol --oneliner show node NAME`` output; None without one."""
    address = scontrol_fields(text).get("NodeAddr", "")
    return address if address and address != "(null)" else None


def node_address(scontrol: str, node: str, env: Mapping[str, str] | None = None,
                 timeout: float = LOOKUP_TIMEOUT) -> str:
    """The ``NodeAddr`` Slurm gives ``node``, asked with the ``scontrol`` at that path.

    Raises:
        RuntimeError: scontrol failed, or named no address for the node.
    """
    try:
        done = subprocess.run([scontrol, "--oneliner", "show", "node", node],
                              capture_output=True, text=True, check=False, timeout=timeout,
                              env=dict(env if env is not None else os.environ),
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"cannot ask {scontrol} for the address of Slurm node {node}: "
                           f"{e}") from None
    address = parse_node_address(done.stdout) if done.returncode == 0 else None
    if address is None:
        raise RuntimeError(f"{scontrol} show node {node} gives no NodeAddr: "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    return address


def this_node_address(scontrol: str) -> str:
    """The ``NodeAddr`` of the node a job's process runs on (its ``SLURMD_NODENAME``).

    Raises:
        RuntimeError: Not in a Slurm job, or Slurm gives no address for the node.
    """
    node = os.environ.get("SLURMD_NODENAME")
    if not node:
        raise RuntimeError("SLURMD_NODENAME is not set: not a process of a Slurm job")
    return node_address(scontrol, node)


__all__ = ["node_address", "parse_node_address", "scontrol_fields", "this_node_address"]
