"""DetSpawner: JupyterHub notebook servers on det_hub's cluster.

A DockerSpawner whose servers take their slots from det_hub's scheduler, like any other job:
before a server starts, the spawner asks the master for slots (``POST /api/v1/hub_servers``,
with the user's own server token); while none are free the server waits in the queue and the
spawn page shows its place; once the scheduler has placed it, the container starts on the Docker
host that holds the slots, with exactly their GPUs (a device request naming them) or CPU cores
(a cpuset). Stopping the server, or the hub's idle culler stopping it, gives the slots back.

In ``jupyterhub_config.py``, after :func:`det_hub.hub.configure`::

    c.JupyterHub.spawner_class = "det_hub.spawner.DetSpawner"
    c.DockerSpawner.image = "det-hub:cuda"
    c.DetSpawner.profiles = [
        {"display_name": "CPU only", "slots": 1, "resource_pool": "cpu"},
        {"display_name": "1 GPU", "slots": 1, "resource_pool": "gpu"},
        {"display_name": "4 GPUs", "slots": 4, "resource_pool": "gpu",
         "image": "det-hub:cuda"},
    ]

The agents are the master's Docker agents (``c.MasterApp.docker_agents``); containers share
their hosts' network (``network_name = "host"``), so each server listens on a port of its own
on its agent's address.

On a resource pool that is a Slurm partition (``server_mode = "task"``, which ``"auto"`` picks
for such pools) nothing may hold Slurm's resources for a server that does not run, and the
server must be the site scheduler's job, as with JupyterHub's batchspawner: the spawner asks the
master to run the server's command itself (``POST /api/v1/hub_servers`` with ``command`` and
the hub's ``environment`` for it), as a Slurm job submitted as the user's linked account. The
job's wrapper (:mod:`det_hub.exec.hub_server`) starts ``jupyterhub-singleuser`` on a free port
of its node and says so once it answers; the master takes the node's address from Slurm, and the
spawner hands ``host:port`` to the hub. While the job waits, the spawn page shows its place in
det_hub's queue, then Slurm's reason. The admin may let users set the job's time limit,
memory, partition and QOS on the spawn page (``slurm_form_fields`` and the other ``slurm_*``
settings; :mod:`det_hub.spawner.slurm_options`), as batchspawner's form does: the choices are
checked on the page and become the job's ``sbatch`` options (the task config's
``slurm.sbatch_args``).
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import time
from typing import Any

import yaml
from docker.api.client import APIClient
from docker.tls import TLSConfig
from docker.types import DeviceRequest
from dockerspawner import DockerSpawner
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode, default

from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL, DEFAULT_SLOTS
from det_hub.env_names import MASTER_ENV
from det_hub.ports import free_port
from det_hub.spawner.slurm_options import (
    FIELDS,
    SlurmFormSettings,
    SlurmOptionsError,
    sbatch_args,
)

#: One engine client per Docker host, shared by the spawners placed there.
_CLIENTS: dict[str, APIClient] = {}


#: Seconds a server run as a task may take to end once killed before ``stop`` gives up waiting.
STOP_WAIT = 60.0


class SpawnError(Exception):
    """Why a server could not start, in words for the spawn page; ``status``: the master's
    HTTP status where it answered with an error."""

    jupyterhub_message = ""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.jupyterhub_message = message
        self.status = status


class DetSpawner(DockerSpawner):
    """Notebook servers in containers on slots det_hub's scheduler gives them."""

    master_url = Unicode(
        config=True,
        help="""The det_hub master's URL (default: DET_HUB_MASTER of c.Spawner.environment,
        which det_hub.hub.configure sets).""")
    slots = Integer(DEFAULT_SLOTS, config=True,
                    help="Slots a server holds when no profile says otherwise.")
    resource_pool = Unicode(DEFAULT_RESOURCE_POOL, config=True,
                            help="The resource pool servers take their slots from when no "
                            "profile says otherwise.")
    priority = Integer(DEFAULT_PRIORITY, config=True,
                       help="The servers' priority in the job queue (1-99).")
    profiles = List(
        Dict(), config=True,
        help="""Choices on the spawn page: dicts with display_name, slots, resource_pool and
        optionally image, priority and server_mode. Empty: no choice, the defaults above.""")
    server_mode = Enum(
        ["auto", "container", "task"], "auto", config=True,
        help="""How a server runs. `container`: the master holds slots and the spawner starts
        the server's container on their Docker agent. `task`: the master runs the server's
        command itself as a task in the pool (on a Slurm pool, a Slurm job submitted as the
        user's linked account), with the hub's environment for it, and the server listens on
        the node it was given. `auto`: `task` for a Slurm pool, else `container`. A profile's
        server_mode wins.""")
    queue_timeout = Float(
        600.0, config=True,
        help="Seconds a server may wait in the queue for slots before its start fails.")
    poll_interval = Float(1.0, config=True, help="Seconds between asking the master "
                          "whether the server's slots are there.")
    seed_examples = Bool(
        True, config=True,
        help="""Copy det_hub's quickstart notebook and examples into a user's notebook
        directory the first time a server starts there (the image's det_hub does it, before
        the server's command: see det_hub.hub.first_run). Never replaces a file.""")
    seed_python = Unicode(
        "", config=True,
        help="""The image's Python with det_hub, which seeds the notebook directory. Default:
        the server command's own program when it is a Python, else python3.""")
    slurm_form_fields = List(
        Unicode(), config=True,
        help=f"""Which of the job's sbatch options users set on the spawn page when their
        server runs as a Slurm job: any of {', '.join(FIELDS)} (time limit --time, memory
        --mem, --partition from slurm_partitions, --qos from slurm_qos_choices). A field
        left empty gives the default below, else the pool's own. Offer them where the servers
        run as Slurm jobs: a server that does not refuses them (its start fails, saying so).
        Empty: no Slurm options on the spawn page.""")
    slurm_time_default = Unicode(
        "", config=True,
        help="""The time limit (--time) of a server's Slurm job when its user gives none, in
        Slurm's formats: minutes (30), H:MM:SS (1:00:00) or D-HH:MM:SS (1-00:00:00). Empty:
        the pool's sbatch_args, else the partition's default.""")
    slurm_time_max = Unicode(
        "", config=True,
        help="""The longest time limit users may ask for on the spawn page (Slurm's formats,
        as slurm_time_default). Empty: no limit of det_hub's (the partition's MaxTime
        holds).""")
    slurm_mem_default = Unicode(
        "", config=True,
        help="""The memory (--mem, per node) of a server's Slurm job when its user gives none:
        512M, 4G (units K, M, G, T; M when none). Empty: the pool's, else Slurm's default.""")
    slurm_mem_max = Unicode(
        "", config=True,
        help="The most memory users may ask for on the spawn page (as slurm_mem_default).")
    slurm_partitions = List(
        Unicode(), config=True,
        help="""The partitions users may pick on the spawn page (with `partition` in
        slurm_form_fields); none picked: the pool's own. Every one of them must run det_hub's
        jobs as the pool's partition does (the same shared filesystem and Python).""")
    slurm_qos_choices = List(
        Unicode(), config=True,
        help="""The QOS users may pick on the spawn page (with `qos` in slurm_form_fields);
        none picked: the pool's own (its qos, or qos_by_priority's for the server's
        priority).""")

    #: The master's task that holds this server's slots.
    task_id = Integer(0)
    #: Where the slots are (the master's placement), while the server runs.
    placement = Dict()
    #: How this server runs: ``container`` or ``task`` (see ``server_mode``), once started.
    mode = Unicode("")
    #: ``host:port`` of a server run as a task, once it answers.
    server_address = Unicode("")

    @default("network_name")
    def _default_network_name(self) -> str:
        return "host"

    @default("use_internal_ip")
    def _default_use_internal_ip(self) -> bool:
        # On the host's network there is nothing to publish: no port bindings.
        return True

    @default("start_timeout")
    def _default_start_timeout(self) -> int:
        # The wait in the queue is part of the start; queue_timeout bounds it.
        return int(self.queue_timeout) + 120

    @default("master_url")
    def _default_master_url(self) -> str:
        return str((self.environment or {}).get(MASTER_ENV, "")).rstrip("/")

    # --- the spawn page -------------------------------------------------------------------
    @default("options_form")
    def _default_options_form(self) -> str:
        slurm = self.slurm_form().form_html()
        if not self.profiles:
            return slurm
        options = "".join(
            f'<option value="{i}">{html.escape(str(p.get("display_name", f"Profile {i}")))}'
            "</option>" for i, p in enumerate(self.profiles))
        return f'<label for="profile">Resources</label><select name="profile" ' \
               f'class="form-control">{options}</select>{slurm}'

    def options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, Any]:
        """The profile chosen, and the Slurm options given (checked: a wrong one is an error
        that the spawn page shows, and nothing starts)."""
        options: dict[str, Any] = {"profile": int((formdata.get("profile") or ["0"])[0])}
        slurm = self.slurm_form().from_form(formdata)
        if slurm:
            options["slurm"] = slurm
        return options

    def slurm_form(self) -> SlurmFormSettings:
        """The spawn page's Slurm options, as the ``slurm_*`` settings give them."""
        return SlurmFormSettings(
            tuple(self.slurm_form_fields), self.slurm_time_default, self.slurm_time_max,
            self.slurm_mem_default, self.slurm_mem_max, tuple(self.slurm_partitions),
            tuple(self.slurm_qos_choices))

    def _slurm_choices(self) -> dict[str, str]:
        """The user's Slurm options (``user_options["slurm"]``, from the spawn page or the
        hub's REST API), checked again: the API passes no form.

        Raises:
            SpawnError: One cannot be used; the message names it.
        """
        try:
            return self.slurm_form().choose(self.user_options.get("slurm"))
        except SlurmOptionsError as e:
            raise SpawnError(f"the server's Slurm options: {e}") from None

    def _wanted(self) -> dict[str, Any]:
        """Slots, pool, priority and image this server asks for: its profile's, or the
        defaults."""
        wanted: dict[str, Any] = {"slots": self.slots, "resource_pool": self.resource_pool,
                                  "priority": self.priority}
        choice = self.user_options.get("profile")
        if self.profiles and choice is not None:
            if not isinstance(choice, int) or not 0 <= choice < len(self.profiles):
                raise SpawnError(f"no profile {choice!r}; there are {len(self.profiles)}")
            wanted.update({k: v for k, v in self.profiles[choice].items()
                           if k in ("slots", "resource_pool", "priority", "image",
                                    "server_mode")})
        return wanted

    async def _server_mode(self, wanted: dict[str, Any]) -> tuple[str, bool | None]:
        """``container`` or ``task``: the profile's, the configured one, or for ``auto`` the
        one the pool's kind needs (a Slurm pool's servers are its jobs); and whether the pool
        is a Slurm partition, where ``auto`` asked the master (None where it did not)."""
        mode = str(wanted.get("server_mode") or self.server_mode)
        if mode not in ("auto", "container", "task"):
            raise SpawnError(f"server_mode {mode!r}: must be auto, container or task")
        if mode != "auto":
            return mode, None
        on_slurm = await self._slurm_pool(wanted["resource_pool"])
        return ("task" if on_slurm else "container"), on_slurm

    async def _slurm_pool(self, pool: str) -> bool:
        """Whether the master's resource pool ``pool`` is a Slurm partition."""
        pools = (await self._call("GET", "/resource_pools"))["resource_pools"]
        kinds = next((str(p.get("type") or "") for p in pools if p["name"] == pool), "")
        return "slurm" in kinds.split(",")

    # --- the master -----------------------------------------------------------------------
    async def _call(self, method: str, path: str, body: Any = None, *,
                    token: str | None = None) -> dict[str, Any]:
        if not self.master_url:
            raise SpawnError("DetSpawner does not know the det_hub master: call "
                             "det_hub.hub.configure(c) or set c.DetSpawner.master_url")
        request = HTTPRequest(
            f"{self.master_url}/api/v1{path}", method=method,
            body=json.dumps(body if body is not None else {}) if method != "GET" else None,
            headers={"Authorization": f"token {token or self.api_token}",
                     "Content-Type": "application/json"}, request_timeout=30)
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            detail = e.response.body.decode(errors="replace") if e.response else str(e)
            raise SpawnError(f"the det_hub master refused: {detail}", e.code) from None
        except OSError as e:
            raise SpawnError(f"the det_hub master at {self.master_url} did not answer: "
                             f"{e}") from None
        return json.loads(response.body)

    async def _reserve(self, wanted: dict[str, Any], *, slurm_args: list[str] | None = None,
                       **run: Any) -> dict[str, Any]:
        """Ask the master for the server's task: slots only, or with ``command`` and
        ``environment``, the server run by the master (task mode); ``slurm_args``: its Slurm
        job's sbatch options."""
        config: dict[str, Any] = {
            "description": f"Notebook server of {self.user.name}"
                           + (f" ({self.name})" if self.name else ""),
            "resources": {"slots": wanted["slots"], "resource_pool": wanted["resource_pool"],
                          "priority": wanted["priority"]}}
        if slurm_args:
            config["slurm"] = {"sbatch_args": slurm_args}
        made = await self._call("POST", "/hub_servers",
                                {"config": yaml.safe_dump(config), **run})
        return made["hub_server"]

    async def _release(self, task_id: int, token: str) -> None:
        """Give the slots of the master's task ``task_id`` back (with the server's token,
        which the hub clears with the rest of the state when the server stops)."""
        if task_id:
            try:
                await self._call("POST", f"/hub_servers/{task_id}/kill",
                                 token=token or self._user_token())
            except Exception as e:  # never hide why the start failed
                self.log.warning("could not give back the slots of %s: %s", self._log_name, e)

    async def _wait_for_slots(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task's placement once the scheduler has given it slots."""
        deadline = time.monotonic() + self.queue_timeout
        while True:
            if task.get("placement"):
                return dict(task["placement"])
            if task["state"] == "TERMINATED":
                raise SpawnError(f"the server's slots were not given: {task.get('exit_reason')}")
            if time.monotonic() > deadline:
                raise SpawnError(
                    f"no {task.get('slots', DEFAULT_SLOTS)} free slot(s) in resource pool "
                    f"{task.get('resource_pool')!r} within {self.queue_timeout:g} s; "
                    "try again later, or ask for fewer")
            self._queue_news = await self._queue_place(task)
            await asyncio.sleep(self.poll_interval)
            task = (await self._call("GET", f"/hub_servers/{self.task_id}"))["hub_server"]

    async def _queue_place(self, task: dict[str, Any]) -> str:
        """Where the server's job is: its place in det_hub's queue, or why its agent's own
        queue holds it (Slurm's reason), or that it runs and its server is starting."""
        if task["state"] == "RUNNING":
            return "The server's job runs; waiting for the server to answer"
        try:
            job = (await self._call("GET", f"/jobs/{task['job_id']}"))["job"]
        except SpawnError:
            return "Waiting for free slots"
        if job.get("reason"):
            return f"Waiting for the site's scheduler: {job['reason']}"
        place = job.get("queue_position")
        return (f"Waiting for {task.get('slots', DEFAULT_SLOTS)} slot(s) in resource pool "
                f"{task.get('resource_pool')}: place {place} in the queue" if place
                else "Waiting for free slots")

    async def progress(self) -> Any:
        """The spawn page's progress: the place in the queue while the server waits (and,
        for a server run as a task, the site scheduler's reason, then its start)."""
        # JupyterHub stops reading this once the start has ended, whichever way.
        while not (self.placement or self.server_address):
            yield {"progress": 10, "message": getattr(self, "_queue_news", "Asking for slots")}
            await asyncio.sleep(self.poll_interval)
        if self.mode == "task":
            yield {"progress": 90, "message": f"The server answers at {self.server_address}"}
        else:
            yield {"progress": 60, "message": "Slots assigned; starting the server's container"}

    # --- the container --------------------------------------------------------------------
    @property
    def client(self) -> APIClient:
        """The engine of the Docker host that holds this server's slots."""
        docker = (self.placement or {}).get("docker") or {}
        host = docker.get("docker_host")
        if not host:
            return super().client
        if host not in _CLIENTS:
            tls = None
            if host.startswith("tcp://") and (docker.get("tls_verify")
                                              or docker.get("tls_client_cert")):
                cert = docker.get("tls_client_cert")
                key = docker.get("tls_client_key")
                tls = TLSConfig(client_cert=(cert, key) if cert and key else None,
                                ca_cert=docker.get("tls_ca_cert") or None,
                                verify=bool(docker.get("tls_verify")))
            _CLIENTS[host] = APIClient(base_url=host, version="auto", tls=tls)
        return _CLIENTS[host]

    async def get_command(self) -> list[str]:
        """The server's command, after det_hub has seeded the notebook directory (see
        ``seed_examples``). A server run as a task has no image to take a command from:
        ``cmd``, else ``jupyterhub-singleuser``."""
        if self.mode == "task":
            command = [*(self.cmd or ["jupyterhub-singleuser"]), *self.get_args()]
        else:
            command = list(await super().get_command())
        if not self.seed_examples:
            return command
        python = self.seed_python or (
            command[0] if command and os.path.basename(command[0]).startswith("python")
            else "python3")
        # As the hub formats it for the server ({username} and the rest).
        into = self.format_string(self.notebook_dir) if "{" in self.notebook_dir \
            else self.notebook_dir
        return [python, "-m", "det_hub.hub.first_run", *(["--into", into] if into else []),
                "--", *command]

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update((self.placement or {}).get("environment") or {})
        return env

    async def start(self) -> tuple[str, int]:
        wanted = self._wanted()
        chosen = self._slurm_choices()
        self.mode, on_slurm = await self._server_mode(wanted)
        if self.mode == "task":
            return await self._start_task(wanted, chosen, on_slurm)
        if chosen:
            raise SpawnError(_not_slurm(chosen, "runs in a container (server_mode container)"))
        if wanted.get("image"):
            self.image = wanted["image"]
        task = await self._reserve(wanted)
        self.task_id = int(task["id"])
        try:
            self.placement = await self._wait_for_slots(task)
            if not self.placement.get("docker"):
                raise SpawnError(f"agent {self.placement.get('agent_id')} runs no containers: "
                                 f"give DetSpawner a resource pool of Docker agents")
            self._give_slots_to_container()
            # On the host's network: the server listens on the agent's address.
            self.ip = self.placement.get("address") or "127.0.0.1"
            self.port = _free_port(self.ip)
            return await super().start()
        except BaseException:
            # The placement stays: a container made on its host is still to be removed.
            task_id, self.task_id = self.task_id, 0
            await self._release(task_id, self.api_token)
            raise

    def _give_slots_to_container(self) -> None:
        """The container gets exactly the placement's GPUs (a device request naming them) or
        CPU cores (a cpuset), on top of the configured ``extra_host_config``."""
        if not hasattr(self, "_configured_host_config"):
            self._configured_host_config = self.extra_host_config  # type: ignore[has-type]
        resources: dict[str, Any] = {}
        if self.placement.get("gpus"):
            resources["device_requests"] = [DeviceRequest(
                device_ids=list(self.placement["gpus"]), capabilities=[["gpu"]])]
        elif self.placement.get("cpus"):
            resources["cpuset_cpus"] = ",".join(map(str, self.placement["cpus"]))
        configured = self._configured_host_config
        if callable(configured):
            async def merged(spawner: DetSpawner) -> dict[str, Any]:
                value = configured(spawner)
                if asyncio.iscoroutine(value):
                    value = await value
                return {**(value or {}), **resources}

            self.extra_host_config = merged
        else:
            self.extra_host_config = {**(configured or {}), **resources}  # type: ignore[assignment]

    async def get_ip_and_port(self) -> tuple[str, int]:
        return self.ip, self.port

    # --- a server the master runs (task mode) -----------------------------------------------
    def _task_environment(self) -> dict[str, str]:
        """The hub's environment for the server, less what ``env_keep`` copies from the hub's
        own process (its PATH, its virtual environment), which describes the hub's host and
        not the node the server runs on."""
        configured = set(self.environment or {})
        return {k: v for k, v in self.get_env().items()
                if k not in self.env_keep or k in configured}

    async def _start_task(self, wanted: dict[str, Any], chosen: dict[str, str],
                          on_slurm: bool | None) -> tuple[str, int]:
        """Start the server as the master's task; ``chosen``: its user's checked Slurm
        options, which with the admin's defaults are its Slurm job's sbatch options;
        ``on_slurm``: whether its pool is a Slurm partition, None if not asked yet."""
        slurm_args: list[str] = []
        form = self.slurm_form()
        if chosen or form.with_defaults({}):
            if on_slurm is None:
                on_slurm = await self._slurm_pool(wanted["resource_pool"])
            if on_slurm:
                slurm_args = sbatch_args(form.with_defaults(chosen))
            elif chosen:
                raise SpawnError(_not_slurm(chosen, f"runs in resource pool "
                                                    f"{wanted['resource_pool']!r}, which is "
                                                    "not a Slurm partition"))
        command = await self.get_command()
        task = await self._reserve(wanted, slurm_args=slurm_args, command=command,
                                   environment=self._task_environment())
        self.task_id = int(task["id"])
        try:
            host, port = await self._wait_for_server(task)
        except BaseException:
            task_id, self.task_id = self.task_id, 0
            await self._release(task_id, self.api_token)
            raise
        self.ip, self.port = host, port
        return host, port

    async def _wait_for_server(self, task: dict[str, Any]) -> tuple[str, int]:
        """The server's ``(host, port)`` once it answers; its job may wait ``queue_timeout``
        to run (in det_hub's queue, then the site scheduler's)."""
        deadline = time.monotonic() + self.queue_timeout
        while True:
            if task.get("server_address"):
                self.server_address = str(task["server_address"])
                host, _, port = self.server_address.rpartition(":")
                return host, int(port)
            if task["state"] == "TERMINATED":
                raise SpawnError(f"the server's job in resource pool "
                                 f"{task.get('resource_pool')!r} ended before the server "
                                 f"answered: {task.get('exit_reason')}; its log ends: "
                                 f"{await self._log_tail(int(task['id']))}")
            if task["state"] != "RUNNING" and time.monotonic() > deadline:
                raise SpawnError(
                    f"the server's job did not start within {self.queue_timeout:g} s "
                    f"(resource pool {task.get('resource_pool')!r}: "
                    f"{await self._queue_place(task)}); try again later, or ask for fewer "
                    "slots")
            self._queue_news = await self._queue_place(task)
            await asyncio.sleep(self.poll_interval)
            try:
                task = await self._server_task()
            except SpawnError as e:
                if e.status is not None:
                    raise
                # The master restarts: it adopts the job; ask again until the deadline.
                self._queue_news = f"Waiting for the det_hub master, which does not answer: {e}"

    async def _log_tail(self, task_id: int, lines: int = 5) -> str:
        """The last lines of a server task's log, for the reason a start failed."""
        request = HTTPRequest(f"{self.master_url}/api/v1/hub_servers/{task_id}/logs",
                              headers={"Authorization": f"token {self._user_token()}"},
                              request_timeout=30)
        try:
            body = (await AsyncHTTPClient().fetch(request)).body.decode(errors="replace")
            rows = [json.loads(line) for line in body.splitlines() if line.strip()]
        except (OSError, HTTPClientError, ValueError) as e:
            return f"(not readable: {e})"
        return " | ".join(str(r.get("message", "")) for r in rows[-lines:])

    def _user_token(self) -> str:
        """The server's token, or after a hub restart (which keeps no server's token) a
        short-lived token of the user's, made once, to ask the master about the server."""
        if self.api_token:
            return str(self.api_token)
        if not getattr(self, "_restart_token", ""):
            self._restart_token = self.user.new_api_token(
                note=f"DetSpawner: the det_hub master, about {self._log_name}",
                expires_in=3600)
        return str(self._restart_token)

    async def _server_task(self) -> dict[str, Any]:
        """The master's record of this server's task."""
        return dict((await self._call("GET", f"/hub_servers/{self.task_id}",
                                      token=self._user_token()))["hub_server"])

    async def poll(self) -> int | None:
        if self.mode != "task":
            return await super().poll()
        if not self.task_id:
            return 0
        try:
            task = await self._server_task()
        except SpawnError as e:
            if e.status == 404:
                return 1
            # The master does not answer now: the server may well run; ask again later.
            self.log.warning("cannot ask the master about %s: %s", self._log_name, e)
            return None
        if task["state"] == "TERMINATED":
            return int(task["exit_code"]) if task.get("exit_code") is not None else 1
        return None

    async def _stop_task(self, task_id: int, token: str) -> None:
        """Kill the server's task, and wait (up to :data:`STOP_WAIT`) until it has ended."""
        await self._release(task_id, token)
        deadline = time.monotonic() + STOP_WAIT
        while task_id and time.monotonic() < deadline:
            try:
                task = await self._server_task()
            except SpawnError as e:
                self.log.warning("cannot ask the master whether %s ended: %s",
                                 self._log_name, e)
                return
            if task["state"] == "TERMINATED":
                return
            await asyncio.sleep(self.poll_interval)
        self.log.warning("%s: the server's task %d had not ended %g s after it was killed",
                         self._log_name, task_id, STOP_WAIT)

    async def stop(self, now: bool = False) -> None:
        task_id, token = self.task_id, self.api_token  # DockerSpawner.stop clears the state
        if self.mode == "task":
            try:
                await self._stop_task(task_id, token)
            finally:
                self.clear_state()
            return
        try:
            if self.placement:
                await super().stop(now=now)
            else:  # never placed: no container was made anywhere
                self.clear_state()
        finally:
            await self._release(task_id, token)

    # --- what the hub keeps across its restarts --------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.task_id:
            state.update(det_hub_task=self.task_id, det_hub_placement=dict(self.placement),
                         det_hub_port=self.port, det_hub_ip=self.ip, det_hub_mode=self.mode,
                         det_hub_server_address=self.server_address)
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.task_id = int(state.get("det_hub_task") or 0)
        self.placement = dict(state.get("det_hub_placement") or {})
        self.mode = str(state.get("det_hub_mode") or ("container" if self.task_id else ""))
        self.server_address = str(state.get("det_hub_server_address") or "")
        if state.get("det_hub_port"):
            self.port = int(state["det_hub_port"])
            self.ip = str(state.get("det_hub_ip") or self.ip)

    def clear_state(self) -> None:
        super().clear_state()
        self.task_id = 0
        self.placement = {}
        self.server_address = ""


def _not_slurm(chosen: dict[str, str], how: str) -> str:
    """Why a server that is no Slurm job refuses its user's Slurm options."""
    given = ", ".join(f"{k} {v}" for k, v in chosen.items())
    return (f"the Slurm options chosen ({given}) are for servers that run as Slurm jobs, and "
            f"this server {how}: start it without them, or with a profile of a Slurm pool")


def _free_port(host: str) -> int:
    """A port nothing listens on at ``host`` now (for a host of its own network: checked
    here, where the engine is local; a remote host's port is very likely free as well)."""
    try:
        return free_port(host)
    except OSError:  # not an address of this machine
        return free_port("")


__all__ = ["DetSpawner", "SpawnError"]
