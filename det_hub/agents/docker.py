"""The Docker agent: runs tasks in containers on one Docker host, through the docker SDK.

One :class:`DockerAgent` stands for one engine, local (``unix:///var/run/docker.sock``) or remote
(``tcp://host:2376`` with TLS). A task is one container. The engine's host need not see the
master's files, so the task's context archive and its extra files travel with the API
(``put_archive``) into the container before it starts. The container's name and labels carry
the allocation id, so after a master restart :meth:`DockerAgent.attach` finds it again, running
or exited, and its log is read on from the stored position: the timestamp of the last line read,
in integer nanoseconds since the epoch.

Slots are the engine host's GPUs when it has any (given in :attr:`DockerAgent.gpus`, or listed
by ``nvidia-smi`` in a short-lived container), else groups of its CPU cores.
"""

from __future__ import annotations

import calendar
import contextlib
import io
import os
import re
import signal
import struct
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import docker.errors
import requests
from docker.client import DockerClient
from docker.models.containers import Container
from docker.tls import TLSConfig
from docker.types import DeviceRequest, Mount
from traitlets import Bool, Dict, Integer, List, TraitError, Unicode, Union, default, validate

from det_hub.agents._base import (
    PYTHON_NAMES,
    Agent,
    AgentUnreachable,
    ExitStatus,
    LogLine,
    TaskHandle,
    TaskSpec,
)
from det_hub.agents.slots import (
    GpuInfo,
    SlotInfo,
    cpu_slots,
    gpu_slots,
    parse_gpu_query,
    slot_resources,
)

#: Labels every task container carries; :meth:`DockerAgent.attach` finds containers by them.
LABEL_ALLOCATION = "det_hub.allocation"
LABEL_AGENT = "det_hub.agent"
LABEL_SLOTS = "det_hub.slots"

#: Images built from the repository's ``docker/`` directory (see docker/README.md).
DEFAULT_IMAGES = {"cpu": "det-hub:cpu", "cuda": "det-hub:cuda"}

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"]

#: ``containers.create`` arguments the agent relies on to run and find the task, which
#: ``extra_create_kwargs`` may not replace. ``tty`` would merge stdout and stderr into one
#: unframed stream that :meth:`DockerTaskHandle.read_logs` cannot split.
AGENT_OWNED_KWARGS = frozenset({"image", "command", "name", "working_dir", "tty", "detach",
                                "user"})

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RUNNING_STATES = frozenset({"created", "running", "paused", "restarting"})
_STDTYPES = {1: "stdout", 2: "stderr"}
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


# ------------------------------------------------------------------------------- pure helpers


def parse_timestamp_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 timestamp as the engine writes it.

    ``datetime`` keeps microseconds only, and the engine's nanoseconds are what keeps two lines
    written in the same microsecond apart, so the text is taken apart here.
    """
    m = _TIMESTAMP.match(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    zone = m.group(8)
    if zone != "Z":
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[0] == "+" else -offset
    return seconds * 1_000_000_000 + int((m.group(7) or "").ljust(9, "0"))


def parse_log_frames(data: bytes) -> list[tuple[str, int, str]]:
    """``(stdtype, timestamp_ns, message)`` for each line of a non-TTY container's log.

    The engine answers ``GET /containers/{id}/logs`` for a container without a TTY in its
    multiplexed format: frames of an 8-byte header (stream number, three zero bytes, big-endian
    length) and a payload, here one log line with its timestamp in front. The SDK's
    ``Container.logs`` drops the stream number when it reads both streams at once, and
    reading them in two requests cannot keep their lines in order, hence this parser.
    A log line longer than the engine's 16 KiB message limit arrives as several frames and
    so as several lines.
    """
    lines = []
    pos = 0
    while pos + 8 <= len(data):
        stream, size = struct.unpack_from(">BxxxL", data, pos)
        payload = data[pos + 8:pos + 8 + size]
        pos += 8 + size
        if len(payload) < size:
            break
        stamp, _, message = payload.decode("utf-8", "replace").partition(" ")
        try:
            ts = parse_timestamp_ns(stamp)
        except ValueError:
            continue
        lines.append((_STDTYPES.get(stream, "stdout"), ts, message.rstrip("\r\n")))
    return lines


def exit_status_from_state(state: Mapping[str, Any]) -> ExitStatus | None:
    """The exit status in a container's ``State`` (from ``inspect``), ``None`` while it runs.

    The engine reports a process that a signal ended as 128 + the signal's number, as shells do;
    such a code is read that way (137 is SIGKILL), since a container cannot tell the master
    more. ``OOMKilled`` and an engine error become the reason.
    """
    if state.get("Status") in _RUNNING_STATES:
        return None
    code = state.get("ExitCode")
    sig = None
    if isinstance(code, int) and 128 < code <= 128 + 64:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(code - 128).name
    reasons = []
    if state.get("OOMKilled"):
        reasons.append("OOMKilled")
    if state.get("Error"):
        reasons.append(str(state["Error"]))
    return ExitStatus(code if isinstance(code, int) else None, sig, "; ".join(reasons) or None)


def container_name(agent_id: str, allocation_id: str) -> str:
    """The task container's name: one per allocation and agent, in Docker's name alphabet."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", f"det-hub-{agent_id}-{allocation_id}")


def bind_mount(entry: Mapping[str, Any], where: str = "bind_mounts") -> Mount:
    """A docker ``Mount`` from a Determined ``bind_mounts`` entry."""
    for key in ("host_path", "container_path"):
        if not entry.get(key):
            raise ValueError(f"{where}: {key} is required")
    return Mount(
        target=str(entry["container_path"]), source=str(entry["host_path"]), type="bind",
        read_only=bool(entry.get("read_only", False)),
        propagation=str(entry.get("propagation") or "rprivate"),
    )


def device_spec(entry: Mapping[str, Any], where: str = "devices") -> str:
    """A ``HOST:CONTAINER:MODE`` device string from a Determined ``devices`` entry."""
    if not entry.get("host_path"):
        raise ValueError(f"{where}: host_path is required")
    host = str(entry["host_path"])
    return f"{host}:{entry.get('container_path') or host}:{entry.get('mode') or 'mrw'}"


def _in_container(path: str, mounts: Sequence[Mapping[str, Any]]) -> str:
    """Where a host ``path`` shows up in the container through ``mounts``; ``""`` if not."""
    host = PurePosixPath(path)
    for m in mounts:
        source = PurePosixPath(str(m.get("host_path", "")))
        if source.is_absolute() and (host == source or source in host.parents):
            return str(PurePosixPath(str(m["container_path"])) / host.relative_to(source))
    return ""


def compat_site_dir(mounts: Sequence[Mapping[str, Any]]) -> str:
    """det_hub's ``sitecustomize`` directory (the ``determined`` alias) as the container sees it.

    Found when the master's det_hub tree is mounted into the container; ``""`` otherwise, and
    then the image provides the alias itself (the images from docker/ do).
    """
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "compat", "site")
    return _in_container(here, mounts) if os.path.isdir(here) else ""


def slot_create_kwargs(resources: Mapping[str, Any]) -> dict[str, Any]:
    """``containers.create`` arguments for :func:`~det_hub.agents.slots.slot_resources`:
    exactly the GPUs by device request, or the CPU cores by cpuset."""
    if resources.get("gpus"):
        return {"device_requests": [DeviceRequest(device_ids=list(resources["gpus"]),
                                                  capabilities=[["gpu"]])]}
    if resources.get("cpus"):
        return {"cpuset_cpus": ",".join(map(str, resources["cpus"]))}
    return {}


def container_create_kwargs(
    spec: TaskSpec,
    slots: Sequence[SlotInfo],
    *,
    image: str,
    agent_id: str,
    python: str = "python3",
    task_dir: str = "/run/det_hub",
    mounts: Sequence[Mapping[str, Any]] = (),
    image_path: str = "",
    shm_size: int | None = None,
    site_dir: str = "",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` that run ``spec`` on ``slots``.

    Pure: nothing here talks to an engine, so how a task's container is made (GPU requests, CPU
    pinning, mounts, the environment) is testable without one.

    Args:
        mounts: the agent's own bind mounts (Determined's form), added to the experiment's.
        image_path: the image's ``PATH``, to which the directory of an absolute ``python`` is
            prepended.
        site_dir: a directory put first on ``PYTHONPATH`` (det_hub's ``sitecustomize``).
        extra: the admin's ``extra_create_kwargs``: dictionaries are merged with the agent's
            entries winning, lists appended to, other values replace the agent's.
    """
    container = spec.container
    argv = list(spec.argv)
    if argv and argv[0] in PYTHON_NAMES:
        argv[0] = python
    task_root = task_dir.rstrip("/")
    # The container's first process unpacks the context as the task's user, then becomes the
    # task's command (det_hub.exec.task_start, as on every agent kind).
    start = [python, "-I", "-m", "det_hub.exec.task_start"]
    if spec.context:
        start += ["--context", f"{task_root}/context.tar", "--into", f"{task_root}/run"]
    argv = [*start, "--", *argv]

    env: dict[str, str] = dict(spec.env)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("HOME", f"{task_root}/home")
    if os.path.isabs(python):
        # Launchers run `python3 ...` again by name inside the task; it must be this Python.
        env["PATH"] = os.path.dirname(python) + ":" + (spec.env.get("PATH") or image_path
                                                       or _DEFAULT_PATH)
    if site_dir:
        env["PYTHONPATH"] = ":".join(p for p in (site_dir, spec.env.get("PYTHONPATH")) if p)

    kwargs: dict[str, Any] = {
        "image": image,
        "command": argv,
        "name": container_name(agent_id, spec.allocation_id),
        "labels": {
            LABEL_ALLOCATION: spec.allocation_id,
            LABEL_AGENT: agent_id,
            LABEL_SLOTS: ",".join(str(s.id) for s in slots),
        },
        "working_dir": f"{task_root}/run",
        "environment": env,
        # Containers reach the master, and one another in a distributed trial, on the host's
        # addresses.
        "network_mode": "host",
        # A process that is PID 1 ignores SIGTERM unless it handles it; docker-init forwards
        # the signal to the task and reaps its children (data loader workers).
        "init": True,
        "mounts": [bind_mount(m, f"bind_mounts[{i}]") for i, m in enumerate(container.bind_mounts)]
        + [bind_mount(m, f"mounts[{i}]") for i, m in enumerate(mounts)],
    }
    if spec.run_as is not None:
        kwargs["user"] = f"{spec.run_as[0]}:{spec.run_as[1]}"
    shm = container.shm_size or shm_size
    if shm:
        kwargs["shm_size"] = int(shm)
    if container.devices:
        kwargs["devices"] = [device_spec(d, f"devices[{i}]")
                             for i, d in enumerate(container.devices)]
    if container.add_capabilities:
        kwargs["cap_add"] = list(container.add_capabilities)
    if container.drop_capabilities:
        kwargs["cap_drop"] = list(container.drop_capabilities)
    # The runtime exposes only the requested GPUs and numbers them from 0 in the container,
    # so the task's view is 0..n-1 whatever their indices on the host.
    resources = slot_resources(slots)
    env.update(resources["environment"])
    kwargs.update(slot_create_kwargs(resources))

    for key, value in (extra or {}).items():
        if key in AGENT_OWNED_KWARGS:
            raise ValueError(f"extra_create_kwargs: {key!r} is set by the agent")
        mine = kwargs.get(key)
        if isinstance(mine, dict) and isinstance(value, Mapping):
            kwargs[key] = {**value, **mine}
        elif isinstance(mine, list) and isinstance(value, (list, tuple)):
            kwargs[key] = [*mine, *value]
        else:
            kwargs[key] = value
    return kwargs


def _tar(entries: Sequence[tuple[str, bytes | None, int]],
         owner: tuple[int, int] | None = None) -> bytes:
    """A tar of directories (``None`` content) and files with the given modes, owned by
    ``owner`` (root when None)."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content, mode in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = now, mode
            if owner is not None:
                info.uid, info.gid = owner
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


@contextlib.contextmanager
def _engine_errors(host: str) -> Iterator[None]:
    """Turn the signs of an engine that does not answer into :class:`AgentUnreachable`."""
    try:
        yield
    except requests.exceptions.HTTPError:
        raise
    except requests.exceptions.RequestException as e:
        raise AgentUnreachable(f"the Docker engine at {host} does not answer: {e}") from e


# ------------------------------------------------------------------------------------ handles


class DockerTaskHandle(TaskHandle):
    """A task container, started by this agent or found again by its labels."""

    def __init__(self, agent: DockerAgent, allocation_id: str, container_id: str, *,
                 log_offset: int = 0, pid: int | None = None) -> None:
        self.allocation_id = allocation_id
        self.container_id = container_id
        self.log_offset = log_offset
        self.pid = pid
        self.where = container_id[:12]
        self._agent = agent
        self._status: ExitStatus | None = None
        #: Set once the container is gone (reaped, or removed by someone else).
        self._removed = False
        #: The last exit_status() found it running: the alive() that callers ask right after
        #: answers from that reading rather than asking the engine a second time.
        self._seen_running = False

    def __repr__(self) -> str:
        return f"DockerTaskHandle({self.allocation_id!r}, {self.where})"

    def _state(self) -> Mapping[str, Any] | None:
        if self._removed:
            return None
        api = self._agent.client().api
        with _engine_errors(self._agent.docker_host):
            try:
                state: Mapping[str, Any] = api.inspect_container(self.container_id)["State"]
            except docker.errors.NotFound:
                self._removed = True
                return None
        if state.get("Pid"):
            self.pid = int(state["Pid"])
        return state

    def read_logs(self) -> list[LogLine]:
        """New log lines, stdout and stderr apart, in the order the engine stored them.

        The engine's ``since`` takes whole seconds here (a float loses nanoseconds), so the read
        starts at the second of the last line seen and the lines at or before it are dropped.
        """
        if self._removed:
            return []
        api = self._agent.client().api
        params: dict[str, Any] = {"stdout": 1, "stderr": 1, "timestamps": 1, "follow": 0}
        if self.log_offset > 0:
            params["since"] = self.log_offset // 1_000_000_000
        url = f"{api.base_url}/v{api.api_version}/containers/{self.container_id}/logs"
        with _engine_errors(self._agent.docker_host):
            res = api.get(url, params=params, timeout=self._agent.timeout)
        if res.status_code == 404:
            return []
        try:
            res.raise_for_status()
        except requests.exceptions.HTTPError as e:
            raise docker.errors.create_api_error_from_http_exception(e) from e
        start = self.log_offset
        lines = []
        for stdtype, ts, message in parse_log_frames(res.content):
            if ts <= start:
                continue
            lines.append(LogLine(ts / 1e9, stdtype, message))
            self.log_offset = max(self.log_offset, ts)
        return lines

    def exit_status(self) -> ExitStatus | None:
        self._seen_running = False
        if self._status is None:
            state = self._state()
            if state is not None:
                self._status = exit_status_from_state(state)
            self._seen_running = state is not None and self._status is None
        return self._status

    def alive(self) -> bool:
        if self._status is not None:
            return False
        if self._seen_running:
            self._seen_running = False
            return True
        state = self._state()
        return state is not None and state.get("Status") in _RUNNING_STATES


# ------------------------------------------------------------------------------------- agent


class DockerAgent(Agent):
    """Runs tasks in containers on one Docker engine, one slot per GPU or per CPU group.

    Several agents may share an engine as long as their ``agent_id`` differ: containers are
    named and labelled by agent and allocation.
    """

    kind = "docker"
    uses_containers = True

    docker_host = Unicode(config=True, help="""The engine's address: `unix:///var/run/docker.sock`,
        or `tcp://host:2376` for a remote host (with the tls_* settings). Defaults to
        DOCKER_HOST, else the local socket.""")
    tls_verify = Bool(config=True, help="""Verify a tcp:// engine's certificate against
        tls_ca_cert. Defaults to DOCKER_TLS_VERIFY being set.""")
    tls_ca_cert = Unicode(config=True, help="""CA certificate (PEM file) a tcp:// engine's
        certificate is checked against. Defaults to ca.pem in DOCKER_CERT_PATH.""")
    tls_client_cert = Unicode(config=True, help="""Client certificate (PEM file) presented to a
        tcp:// engine, with tls_client_key. Defaults to cert.pem in DOCKER_CERT_PATH.""")
    tls_client_key = Unicode(config=True, help="""Key (PEM file) of tls_client_cert. Defaults to
        key.pem in DOCKER_CERT_PATH.""")
    timeout = Integer(60, config=True, help="""Seconds to wait for the engine's answer to one
        request before the host counts as unreachable.""")

    default_image = Dict(
        default_value=dict(DEFAULT_IMAGES),
        per_key_traits={"cpu": Unicode(), "cuda": Unicode()},
        config=True,
        help="""Image per device type (`cpu`, `cuda`) for tasks whose experiment does not name
        one in `environment.image`. Types left out take the images built from docker/:
        det-hub:cpu and det-hub:cuda.""")
    pull_images = Bool(True, config=True, help="""Pull a task's image when the engine does not
        have it. Off: such a task fails to start, naming the image.""")
    python = Unicode("python3", config=True, help="""The Python inside the container that a
        task's `python` or `python3` (argv[0]) becomes. An absolute path also goes first on the
        task's PATH, so launchers that start `python3` again find the same one.""")
    cpu_slot_cores = Integer(1, config=True, help="""Cores per CPU slot on an engine host without
        GPUs (its NCPU cores, grouped). A task on CPU slots is pinned to their cores (cpuset)
        and gets OMP_NUM_THREADS set to their number.""")
    gpus = List(Union([Unicode(), Integer()]), config=True, help="""The host's GPUs (indices or
        UUIDs) to offer as slots. Empty: when the engine has the `nvidia` runtime, or
        discover_gpus is on, nvidia-smi in a short-lived container of the cuda image lists
        them.""")
    discover_gpus = Bool(False, config=True, help="""List the host's GPUs with nvidia-smi even when
        the engine does not report an `nvidia` runtime (GPU support through the NVIDIA
        container toolkit's hook alone).""")
    mounts = List(Dict(), config=True, help="""Bind mounts added to every task container, in the
        form of Determined's `bind_mounts` (host_path, container_path, read_only,
        propagation); how a shared dataset or Python tree reaches every task.""")
    shm_size = Integer(4 << 30, config=True, help="""Bytes of /dev/shm for a task whose
        experiment sets no `resources.shm_size` (Determined's default, 4 GiB); 0 for the
        engine's default.""")
    task_dir = Unicode("/run/det_hub", config=True, help="""The task's directory inside its
        container: its extra files are here, and the context is unpacked into `run/` below
        it, the working directory.""")
    extra_create_kwargs = Dict(config=True, help="""More keyword arguments of the docker SDK's
        `containers.create` for every task container (mem_limit, runtime, security_opt, ...).
        Dictionaries are merged into the agent's (whose entries win), lists appended to, other
        values replace the agent's (network_mode, init, shm_size). image, command, name,
        working_dir and tty are the agent's own.""")

    @default("docker_host")
    def _default_docker_host(self) -> str:
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

    @default("tls_verify")
    def _default_tls_verify(self) -> bool:
        return bool(os.environ.get("DOCKER_TLS_VERIFY"))

    def _cert_path(self, name: str) -> str:
        cert_path = os.environ.get("DOCKER_CERT_PATH")
        return os.path.join(cert_path, name) if cert_path else ""

    @default("tls_ca_cert")
    def _default_tls_ca_cert(self) -> str:
        return self._cert_path("ca.pem")

    @default("tls_client_cert")
    def _default_tls_client_cert(self) -> str:
        return self._cert_path("cert.pem")

    @default("tls_client_key")
    def _default_tls_client_key(self) -> str:
        return self._cert_path("key.pem")

    @validate("extra_create_kwargs")
    def _check_extra(self, proposal: Any) -> dict[str, Any]:
        owned = sorted(AGENT_OWNED_KWARGS & set(proposal["value"]))
        if owned:
            raise TraitError(f"extra_create_kwargs cannot set {', '.join(owned)}: the agent does")
        return dict(proposal["value"])

    @validate("mounts")
    def _check_mounts(self, proposal: Any) -> list[dict[str, Any]]:
        for i, entry in enumerate(proposal["value"]):
            try:
                bind_mount(entry, f"mounts[{i}]")
            except ValueError as e:
                raise TraitError(str(e)) from e
        return list(proposal["value"])

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._docker: DockerClient | None = None
        self.slots: list[SlotInfo] = []
        self._discovered = False
        try:
            self._discover_slots()
        except AgentUnreachable as e:
            # The master starts with a host down; its slots appear at the first check() that
            # reaches it.
            self.log.warning("agent %s: %s; no slots until it answers", self.agent_id, e)

    # -- the engine

    def connection(self) -> dict[str, Any]:
        """The engine's address and TLS files, and the settings a container on this agent's
        slots gets besides them: ``docker_host``, ``tls_verify``, ``tls_ca_cert``,
        ``tls_client_cert``, ``tls_client_key``, ``mounts``, ``shm_size``, ``python``."""
        return {"docker_host": self.docker_host, "tls_verify": self.tls_verify,
                "tls_ca_cert": self.tls_ca_cert, "tls_client_cert": self.tls_client_cert,
                "tls_client_key": self.tls_client_key, "mounts": list(self.mounts),
                "shm_size": self.shm_size, "python": self.python}

    def _tls_config(self) -> TLSConfig | None:
        if not self.docker_host.startswith("tcp://"):
            return None
        if not (self.tls_verify or self.tls_client_cert or self.tls_ca_cert):
            return None
        client_cert = None
        if self.tls_client_cert and self.tls_client_key:
            client_cert = (self.tls_client_cert, self.tls_client_key)
        return TLSConfig(client_cert=client_cert, ca_cert=self.tls_ca_cert or None,
                         verify=self.tls_verify)

    def client(self) -> DockerClient:
        """The SDK's client for this agent's engine, made at the first call that reaches it.

        The API version is negotiated with the engine, so an older engine (Debian's 20.10
        speaks 1.41) is driven in its own version.

        Raises:
            AgentUnreachable: the engine does not answer.
        """
        if self._docker is None:
            tls = self._tls_config()
            try:
                self._docker = DockerClient(
                    base_url=self.docker_host, version="auto", timeout=self.timeout, tls=tls)
            except docker.errors.DockerException as e:
                # The SDK reports a failed version handshake as a bare DockerException.
                raise AgentUnreachable(
                    f"the Docker engine at {self.docker_host} does not answer: {e}") from e
        return self._docker

    def _engine(self) -> contextlib.AbstractContextManager[None]:
        return _engine_errors(self.docker_host)

    def _discover_slots(self) -> None:
        client = self.client()
        with self._engine():
            info = client.info()
        cpus = list(range(int(info.get("NCPU") or 1)))
        gpus = self._gpus(client, info)
        self.slots = gpu_slots(gpus, cpus) if gpus else cpu_slots(cpus, self.cpu_slot_cores)
        self._discovered = True
        self.log.info("agent %s on %s: %d %s slot(s)", self.agent_id, self.docker_host,
                      len(self.slots), self.slots[0].kind if self.slots else "no")

    def _gpus(self, client: DockerClient, info: Mapping[str, Any]) -> list[GpuInfo]:
        if self.gpus:
            named = [str(g) for g in self.gpus]
            return [GpuInfo(g, uuid="" if g.isdigit() else g) for g in named]
        if not (self.discover_gpus or "nvidia" in (info.get("Runtimes") or {})):
            return []
        image = self.image_for("cuda")
        try:
            with self._engine():
                self._ensure_image(client, image)
                out = client.containers.run(
                    image, NVIDIA_SMI_QUERY, remove=True, network_mode="none",
                    device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
                    labels={LABEL_AGENT: self.agent_id},
                )
        except docker.errors.DockerException as e:
            self.log.warning("agent %s: could not list GPUs with nvidia-smi in %s: %s",
                             self.agent_id, image, e)
            return []
        return parse_gpu_query(out.decode("utf-8", "replace"))

    def image_for(self, kind: str, images: Mapping[str, str] | None = None) -> str:
        """The image for a task on slots of ``kind``: the experiment's, else the agent's."""
        return ((images or {}).get(kind) or self.default_image.get(kind)
                or DEFAULT_IMAGES.get(kind) or DEFAULT_IMAGES["cpu"])

    def _ensure_image(self, client: DockerClient, image: str) -> dict[str, Any]:
        """The image's attributes, pulling it first when the engine lacks it and may pull."""
        try:
            return dict(client.images.get(image).attrs)
        except docker.errors.ImageNotFound:
            if not self.pull_images:
                raise
        self.log.info("agent %s: pulling %s", self.agent_id, image)
        return dict(client.images.pull(image).attrs)

    def _find(self, allocation_id: str) -> list[dict[str, Any]]:
        client = self.client()
        with self._engine():
            found: list[dict[str, Any]] = client.api.containers(all=True, filters={"label": [
                f"{LABEL_ALLOCATION}={allocation_id}", f"{LABEL_AGENT}={self.agent_id}"]})
        return found

    # -- the Agent interface

    def launch(self, spec: TaskSpec) -> DockerTaskHandle:
        """Create the task's container, copy its files and context in, and start it.

        Raises:
            ValueError: the spec names slots the agent does not have, or bad mounts/devices.
            docker.errors.APIError: the engine refused (no such image, bad option, ...).
            AgentUnreachable: the engine does not answer.
        """
        by_id = {s.id: s for s in self.slots}
        unknown = [i for i in spec.slot_ids if i not in by_id]
        if unknown:
            raise ValueError(f"agent {self.agent_id} has no slot(s) {unknown}")
        slots = [by_id[i] for i in spec.slot_ids]
        for name in spec.files:
            if name.startswith("/") or ".." in PurePosixPath(name).parts:
                raise ValueError(f"files: {name!r} must be a relative path inside the task dir")
        kind = "cuda" if slots and all(s.kind == "cuda" for s in slots) else "cpu"
        image = self.image_for(kind, spec.container.images)
        client = self.client()
        with self._engine():
            image_env = self._ensure_image(client, image).get("Config", {}).get("Env") or []
            image_path = next((e[5:] for e in image_env if e.startswith("PATH=")), "")
            mounts = [dict(m) for m in self.mounts]
            kwargs = container_create_kwargs(
                spec, slots, image=image, agent_id=self.agent_id, python=self.python,
                task_dir=self.task_dir, mounts=mounts, image_path=image_path,
                shm_size=self.shm_size or None, site_dir=compat_site_dir(mounts),
                extra=self.extra_create_kwargs,
            )
            container = self._create(client, kwargs)
            try:
                self._copy_in(container, spec)
                container.start()
                container.reload()
            except BaseException:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                raise
        pid = int(container.attrs.get("State", {}).get("Pid") or 0) or None
        self.log.info("agent %s: started allocation %s in container %s: %s", self.agent_id,
                      spec.allocation_id, container.short_id, " ".join(kwargs["command"]))
        return DockerTaskHandle(self, spec.allocation_id, str(container.id), pid=pid)

    def _create(self, client: DockerClient, kwargs: dict[str, Any]) -> Container:
        try:
            return client.containers.create(**kwargs)
        except docker.errors.APIError as e:
            if e.status_code != 409:
                raise
        # The name is taken: a container of an earlier try at this allocation. One that still
        # runs is a task that must not be started twice; a finished one is replaced.
        old = client.containers.get(kwargs["name"])
        if old.status in _RUNNING_STATES - {"created"}:
            raise RuntimeError(
                f"allocation {kwargs['labels'][LABEL_ALLOCATION]} already runs in container "
                f"{old.short_id} on {self.docker_host}")
        old.remove(force=True)
        return client.containers.create(**kwargs)

    def _copy_in(self, container: Container, spec: TaskSpec) -> None:
        """The task dir: its working directory and home, its files and the context archive,
        owned by the task's user. The task unpacks the context itself (task_start)."""
        task_dir = PurePosixPath(self.task_dir)
        rel = str(task_dir.relative_to("/"))
        entries: list[tuple[str, bytes | None, int]] = [
            (rel, None, 0o755), (f"{rel}/run", None, 0o700), (f"{rel}/home", None, 0o700)]
        for name, text in spec.files.items():
            parents = PurePosixPath(name).parents
            entries += [(f"{rel}/{p}", None, 0o755) for p in reversed(parents) if str(p) != "."]
            entries.append((f"{rel}/{name}", text.encode(), 0o444))
        if spec.context:
            entries.append((f"{rel}/context.tar", spec.context, 0o400))
        container.put_archive("/", _tar(entries, spec.run_as))

    def file_path(self, allocation_id: str, name: str) -> str:
        """Where the task reads ``spec.files[name]``: a path inside its container."""
        return str(PurePosixPath(self.task_dir) / name)

    def attach(self, allocation_id: str, log_offset: int, pid: int | None) -> DockerTaskHandle | None:
        """The allocation's container, found by its labels, running or exited.

        ``pid`` is not needed: the labels name the container.
        """
        found = self._find(allocation_id)
        if not found:
            return None
        handle = DockerTaskHandle(self, allocation_id, found[0]["Id"], log_offset=log_offset)
        handle.exit_status()  # fills in the pid of a running container
        return handle

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        """SIGTERM to the container's task (docker-init forwards it), or SIGKILL with ``force``."""
        assert isinstance(handle, DockerTaskHandle)
        api = self.client().api
        with self._engine():
            try:
                api.kill(handle.container_id, signal="SIGKILL" if force else "SIGTERM")
            except docker.errors.APIError as e:
                # Gone, or already stopped (409): nothing left to signal.
                if e.status_code not in (404, 409):
                    raise

    def reap(self, handle: TaskHandle) -> None:
        """Remove the finished task's container; its log goes with it."""
        assert isinstance(handle, DockerTaskHandle)
        handle.exit_status()  # keep the status readable after the container is gone
        self._remove(handle.container_id)
        handle._removed = True

    def cleanup(self, allocation_id: str) -> None:
        """Remove the allocation's container if it is still there."""
        for c in self._find(allocation_id):
            self._remove(c["Id"])

    def _remove(self, container_id: str) -> None:
        api = self.client().api
        with self._engine():
            try:
                api.remove_container(container_id, v=True, force=True)
            except docker.errors.APIError as e:
                # Gone already, or its removal under way (409).
                if e.status_code not in (404, 409):
                    raise

    def check(self) -> None:
        """Ping the engine; the first answer after a start without it brings the slots.

        Raises:
            AgentUnreachable: the engine does not answer.
        """
        client = self.client()
        with self._engine():
            try:
                client.ping()
            except docker.errors.APIError as e:
                raise AgentUnreachable(f"the Docker engine at {self.docker_host}: {e}") from e
        if not self._discovered:
            self._discover_slots()


__all__ = [
    "DEFAULT_IMAGES",
    "LABEL_AGENT",
    "LABEL_ALLOCATION",
    "DockerAgent",
    "DockerTaskHandle",
    "container_create_kwargs",
    "exit_status_from_state",
    "parse_log_frames",
    "parse_timestamp_ns",
]
