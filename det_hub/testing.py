"""A real ``det-hub master`` process, for tests and benchmarks.

``MasterProcess`` starts the master as users do (the ``det-hub`` console script) on 127.0.0.1
with its own data directory and database, and offers small helpers to call its API, wait for
states and run the CLI against it. ``jupyterlab_server`` starts a JupyterLab server whose
kernels and server extension reach a master, for the browser tests and benchmarks.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests
import yaml
from sqlalchemy.engine import make_url

from det_hub.env_names import MASTER_ENV, TOKEN_ENV, TRIAL_ID_ENV
from det_hub.ports import free_port as _free_port

DET_HUB = str(Path(sys.executable).parent / "det-hub")
TERMINAL = ("COMPLETED", "CANCELED", "ERROR")


def free_port() -> int:
    """A free TCP port of 127.0.0.1."""
    return _free_port("127.0.0.1")


def reap_tasks(under: Path) -> None:
    """Kill every local task whose runner works under ``under``: tasks outlive a stopped
    master by design, and a finished test must not leave any behind."""
    marker = str(under).encode()
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes()
        except OSError:
            continue
        if b"local_runner" in cmdline and marker in cmdline:
            with contextlib.suppress(OSError):
                os.killpg(int(pid_dir.name), signal.SIGKILL)


def kill_trial_processes(trial_id: int) -> int:
    """SIGKILL every process of a trial, as the kernel's OOM killer would; answers how many
    there were. A trial's process is found by ``DET_HUB_TRIAL_ID`` in its environment, or,
    forked from a zygote (whose environment it started with), by the trial named in the
    ``cluster_info.json`` beside its working directory."""
    marker = f"{TRIAL_ID_ENV}={trial_id}".encode()
    killed = 0
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            if marker in (pid_dir / "environ").read_bytes().split(b"\0") or \
                    _forked_trial(pid_dir) == trial_id:
                os.kill(int(pid_dir.name), signal.SIGKILL)
                killed += 1
        except OSError:
            continue
    return killed


def _forked_trial(pid_dir: Path) -> int | None:
    """The trial a process forked from a zygote runs: its working directory is ``run/`` in
    the task's own directory, with the task's ``cluster_info.json`` beside it."""
    cwd = Path(os.readlink(pid_dir / "cwd"))
    if cwd.name != "run" or cwd.parent.parent.name != "tasks":
        return None
    try:
        raw = json.loads((cwd.parent / "cluster_info.json").read_text())
    except (OSError, ValueError):
        return None
    trial = raw.get("trial") if isinstance(raw, dict) else None
    return trial.get("trial_id") if isinstance(trial, dict) else None


class MasterProcess:
    """``det-hub master`` on 127.0.0.1 with its own data directory and database.

    Args:
        data_dir: the master's ``--data-dir``; its log goes to ``data_dir/master.log``.
        db_url: the master's ``--db``.
        extra_args: more ``det-hub master`` arguments, e.g. ``["--cpu-slot-cores=2"]``.
        prefix: a command the master runs under (one that switches to another account).
        env: the master's environment (default: this process's).
    """

    def __init__(self, data_dir: Path, db_url: str, extra_args: Sequence[str] = (), *,
                 prefix: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.db_url = db_url
        self.extra_args = list(extra_args)
        self.prefix = list(prefix)
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.log_path = data_dir / "master.log"
        #: The context :meth:`create` sends when given none.
        self.default_context: Path | None = None
        #: Where :meth:`cli` runs the command.
        self.cli_cwd: Path | None = None

    def start(self) -> None:
        # Private, as the master keeps its data directory: the log is the operator's.
        self.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
                        "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, DET_HUB, "master", "--data-dir", str(self.data_dir), "--db",
             self.db_url, "--port", str(self.port), "--MasterApp.kill_grace_seconds=3",
             *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if requests.get(self.url + "/api/v1/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("the master did not come up:\n" + self.log_path.read_text())
        self.token = (self.data_dir / "admin-token").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the master with ``sig`` and wait for it; one that does not stop within 30 s
        is killed and fails the caller, with its threads' stacks (SIGUSR1) from its log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR1)
                time.sleep(1)
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise AssertionError(
                    f"the master did not stop within 30 s of {signal.Signals(sig).name}; its "
                    f"log, with its threads' stacks:\n{self.log_path.read_text()[-12000:]}"
                ) from None
        self.proc = None

    # --- HTTP ---------------------------------------------------------------------------
    def api(self, method: str, path: str, token: str | None = None,
            **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return requests.request(method, f"{self.url}/api/v1{path}", headers=headers,
                                timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        r = self.api("GET", path, **kwargs)
        assert r.status_code == 200, r.text
        return r.json()

    def create(self, config: dict[str, Any] | str, context: Path | None = None,
               activate: bool = True) -> requests.Response:
        """POST an experiment; ``context`` defaults to :attr:`default_context`."""
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        context = context or self.default_context
        return self.api("POST", "/experiments", json={
            "config": text, "context": pack(context) if context else None,
            "activate": activate})

    @contextlib.contextmanager
    def idle_trial(self, name: str) -> Iterator[tuple[int, int]]:
        """An experiment of one trial that sleeps and reports nothing, for a test that reports
        for it: ``(experiment id, trial id)`` once the trial exists; the experiment is killed
        at the end."""
        eid = self.create_ok({
            "name": name, "entrypoint": "sleep 300", "max_restarts": 0,
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}})
        try:
            yield eid, self.wait(lambda: self.trials(eid))[0]["id"]
        finally:
            self.api("POST", f"/experiments/{eid}/kill")

    def create_ok(self, config: dict[str, Any], **kwargs: Any) -> int:
        r = self.create(config, **kwargs)
        assert r.status_code == 201, r.text
        return int(r.json()["experiment"]["id"])

    def experiment(self, eid: int) -> dict[str, Any]:
        return self.get(f"/experiments/{eid}")["experiment"]

    def trials(self, eid: int) -> list[dict[str, Any]]:
        return self.get(f"/experiments/{eid}/trials")["trials"]

    def get_logs(self, trial_id: int) -> list[dict[str, Any]]:
        r = self.api("GET", f"/trials/{trial_id}/logs")
        return [json.loads(line) for line in r.text.splitlines()]

    def logs(self, trial_id: int) -> list[str]:
        return [line["message"] for line in self.get_logs(trial_id)]

    def wait(self, what: Callable[[], Any], timeout: float = 60.0, every: float = 0.1) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = what()
            if value:
                return value
            time.sleep(every)
        raise AssertionError(f"timed out waiting; master log:\n{self.log_path.read_text()[-3000:]}")

    def wait_state(self, eid: int, states: tuple[str, ...] = TERMINAL,
                   timeout: float = 90.0) -> dict[str, Any]:
        return self.wait(lambda: (e := self.experiment(eid))["state"] in states and e,
                         timeout)

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, MASTER_ENV: self.url, TOKEN_ENV: self.token}
        done = subprocess.run([DET_HUB, *args], capture_output=True, text=True, env=env,
                              timeout=180, cwd=self.cli_cwd)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done


#: Where ``det-hub up`` serves the master, below the hub's URL.
SERVICE = "/services/det-hub"


class HubProcess:
    """``det-hub up`` on free ports of 127.0.0.1, with its own data directory: JupyterHub with
    the master as its service, for tests and benchmarks. ``extra_args`` go to ``det-hub up``.
    """

    def __init__(self, data_dir: Path, extra_args: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = f"{self.url}{SERVICE}/api/v1"
        self.log = data_dir / "up.log"
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        #: The hub's internal API, the proxy's API and the master.
        self.internal_ports = [free_port() for _ in range(3)]
        ports = [str(p) for p in self.internal_ports]
        with os.fdopen(os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                       "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "det_hub.cli.main", "up", "--data-dir", str(data_dir),
                 "--port", str(self.port), "--hub-port", ports[0], "--proxy-api-port",
                 ports[1], "--master-port", ports[2], "--spawner", "local",
                 *(extra_args or [])],
                stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parent.parent)
        self.wait(lambda: self._answers(f"{self.api}/health"), 90)
        self.password = (data_dir / "hub-password").read_text().strip()

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait(self, what: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"det-hub up exited:\n{self.log.read_text()[-4000:]}")
            value = what()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out; det-hub up log:\n{self.log.read_text()[-4000:]}")

    def login(self, name: str) -> requests.Session:
        """A browser session signed in to the hub as ``name``."""
        browser = requests.Session()
        browser.get(f"{self.url}/hub/login", timeout=10)
        done = browser.post(f"{self.url}/hub/login", timeout=30, data={
            "username": name, "password": self.password,
            "_xsrf": browser.cookies.get("_xsrf", path="/hub/")}, allow_redirects=False)
        assert done.status_code == 302, done.text[:500]
        return browser

    def token(self, name: str) -> str:
        """A hub API token of ``name``'s, made as a user makes one on the hub's token page."""
        browser = self.login(name)
        made = browser.post(f"{self.url}/hub/api/users/{name}/tokens", timeout=10,
                            json={"note": "test"}, headers={
                                "X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/")})
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    def call(self, method: str, path: str, token: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{self.api}{path}", timeout=30,
                                headers={"Authorization": f"token {token}"}, **kwargs)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)

    def listening(self) -> list[int]:
        """Which of its ports something still listens on."""
        taken = []
        for port in (self.port, *self.internal_ports):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    taken.append(port)
        return taken


@contextlib.contextmanager
def jupyterlab_server(master_url: str, master_token: str, tmp_path: Path, work: Path,
                      token: str, args: Sequence[str] = (),
                      env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 serving ``work``, whose kernels (and det_hub's server
    extension) reach the master at ``master_url`` with ``master_token``, with its settings
    and state under ``tmp_path``; yields its base URL once it answers. Its login token is
    ``token``, and the page offers ``window.jupyterapp`` to scripts that drive it.

    Args:
        args: More ``jupyter lab`` options.
        env: More environment variables.
    """
    # No "would you like news?" prompt over the screenshots.
    notifications = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notifications.mkdir(parents=True)
    (notifications / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false"}))
    environment = {**os.environ, MASTER_ENV: master_url, TOKEN_ENV: master_token,
                   # The server's own settings and state, away from the user's.
                   "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
                   "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"), **(env or {})}
    port = free_port()
    log_path = tmp_path / "jupyterlab.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", f"--ServerApp.token={token}",
             "--ServerApp.open_browser=False", f"--ServerApp.root_dir={work}",
             "--ServerApp.allow_root=True",
             # `window.jupyterapp`, so the browser runs JupyterLab's own commands.
             "--LabApp.expose_app_in_browser=True",
             f"--LabApp.user_settings_dir={tmp_path / 'lab-settings'}",
             f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}",
             "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{url}/api/status", params={"token": token},
                                timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "JupyterLab did not answer:\n" + \
                log_path.read_text()
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def targz(files: dict[str, str]) -> bytes:
    """A gzipped tar archive of ``files`` (name -> text): a context archive made in place."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pack(directory: Path) -> str:
    """A directory as the base64 tar.gz the API takes for a context."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            if "__pycache__" not in path.parts:
                tar.add(path, str(path.relative_to(directory)), recursive=False)
    return base64.b64encode(buf.getvalue()).decode()


@contextlib.contextmanager
def postgres_database(server_url: str, prefix: str = "dethub_t") -> Iterator[str]:
    """A new, empty database on the PostgreSQL server of ``server_url``; dropped afterwards.

    Yields the new database's URL (same user, host and driver as ``server_url``).
    """
    import psycopg
    from psycopg import sql

    base = make_url(server_url)
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            # FORCE: a failed test may leave connections open (PostgreSQL 13+).
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


def container_python_mounts() -> list[dict[str, Any]]:
    """Read-only bind mounts that make this Python, with det_hub and its environment,
    work at the same paths inside a container of a bare Debian image.

    Test images have no det_hub of their own; these mounts give it to them: det_hub's source,
    the environment (``sys.prefix``), and the interpreter the environment was made from when it
    is not the system's.
    """
    paths = [Path(__file__).resolve().parent, Path(sys.prefix)]
    base = Path(sys.base_prefix)
    if base != Path("/usr"):  # the image has Debian's own /usr/bin/python3.11
        paths.append(base)
    return [{"host_path": str(p), "container_path": str(p), "read_only": True} for p in paths]


def write_docker_config(path: Path, hosts: Sequence[str], image: str,
                        agent_ids: Sequence[str], extra: Sequence[str] = ()) -> Path:
    """Write a ``det_hub_config.py`` whose agents are the Docker engines ``hosts`` (no local
    agent), named ``agent_ids``, running ``image`` with this Python bind-mounted (see
    :func:`container_python_mounts`), with two CPU slots per engine on a host of two cores or
    more. ``extra`` lines are added at the end."""
    cores = max(1, (os.cpu_count() or 2) // 2)
    agents = [{"agent_id": a, "docker_host": h} for a, h in zip(agent_ids, hosts, strict=True)]
    path.write_text("\n".join([
        "c.MasterApp.local_agent = False",
        f"c.MasterApp.docker_agents = {agents!r}",
        f"c.DockerAgent.default_image = {{'cpu': {image!r}, 'cuda': {image!r}}}",
        f"c.DockerAgent.python = {sys.executable!r}",
        f"c.DockerAgent.mounts = {container_python_mounts()!r}",
        "c.DockerAgent.pull_images = False",
        f"c.DockerAgent.cpu_slot_cores = {cores}",
        *extra,
        "",
    ]))
    return path



def detspawner_config(image: str, name_prefix: str) -> str:
    """Lines for a hub's ``jupyterhub_config.local.py`` that run notebook servers through
    DetSpawner in containers of a bare test ``image``, named ``<name_prefix><user>``, with this
    Python bind-mounted (see :func:`container_python_mounts`)."""
    mounts = [{"type": "bind", "source": m["host_path"], "target": m["container_path"],
               "read_only": True} for m in container_python_mounts()]
    return "\n".join([
        'c.JupyterHub.spawner_class = "det_hub.spawner.DetSpawner"',
        f"c.DockerSpawner.image = {image!r}",
        "c.DockerSpawner.remove = True",
        f'c.DockerSpawner.name_template = "{name_prefix}{{username}}"',
        f'c.DockerSpawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser", '
        '"--allow-root"]',
        f"c.DockerSpawner.mounts = {mounts!r}",
        "",
    ])

def remove_agent_containers(hosts: Sequence[str], agent_ids: Sequence[str]) -> None:
    """Remove the containers these agents left on the engines ``hosts``: tasks outlive the
    master by design, so a test or bench that stops midway leaves them running."""
    from docker.client import DockerClient

    for host in hosts:
        with contextlib.closing(DockerClient(base_url=host, version="auto", timeout=10)) as c:
            for agent_id in agent_ids:
                for found in c.api.containers(
                        all=True, filters={"label": f"det_hub.agent={agent_id}"}):
                    c.api.remove_container(found["Id"], force=True)


def required_env(*names: str) -> list[str]:
    """The values of environment variables a test needs, which ``scripts/test-services.sh
    start`` sets. Without them the test is skipped, except in CI (``CI=true``), where their
    absence fails it: CI starts every service."""
    import pytest

    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        message = (f"{', '.join(missing)} not set: start the test services with "
                   "scripts/test-services.sh start")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return [os.environ[n] for n in names]
