"""``det-hub up``: the embedded cluster. JupyterHub on http://127.0.0.1:8000 with the det_hub
master as its service (SQLite store, local agent).

Everything lives in the data directory: the generated ``jupyterhub_config.py`` (rewritten at
every start; put your own settings in ``jupyterhub_config.local.py`` beside it), the hub's
database and cookie secret, the master's store and checkpoints, users' home directories, and
the sign-in password (``hub-password``, made on first start). Any user name signs in with that
password; ``admin`` is a hub admin, and so a det_hub admin.

Notebook servers run as local processes, or (``--spawner`` chooses; by default when a Docker
engine answers at ``$DOCKER_HOST`` or the local socket and has the notebook image, ``--image``,
default ``det-hub:cpu`` built from ``docker/``) in containers through DetSpawner: the engine
becomes the master's Docker agent of a ``notebooks`` resource pool, whose slots the servers
take.

This is a single-machine setup for trying det_hub and for development; a shared deployment
writes its own hub config around :func:`det_hub.hub.configure`.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from det_hub.defaults import DEFAULT_DATA_DIR
from det_hub.env_names import DATA_DIR_ENV, PROXY_COMMAND_ENV
from det_hub.service.data_dir import PRIVATE_UMASK, make_private_dir, private_umask, write_private

#: Where ``make`` installs configurable-http-proxy when none is on the PATH.
LOCAL_PROXY = Path(sys.prefix) / "node_modules" / ".bin" / "configurable-http-proxy"


def find_proxy() -> str | None:
    """configurable-http-proxy: ``$DET_HUB_PROXY_COMMAND``, the PATH, or the one ``make``
    installs into the virtual environment."""
    configured = os.environ.get(PROXY_COMMAND_ENV)
    if configured:
        return configured
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    return str(LOCAL_PROXY) if LOCAL_PROXY.exists() else None


def password(data_dir: Path) -> str:
    """The sign-in password, made on first start and kept (mode 0600) in the data directory."""
    path = data_dir / "hub-password"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(12) + "\n")
    return path.read_text().strip()


def docker_engine() -> str | None:
    """The Docker engine of this machine, when one answers: ``$DOCKER_HOST``, else the local
    socket."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        from docker.client import DockerClient

        client = DockerClient(base_url=host, version="auto", timeout=3)
    except Exception:  # no SDK, no engine: no containers
        return None
    try:
        client.ping()
        return host
    except Exception:
        return None
    finally:
        client.close()


def has_image(host: str, image: str) -> bool:
    """Whether the engine at ``host`` has ``image`` (nothing is pulled)."""
    from docker.client import DockerClient

    client = DockerClient(base_url=host, version="auto", timeout=10)
    try:
        client.images.get(image)
        return True
    except Exception:
        return False
    finally:
        client.close()


def choose_spawner(requested: str, image: str) -> tuple[str, str | None]:
    """``("docker", engine)`` or ``("local", None)``: ``auto`` takes Docker when an engine
    answers and has the notebook image.

    Raises:
        SystemExit: ``docker`` was asked for and no engine answers.
    """
    if requested == "local":
        return "local", None
    host = docker_engine()
    if requested == "docker":
        if host is None:
            raise SystemExit("det-hub up: --spawner docker, but no Docker engine answers "
                             "(set DOCKER_HOST, or start dockerd)")
        return "docker", host
    if host is not None and has_image(host, image):
        return "docker", host
    return "local", None


def docker_master_config(data_dir: Path, host: str) -> Path:
    """A ``det_hub_config.py`` that adds the engine as the Docker agent of the ``notebooks``
    pool, beside the local agent that runs trials."""
    path = data_dir / "det_hub_config.up.py"
    write_private(
        path,
        "# Written by det-hub up: the local agent runs trials; notebook servers take the\n"
        "# slots of the Docker engine's agent, in the notebooks pool.\n"
        f"c.MasterApp.docker_agents = [{{'agent_id': 'docker', 'docker_host': {host!r}, "
        "'resource_pool': 'notebooks'}]\n")
    return path


def spawner_lines(spawner: str, image: str, homes: Path) -> list[str]:
    """The hub config's notebook servers: local processes, or DetSpawner's containers."""
    if spawner == "docker":
        return [
            "c.JupyterHub.spawner_class = 'det_hub.spawner.DetSpawner'",
            f"c.DockerSpawner.image = {image!r}",
            "c.DockerSpawner.remove = True",
            "c.DetSpawner.resource_pool = 'notebooks'",
            "c.Spawner.default_url = '/lab'",
        ]
    return [
        "c.JupyterHub.spawner_class = 'simple'",
        f"c.SimpleLocalProcessSpawner.home_dir_template = {str(homes / '{username}')!r}",
        # A new user's first server opens with the quickstart notebook and the examples.
        "from det_hub.hub.first_run import pre_spawn_hook",
        "c.Spawner.pre_spawn_hook = pre_spawn_hook",
        "c.Spawner.default_url = '/lab'",
        # This Python's, whatever the PATH of the hub's environment.
        f"c.Spawner.cmd = [{sys.executable!r}, '-m', 'jupyterhub.singleuser']",
        # det-hub and this Python first on the PATH of notebook terminals.
        f"c.Spawner.environment = {{'PATH': {str(Path(sys.executable).parent)!r} + ':' + "
        "os.environ.get('PATH', '')}",
        # Notebook servers run as the hub's own user, which may be root on a test machine.
        "c.Spawner.args = ['--allow-root'] if os.geteuid() == 0 else []",
    ]


def hub_config(args: argparse.Namespace, data_dir: Path, proxy: str,
               spawner: str = "local", master_config: str | None = None) -> str:
    """The text of the ``jupyterhub_config.py`` that ``det-hub up`` runs."""
    homes = data_dir / "users"
    hub_db = f"sqlite:///{data_dir / 'jupyterhub.sqlite'}"
    lines = [
        "# Written by det-hub up at every start; settings of your own go in",
        "# jupyterhub_config.local.py beside this file.",
        "import os",
        "from det_hub.hub import configure",
        "",
        f"c.JupyterHub.ip = {args.host!r}",
        f"c.JupyterHub.port = {args.port}",
        f"c.JupyterHub.hub_bind_url = 'http://127.0.0.1:{args.hub_port}'",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{args.proxy_api_port}'",
        f"c.ConfigurableHTTPProxy.command = [{proxy!r}]",
        # JupyterHub starts the proxy under a umask of its own (0o007); keep it private.
        f"c.ConfigurableHTTPProxy.command_umask = {PRIVATE_UMASK:#o}",
        f"c.JupyterHub.db_url = {hub_db!r}",
        f"c.JupyterHub.cookie_secret_file = {str(data_dir / 'jupyterhub_cookie_secret')!r}",
        f"c.JupyterHub.pid_file = {str(data_dir / 'jupyterhub.pid')!r}",
        "c.JupyterHub.authenticator_class = 'dummy'",
        f"c.DummyAuthenticator.password = {password(data_dir)!r}",
        "c.Authenticator.allow_all = True",
        "c.Authenticator.admin_users = {'admin'}",
        *spawner_lines(spawner, args.image, homes),
        f"configure(c, port={args.master_port}, data_dir={str(data_dir)!r}, "
        f"master_config={master_config or args.master_config!r}, "
        f"cull_idle={args.cull_idle!r})",
        f"_local = {str(data_dir / 'jupyterhub_config.local.py')!r}",
        "if os.path.exists(_local):",
        "    load_subconfig(_local)",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="det-hub up", description="Run JupyterHub with the det_hub master as its service, "
        "a local agent and an SQLite store, on this machine.")
    parser.add_argument("--data-dir", default=os.environ.get(DATA_DIR_ENV, DEFAULT_DATA_DIR),
                        help=f"where everything is kept (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--host", default="127.0.0.1", help="the hub's address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="the hub's port (8000)")
    parser.add_argument("--hub-port", type=int, default=8081,
                        help="the hub's internal API port (8081)")
    parser.add_argument("--proxy-api-port", type=int, default=8001,
                        help="configurable-http-proxy's API port (8001)")
    parser.add_argument("--master-port", type=int, default=8082,
                        help="the det_hub master's port, behind the hub (8082)")
    parser.add_argument("--spawner", choices=("auto", "local", "docker"), default="auto",
                        help="notebook servers as local processes, or in containers on "
                        "det_hub's slots (DetSpawner); auto: docker when an engine answers and "
                        "has the image")
    parser.add_argument("--image", default="det-hub:cpu",
                        help="the notebook servers' image with --spawner docker (det-hub:cpu)")
    parser.add_argument("--cull-idle", metavar="SECONDS", type=float,
                        help="stop notebook servers idle this long (jupyterhub-idle-culler)")
    parser.add_argument("--master-config", metavar="FILE",
                        help="the master's det_hub_config.py (agents, resource pools, ...)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything is made: the data directory's files, the hub's and the master's among
    # them, are created private (0600/0700); the hub, its proxy and the master inherit it.
    private_umask()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    proxy = find_proxy()
    if proxy is None:
        print("det-hub up: configurable-http-proxy is not installed; install it with npm "
              "(npm install -g configurable-http-proxy), or run make up, which installs it",
              file=sys.stderr)
        return 1
    data_dir = Path(args.data_dir).expanduser().resolve()
    tightened = make_private_dir(data_dir)
    if tightened:
        print(f"det_hub: data directory {data_dir} was readable by other accounts; made "
              f"private: {', '.join(tightened)}", file=sys.stderr, flush=True)
    spawner, engine = choose_spawner(args.spawner, args.image)
    master_config = None
    if engine is not None and args.master_config is None:
        master_config = str(docker_master_config(data_dir, engine))
    config = data_dir / "jupyterhub_config.py"
    write_private(config, hub_config(args, data_dir, proxy, spawner, master_config))
    where = f"containers of {args.image} on {engine}" if engine else "local processes"
    print(f"det_hub: notebook servers run as {where}", flush=True)
    print(f"det_hub: JupyterHub at http://{args.host}:{args.port}/ -- sign in as admin "
          f"(or any name) with the password in {data_dir / 'hub-password'}", flush=True)
    # A session of its own: Ctrl-C reaches the hub once, from here, and it stops its service
    # and notebook servers cleanly.
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)],
                            cwd=data_dir, start_new_session=True, umask=PRIVATE_UMASK)

    def stop(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return proc.wait()


__all__ = ["find_proxy", "hub_config", "main"]
