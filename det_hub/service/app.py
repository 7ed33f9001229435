"""``det-hub master``: the master as a process (REST API, store, agents).

Settings are traitlets: give them on the command line (``--port 8081``,
``--LocalAgent.cpu_slot_cores=2``) or in a ``det_hub_config.py`` file
(``c.MasterApp.port = 8081``); ``det-hub master --help-all`` lists every one.

A cluster of Docker hosts in ``det_hub_config.py``::

    c.MasterApp.local_agent = False
    c.MasterApp.docker_agents = [
        {"agent_id": "gpu-a", "docker_host": "tcp://10.0.0.5:2376", "resource_pool": "gpu",
         "tls_ca_cert": "/etc/det_hub/ca.pem", "tls_client_cert": "/etc/det_hub/cert.pem",
         "tls_client_key": "/etc/det_hub/key.pem", "address": "10.0.0.5"},
        {"agent_id": "cpu-a", "docker_host": "unix:///var/run/docker.sock"},
    ]
    c.MasterApp.resource_pools = [
        {"name": "gpu", "scheduler": {"type": "priority", "preemption": True},
         "preemption_timeout": 600},
        {"name": "default", "scheduler": {"type": "fair_share"}},
    ]

A pool backed by a Slurm partition (see docs/slurm.md): its ``resource_manager`` makes one
SlurmAgent of the pool's name, whose settings are the other keys (c.SlurmAgent for all)::

    c.MasterApp.resource_pools = [
        {"name": "hpc", "resource_manager": {"type": "slurm", "partition": "gpu",
         "slot_type": "cuda", "job_root": "/shared/det_hub/jobs", "account": "ml"}},
    ]
"""

from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import logging
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tornado.web
from tornado.httpclient import AsyncHTTPClient
from traitlets import Bool, Dict, Float, Integer, List, TraitError, Unicode, default
from traitlets.config import Application, Configurable

from det_hub import __version__
from det_hub.agents import Agent
from det_hub.agents.local import LocalAgent
from det_hub.archive import ContextLimits
from det_hub.config import ConfigLimits
from det_hub.config.limited_yaml import MAX_DEPTH_CEILING
from det_hub.defaults import DEFAULT_DATA_DIR
from det_hub.service.access_log import log_request
from det_hub.service.body_limit import BodyLimitedApplication
from det_hub.service.cluster import PoolSettings
from det_hub.service.data_dir import file_mode, make_private_dir, private_umask, write_private
from det_hub.service.handlers import api_routes
from det_hub.service.hub import HubIdentity
from det_hub.service.ingest import IngestWorkers, default_worker_count
from det_hub.service.master import Master
from det_hub.service.pending import log_tasks
from det_hub.service.proxy import proxy_routes
from det_hub.service.unix_accounts import DEFAULT_TASK_USER, task_account
from det_hub.service.webhooks import WebhookManager
from det_hub.store import Store

API_PREFIX = "/api/v1"

#: The default of ``MasterApp.request_max_body_bytes``: a base64 context of 96 MiB is 128 MiB
#: on the wire; this leaves room for the config.
DEFAULT_MAX_BODY_BYTES = 160 * 1024 * 1024

#: Seconds after which a master still stopping logs the tasks its event loop waits in.
SLOW_STOP_SECONDS = 15


def make_app(master: Master, *, cookie_secret: bytes | None = None,
             max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> tornado.web.Application:
    """The tornado application: the REST API under ``<base URL>api/v1``, the proxy to tasks
    under ``<base URL>proxy/``, and behind a hub its OAuth callback and pages. A request whose
    body is over ``max_body_bytes`` is answered 413 (serve it with an HTTP server whose
    ``max_body_size`` is at least that)."""
    base = master.base_url
    api = base.rstrip("/") + API_PREFIX
    handlers: list[Any] = [(api + route[0], *route[1:]) for route in api_routes]
    handlers.extend(proxy_routes(base))
    # The proxy's requests to notebooks and TensorBoards: a browser opens many at once.
    AsyncHTTPClient.configure(None, max_clients=256)
    if master.hub is not None:
        from det_hub.service.hub import hub_handlers
        from det_hub.service.pages import page_handlers

        handlers.extend(hub_handlers(base))
        handlers.extend(page_handlers(base))
    else:
        handlers.append((base, tornado.web.RedirectHandler, {"url": api + "/health"}))
    return BodyLimitedApplication(handlers, master=master, api_routes=api_routes,
                        max_body_bytes=max_body_bytes, log_function=log_request,
                        cookie_secret=cookie_secret or secrets.token_bytes(32))


def _agent_classes() -> list[type[Configurable]]:
    """The agent classes whose settings `--help-all` lists: Docker's when its SDK is there."""
    from det_hub.agents.slurm import SlurmAgent

    try:
        from det_hub.agents.docker import DockerAgent
    except ImportError:
        return [LocalAgent, SlurmAgent]
    return [LocalAgent, DockerAgent, SlurmAgent]


class MasterApp(Application):
    name = "det-hub master"
    description = "The det_hub master: REST API, experiment store and the local agent."
    version = __version__

    data_dir = Unicode(
        DEFAULT_DATA_DIR, config=True,
        help="Holds the SQLite store, the admin token, default checkpoint storage and the "
             "local agent's task directories.")
    db_url = Unicode(
        "", config=True,
        help="SQLAlchemy URL of the store, e.g. postgresql+psycopg://user@host/db. "
             "Default: an SQLite file in the data directory.")
    host = Unicode(config=True, help="Address the REST API listens on (default 127.0.0.1, or "
                   "where JupyterHub expects its service).")
    port = Integer(config=True, help="Port the REST API listens on (default 8080, or where "
                   "JupyterHub expects its service).")
    master_url = Unicode(
        "", config=True,
        help="The URL training code uses to reach the master. Default: http://HOST:PORT "
             "(127.0.0.1 when HOST is 0.0.0.0).")
    config_file = Unicode("det_hub_config.py", config=True, help="The config file to load.")
    kill_grace_seconds = Float(
        30.0, config=True,
        help="After a kill, how long a trial has to exit on SIGTERM before SIGKILL.")
    local_agent = Bool(
        True, config=True,
        help="Run tasks as processes on this host (the LocalAgent), in the default pool.")
    docker_agents = List(
        Dict(), config=True,
        help="""Docker hosts that run tasks in containers, one DockerAgent each: a dict of
        DockerAgent settings per host, e.g. {"agent_id": "gpu-a", "docker_host":
        "tcp://10.0.0.5:2376", "resource_pool": "gpu"}. Settings left out come from
        c.DockerAgent.""")
    resource_pools = List(
        Dict(), config=True,
        help="""Resource pools and their scheduling: {"name": "gpu", "description": "...",
        "scheduler": {"type": "priority" | "fair_share", "preemption": true,
        "fitting_policy": "best" | "worst"}, "preemption_timeout": 3600}. Pools that agents
        name but that are not listed get the defaults (priority, no preemption, best fit).
        A pool on a Slurm partition adds "resource_manager": {"type": "slurm", ...SlurmAgent
        settings} (partition, account, qos, slot_type, gres, job_root, ...): its work is
        submitted to Slurm by a SlurmAgent named after the pool.""")
    base_url = Unicode(
        config=True,
        help="""The path the master serves under: "/", or behind JupyterHub the service's
        prefix (default: $JUPYTERHUB_SERVICE_PREFIX, else "/").""")
    hub = Bool(
        config=True,
        help="""Take hub tokens and hub sign-ins (JupyterHub runs the master as a service).
        Default: whether JupyterHub's service environment ($JUPYTERHUB_API_TOKEN) is set.""")
    agent_timeout = Float(
        30.0, config=True,
        help="""Seconds an agent may go unanswered before the trials on it are given up for
        lost and restart elsewhere from their latest checkpoints.""")
    context_max_bytes = Integer(
        ContextLimits.max_bytes, min=1, config=True,
        help="""The largest total size, in bytes, of the files in an uploaded context (an
        experiment's or task's model directory) once unpacked; larger ones are refused with
        413. Uploads are also bounded by request_max_body_bytes.""")
    context_max_members = Integer(
        ContextLimits.max_members, min=1, config=True,
        help="""The most members (files, directories, links) an uploaded context may hold;
        reading stops, and the upload is refused with 413, past this many.""")
    context_max_path_bytes = Integer(
        ContextLimits.max_path_bytes, min=1, max=4000, config=True,
        help="""The longest path, in bytes, of a member of an uploaded context, as written
        and once "." and ".." are resolved (and of a link target); longer ones are refused
        with 400. Keep it well below PATH_MAX (4096).""")
    request_max_body_bytes = Integer(
        DEFAULT_MAX_BODY_BYTES, min=1, config=True,
        help="""The largest request body, in bytes, the REST API reads; larger ones are
        refused with 413. It must leave room for an uploaded context, which travels base64
        encoded (a third larger) in the body of an experiment or task.""")
    config_max_bytes = Integer(
        ConfigLimits.max_bytes, min=1, config=True,
        help="""The largest config (of an experiment or task, or the overrides of a continued
        experiment), in bytes of YAML text, and in characters of its keys and values once its
        YAML aliases are expanded; larger ones are refused with 413.""")
    config_max_alias_factor = Integer(
        ConfigLimits.max_alias_factor, min=1, config=True,
        help="""How many times more nodes a config may have once its YAML aliases are
        expanded than were written (an alias written counts as one); more is refused with
        400, so that an alias bomb ("billion laughs") is refused before it expands.""")
    config_max_depth = Integer(
        ConfigLimits.max_depth, min=1, max=MAX_DEPTH_CEILING, config=True,
        help=f"""The most levels lists and mappings may nest in a config (the top-level
        mapping is level 1); deeper ones are refused with 400. At most
        {MAX_DEPTH_CEILING}.""")
    task_user = Unicode(
        DEFAULT_TASK_USER, config=True,
        help="""The Unix account (name or uid[:gid]) that runs the tasks of users linked to no
        account of their own (`det-hub user link-with-agent-user`): in Docker containers, and
        on the local agent when the master runs as root. Never root.""")

    ingest_workers = Integer(
        -1, min=-1, config=True,
        help="""Processes that store training code's metric reports beside the master, so
        that ingest uses every core (PostgreSQL only): -1 for one per core, at most 4, on
        PostgreSQL and none on SQLite; 0 for none (the master stores every report).""")
    ingest_port = Integer(
        0, min=0, max=65535, config=True,
        help="""The port the ingest workers serve, on MasterApp.host (0: a free port, picked
        at start).""")
    ingest_url = Unicode(
        config=True,
        help="""The URL trials reach the ingest workers at (default: the master URL's
        scheme and host with the ingest port). Needed when master_url goes through a proxy
        with a path; without it the workers do not start.""")

    def ingest_settings(self, dialect: str) -> int:
        """How many ingest workers to run on a ``dialect`` store.

        Raises:
            ValueError: Workers asked for on SQLite.
        """
        if self.ingest_workers == -1:
            return default_worker_count() if dialect == "postgresql" else 0
        if self.ingest_workers and dialect != "postgresql":
            raise ValueError(f"MasterApp.ingest_workers = {self.ingest_workers} needs "
                             f"PostgreSQL; the store is {dialect} (set it to 0 or -1)")
        return int(self.ingest_workers)

    def effective_ingest_url(self, port: int) -> str | None:
        """Where trials reach the ingest workers serving ``port``: ``ingest_url``, else the
        master URL's scheme and host with ``port``; None when that cannot be told (the master
        URL's path is not the master's own base URL: a proxy is in front of it)."""
        if self.ingest_url:
            return self.ingest_url.rstrip("/")
        parts = urlsplit(self.effective_master_url())
        if parts.path.rstrip("/") != self.normal_base_url.rstrip("/") or not parts.hostname:
            return None
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"{parts.scheme}://{host}:{port}"

    async def start_ingest(self, master: Master, store: Store) -> IngestWorkers | None:
        """Start the ingest workers the settings ask for, the master hearing what they store
        before they take a report; None when there are none."""
        try:
            count = self.ingest_settings(store.dialect)
        except ValueError as e:
            raise SystemExit(f"det-hub master: {e}") from None
        if not count:
            return None
        if self.effective_ingest_url(self.ingest_port or 1) is None:
            self.log.warning("no ingest workers: trials could not be told where they are "
                             "(the master URL %s goes through a proxy's path); set "
                             "MasterApp.ingest_url", self.effective_master_url())
            return None
        await master.hear_stored_metrics()
        workers = IngestWorkers(store.url, count=count, host=self.host, port=self.ingest_port,
                                max_body_bytes=self.request_max_body_bytes)
        # The port served last time, which trials still running were told.
        kept = self.data_path / "ingest-port"
        try:
            preferred = int(kept.read_text()) if kept.exists() else 0
        except ValueError:
            preferred = 0
        try:
            await workers.start(preferred=preferred)
        except (OSError, RuntimeError) as e:
            await workers.stop()
            raise SystemExit(f"det-hub master: the ingest workers did not start on "
                             f"{self.host}:{self.ingest_port or preferred}: {e}") from None
        write_private(kept, str(workers.port))
        master.launcher.ingest_url = self.effective_ingest_url(workers.port)
        self.log.info("%d ingest workers at %s", count, master.launcher.ingest_url)
        return workers

    def task_account(self) -> tuple[int, int]:
        """``task_user`` as ``(uid, gid)``.

        Raises:
            ValueError: no such account, or it is root.
        """
        try:
            return task_account(self.task_user)
        except ValueError as e:
            raise ValueError(f"MasterApp.task_user: {e}") from None

    def private_paths(self) -> list[Path]:
        """What no task may see besides the data directory: the config file and the Docker
        hosts' TLS keys."""
        paths = [Path(self.config_file).expanduser().resolve()]
        for entry in self.docker_agents:
            paths += [Path(entry[k]) for k in ("tls_ca_cert", "tls_client_cert",
                                               "tls_client_key") if entry.get(k)]
        return [p for p in paths if p.exists()]

    @default("log_level")
    def _default_log_level(self) -> int:
        return logging.INFO

    @default("base_url")
    def _default_base_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/"

    @default("hub")
    def _default_hub(self) -> bool:
        return bool(os.environ.get("JUPYTERHUB_API_TOKEN"))

    @default("host")
    def _default_host(self) -> str:
        return self._service_address()[0] or "127.0.0.1"

    @default("port")
    def _default_port(self) -> int:
        return self._service_address()[1] or 8080

    @staticmethod
    def _service_address() -> tuple[str, int]:
        """Where JupyterHub expects its service: ``$JUPYTERHUB_SERVICE_URL``."""
        url = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL", ""))
        return url.hostname or "", url.port or 0

    aliases = {
        "data-dir": "MasterApp.data_dir",
        "db": "MasterApp.db_url",
        "host": "MasterApp.host",
        "port": "MasterApp.port",
        "master-url": "MasterApp.master_url",
        "config": "MasterApp.config_file",
        "cpu-slot-cores": "LocalAgent.cpu_slot_cores",
        "log-level": "Application.log_level",
    }
    classes = [*_agent_classes(), HubIdentity, WebhookManager]

    def make_agents(self, work_root: Path) -> list[Agent]:
        """The agents the settings describe.

        Raises:
            ValueError: A setting names no agent trait, or no agent is configured.
        """
        agents: list[Agent] = []
        if self.local_agent:
            agents.append(LocalAgent(work_root=work_root, parent=self, private_paths=[
                self.data_path, *self.private_paths()]))
        if self.docker_agents:
            from det_hub.agents.docker import DockerAgent  # the docker SDK is an extra

            for i, entry in enumerate(self.docker_agents):
                unknown = sorted(set(entry) - set(DockerAgent.class_trait_names(config=True)))
                if unknown:
                    raise ValueError(f"docker_agents[{i}]: unknown setting(s) "
                                     f"{', '.join(unknown)}")
                agents.append(DockerAgent(parent=self, **entry))
        agents.extend(self.make_slurm_agents())
        if not agents:
            raise ValueError("no agents: set local_agent = True, list docker_agents, or give "
                             "a resource pool a resource_manager")
        return agents

    def make_slurm_agents(self) -> list[Agent]:
        """A SlurmAgent per resource pool whose ``resource_manager`` is Slurm.

        Raises:
            ValueError: A resource manager of another type, or a setting no SlurmAgent has.
        """
        from det_hub.agents.slurm import SlurmAgent

        agents: list[Agent] = []
        for i, entry in enumerate(self.resource_pools):
            manager = entry.get("resource_manager")
            if manager is None:
                continue
            where = f"resource_pools[{i}].resource_manager"
            if not isinstance(manager, dict) or manager.get("type") != "slurm":
                raise ValueError(f"{where}: must be {{\"type\": \"slurm\", ...}}: Slurm is "
                                 "the resource manager det_hub knows besides its own agents")
            settings = {k: v for k, v in manager.items() if k != "type"}
            unknown = sorted(set(settings) - set(SlurmAgent.class_trait_names(config=True)))
            if unknown:
                raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}")
            settings.setdefault("agent_id", entry.get("name") or f"slurm-{i}")
            settings["resource_pool"] = entry.get("name", "")
            agents.append(SlurmAgent(
                self.data_path / "slurm" / settings["agent_id"], parent=self,
                private_paths=[self.data_path, *self.private_paths()], **settings))
        return agents

    def make_pools(self) -> list[PoolSettings]:
        """The resource pools the settings describe.

        Raises:
            ValueError: A pool entry has no name or an unknown key.
        """
        pools = []
        # A pool's resource manager makes its agent (make_slurm_agents), not its settings.
        fields = {f.name for f in dataclasses.fields(PoolSettings)} | {"resource_manager"}
        for i, entry in enumerate(self.resource_pools):
            unknown = sorted(set(entry) - fields)
            if unknown or not entry.get("name"):
                raise ValueError(f"resource_pools[{i}]: " + (
                    f"unknown key(s) {', '.join(unknown)}" if unknown else "needs a name"))
            pools.append(PoolSettings(**{k: v for k, v in entry.items()
                                         if k != "resource_manager"}))
        return pools

    def initialize(self, argv: list[str] | None = None) -> None:
        super().initialize(argv)
        config_path = Path(self.config_file).expanduser()
        if config_path.exists():
            self.load_config_file(str(config_path))
            # The command line wins over the file.
            self.update_config(self.cli_config)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(levelname)1.1s %(asctime)s %(name)s] "
                                               "%(message)s", "%H:%M:%S"))
        for name in ("det_hub", "tornado"):
            logger = logging.getLogger(name)
            logger.setLevel(int(self.log_level))  # type: ignore[call-overload]
            if not logger.handlers:
                logger.addHandler(handler)
        # Every request at INFO drowns the useful lines; failures still show.
        logging.getLogger("tornado.access").setLevel(logging.WARNING)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    def effective_master_url(self) -> str:
        if self.master_url:
            return self.master_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{self.port}{self.normal_base_url.rstrip('/')}"

    @property
    def normal_base_url(self) -> str:
        """The base URL with one slash at each end."""
        return "/" + self.base_url.strip("/") + "/" if self.base_url.strip("/") else "/"

    def cookie_secret(self) -> bytes:
        """The key of the service's cookies, kept in the data directory so that sign-ins
        outlive a restart."""
        path = self.data_path / "cookie-secret"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        return path.read_bytes()

    def make_webhooks(self, store: Store) -> WebhookManager:
        """The webhook manager, signing with ``c.WebhookManager.signing_key`` or, when that
        is empty, with a key kept in the data directory so that receivers' copy of it
        outlives a restart."""
        webhooks = WebhookManager(store, parent=self)
        if not self.config.WebhookManager.get("signing_key"):
            path = self.data_path / "webhook-signing-key"
            if not path.exists():
                write_private(path, secrets.token_hex(32))
            webhooks.signing_key = path.read_text().strip()
        return webhooks

    def config_limits(self) -> ConfigLimits:
        """The bounds of the configs users send, from the settings (named in refusals)."""
        return ConfigLimits(
            max_bytes=self.config_max_bytes, max_alias_factor=self.config_max_alias_factor,
            max_depth=self.config_max_depth,
            settings={"max_bytes": "MasterApp.config_max_bytes",
                      "max_alias_factor": "MasterApp.config_max_alias_factor",
                      "max_depth": "MasterApp.config_max_depth"})

    async def serve(self, ready: asyncio.Event | None = None) -> None:
        """Run until SIGINT or SIGTERM. Trials keep running; a restarted master adopts them."""
        data = self.data_path
        make_private_dir(data, self.log)
        try:
            agents = self.make_agents(data / "work")
            pools = self.make_pools()
        except (ValueError, TraitError) as e:
            raise SystemExit(f"det-hub master: bad cluster settings: {e}") from None
        url = self.db_url or f"sqlite:///{data / 'det_hub.db'}"
        store = await Store.open(url)
        try:
            hub = None
            if self.hub:
                hub = HubIdentity(parent=self)
            master = Master(store, agents, master_url=self.effective_master_url(),
                            data_dir=data, pools=pools,
                            kill_grace_seconds=self.kill_grace_seconds,
                            agent_timeout=self.agent_timeout, base_url=self.normal_base_url,
                            hub=hub, task_account=self.task_account(),
                            private_paths=self.private_paths(),
                            webhooks=self.make_webhooks(store),
                            config_limits=self.config_limits(),
                            context_limits=ContextLimits(
                                max_bytes=self.context_max_bytes,
                                max_members=self.context_max_members,
                                max_path_bytes=self.context_max_path_bytes,
                                settings={"max_bytes": "MasterApp.context_max_bytes",
                                          "max_members": "MasterApp.context_max_members",
                                          "max_path_bytes":
                                              "MasterApp.context_max_path_bytes"}))
        except ValueError as e:
            await store.close()
            raise SystemExit(f"det-hub master: bad cluster settings: {e}") from None
        token_path = data / "admin-token"
        await master.users.ensure_admin_token(token_path)
        # Never the token itself: logs are read by more people than the token is meant for.
        self.log.info("admin token in %s (mode %s)", token_path, file_mode(token_path))
        await master.start()
        workers = await self.start_ingest(master, store)
        limit = self.request_max_body_bytes
        # The server's own bound is the same; the application lifts it for a body it refuses,
        # to drop it and answer 413 (see make_app).
        server = make_app(master, cookie_secret=self.cookie_secret(),
                          max_body_bytes=limit).listen(
            self.port, self.host, xheaders=True, max_body_size=limit)
        slots = "; ".join(f"{a.agent_id} ({a.kind}, pool {a.resource_pool}): "
                          + ", ".join(f"{s.kind}:{s.id}" for s in a.slots) for a in agents)
        self.log.info("det_hub master %s at %s (store: %s; agents: %s)", __version__,
                      self.effective_master_url(), store.dialect, slots)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready.set()
        await stop.wait()
        self.log.info("stopping; running trials keep running and are adopted at next start")
        # A stop that hangs shows on what: no thread's stack holds a suspended coroutine.
        slow = loop.call_later(SLOW_STOP_SECONDS, log_tasks, self.log,
                               f"still stopping after {SLOW_STOP_SECONDS} s")
        try:
            # Refuse new work, then drop kept-alive connections so that no request reaches a
            # closed store; training code retries until the next master answers.
            master.begin_shutdown()
            server.stop()
            if workers is not None:
                await workers.stop()
            await master.drain()
            await server.close_all_connections()
            await master.stop()
            await store.close()
        finally:
            slow.cancel()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``det-hub master``."""
    # Before anything is made: the data directory's files are created private (0600/0700).
    private_umask()
    # `kill -USR1 <pid>` writes every thread's stack to the log: what a master that does not
    # answer, or does not stop, is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    app = MasterApp.instance()
    app.initialize(argv)
    asyncio.run(app.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
