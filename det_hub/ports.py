"""Free TCP ports: what a task's server, the hub's spawner and the test fixtures listen on."""

from __future__ import annotations

import socket


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now (``""``: every address of this machine).

    Raises:
        OSError: ``host`` is not an address of this machine.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


__all__ = ["free_port"]
