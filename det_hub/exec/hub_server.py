"""A hub notebook server that the master runs: JupyterHub's single-user server as a det_hub task.

``python3 -m det_hub.exec.hub_server -- COMMAND...`` is what the master runs for a hub server
that DetSpawner asks it to run (its task mode, for resource pools such as Slurm's, where the
server must be the pool's own job). The environment is the one the hub gives a single-user
server (``JUPYTERHUB_API_TOKEN`` and the rest), handed over as every task's is, never on a
command line.

The server listens on a free port of the address the master reaches this host at (on Slurm, the
``NodeAddr`` of the job's node), with ``--ip`` and ``--port`` added to its command, as
JupyterHub's batchspawner does. Once it answers there the wrapper tells the master the port;
the master records the host from its agent, and the spawner hands ``host:port`` to the hub,
whose proxy then sends the user there.

The server runs in the account's home directory on this host when it has one that it may
write, as a login would; otherwise the hub must name the notebook directory
(``c.Spawner.notebook_dir``, a directory on the shared filesystem).
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Mapping, Sequence

from det_hub.exec._serve import bind_host, fail, free_port, http_answers, run_server

#: Arguments by which a single-user server is given its notebook directory.
ROOT_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir")


def names_root(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether the hub gives the server its notebook directory: ``JUPYTERHUB_ROOT_DIR`` (what
    ``c.Spawner.notebook_dir`` sets), or an option of its command."""
    return bool(env.get("JUPYTERHUB_ROOT_DIR")) or any(
        a == option or a.startswith(option + "=") for a in argv for option in ROOT_OPTIONS)


def server_argv(command: Sequence[str], host: str, port: int) -> list[str]:
    """The server's command, listening on ``host:port`` and nowhere else."""
    return [*command, f"--ip={host}", f"--port={port}", "--ServerApp.port_retries=0"]


def account_home() -> str | None:
    """The home directory of the account this runs as, where it is a directory it may write;
    None otherwise (``nobody``'s ``/nonexistent``)."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
    return home if os.path.isdir(home) and os.access(home, os.W_OK | os.X_OK) else None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1:] if "--" in args else args
    if not command:
        return fail("no server command: python3 -m det_hub.exec.hub_server -- COMMAND...")
    home = account_home()
    if home is not None:
        os.chdir(home)
        os.environ["HOME"] = home
    elif not names_root(command, os.environ):
        return fail(f"the account {os.getuid()} has no home directory it may write on this "
                    "host, and the hub names no notebook directory: set "
                    "c.Spawner.notebook_dir to a directory on the shared filesystem")
    host = bind_host()
    port = free_port(host)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    env = dict(os.environ, JUPYTERHUB_SERVICE_URL=f"http://{host}:{port}{prefix}")
    # The server's API root answers without a token once it serves.
    return run_server(server_argv(command, host, port), port,
                      http_answers(f"http://{host}:{port}{prefix}api"), env)


if __name__ == "__main__":
    sys.exit(main())
