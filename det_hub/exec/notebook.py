"""A notebook task: JupyterLab (or a bare Jupyter server) under the master's proxy path.

``python3 -m det_hub.exec.notebook`` is what the master runs for ``det-hub notebook start``.
The server listens on the agent's address, serves under ``/proxy/<id>/`` and takes the task's
token (``DET_HUB_NOTEBOOK_TOKEN``), which the proxy adds to every request it lets through;
its root is the working directory (the context sent along, if any).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from det_hub.env_names import NOTEBOOK_TOKEN_ENV
from det_hub.exec._serve import bind_host, fail, free_port, http_answers, proxy_path, run_server


def server_argv(host: str, port: int, base_url: str) -> list[str]:
    """The command line of the Jupyter server: JupyterLab when installed."""
    app = "jupyterlab" if importlib.util.find_spec("jupyterlab") else "jupyter_server"
    return [
        sys.executable, "-m", app,
        f"--ServerApp.ip={host}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={base_url}", f"--ServerApp.root_dir={os.getcwd()}",
        "--ServerApp.open_browser=False", "--ServerApp.allow_remote_access=True",
        # Containers often run as root; the proxy checks who comes in.
        "--ServerApp.allow_root=True",
    ]


def main() -> int:
    if importlib.util.find_spec("jupyter_server") is None:
        return fail("Jupyter is not installed where this notebook runs: add jupyterlab to its "
                    "image (pip install jupyterlab)")
    token = os.environ.get(NOTEBOOK_TOKEN_ENV, "")
    if not token:
        return fail(f"{NOTEBOOK_TOKEN_ENV} is not set: the master starts notebooks with one")
    host, base = bind_host(), proxy_path()
    port = free_port(host)
    env = dict(os.environ, JUPYTER_TOKEN=token)  # not on the command line, where ps shows it
    status = f"http://{host}:{port}{base}api/status"
    return run_server(server_argv(host, port, base), port,
                      http_answers(status, {"Authorization": f"token {token}"}), env)


if __name__ == "__main__":
    sys.exit(main())
