"""The local agent: runs tasks as processes on the master's own host.

Each task gets its own directory under the agent's work root, holding the unpacked context
(the task's working directory), its log file and, once it ends, its exit-status file. The task
is started through :mod:`det_hub.agents.local_runner` in a new session, so it outlives the
master; :meth:`LocalAgent.attach` picks it up again after a restart.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

from traitlets import Bool, Integer, Unicode

from det_hub.agents._base import (
    PYTHON_NAMES,
    Agent,
    ExitStatus,
    LogLine,
    TaskHandle,
    TaskSpec,
)
from det_hub.agents.slots import SlotInfo, discover_slots


@dataclasses.dataclass
class LocalTaskHandle(TaskHandle):
    """A task started (or re-attached) by the local agent."""

    allocation_id: str
    root: Path
    pid: int | None
    log_offset: int = 0
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

    def __init__(self, work_root: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.work_root = Path(work_root)
        self.work_root.mkdir(parents=True, exist_ok=True)
        self.slots: list[SlotInfo] = discover_slots(
            cpu_slot_cores=self.cpu_slot_cores, use_gpus=self.use_gpus
        )
        if self.max_cpu_slots and self.slots and self.slots[0].kind == "cpu":
            self.slots = self.slots[: self.max_cpu_slots]

    def task_root(self, allocation_id: str) -> Path:
        return self.work_root / allocation_id

    def file_path(self, allocation_id: str, name: str) -> str:
        return str(self.task_root(allocation_id) / name)

    def launch(self, spec: TaskSpec) -> LocalTaskHandle:
        """Unpack the context into a fresh directory and start the command there.

        The container part of the spec is not used: tasks run in the master's environment.
        """
        allocation_id = spec.allocation_id
        root = self.task_root(allocation_id)
        if root.exists():
            shutil.rmtree(root)
        workdir = root / "run"
        workdir.mkdir(parents=True)
        if spec.context:
            with tarfile.open(fileobj=io.BytesIO(spec.context), mode="r:*") as tar:
                # The archive was checked at upload; the data filter is a second line of defence.
                tar.extractall(workdir, filter="data")
        for name, text in spec.files.items():
            (root / name).write_text(text)

        slots = [s for s in self.slots if s.id in set(spec.slot_ids)]
        argv = list(spec.argv)
        if argv and argv[0] in PYTHON_NAMES:
            argv[0] = self.python
        task_env = dict(os.environ)
        task_env.update(spec.env)
        task_env["PYTHONUNBUFFERED"] = "1"
        # `python3 train.py` in a config must find the Python that has det_hub installed.
        bindir = os.path.dirname(self.python)
        task_env["PATH"] = bindir + os.pathsep + task_env.get("PATH", os.defpath)
        # Determined's import names resolve to det_hub's modules inside tasks.
        site_dir = Path(__file__).resolve().parent.parent / "compat" / "site"
        if site_dir.is_dir():
            task_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(site_dir), task_env.get("PYTHONPATH", "")) if p)
        cpus: list[int] = sorted({c for s in slots for c in s.cpus})
        if slots and all(s.kind == "cuda" for s in slots):
            task_env["CUDA_VISIBLE_DEVICES"] = ",".join(s.device for s in slots)
        else:
            task_env["CUDA_VISIBLE_DEVICES"] = ""
            task_env["OMP_NUM_THREADS"] = str(max(1, len(cpus)))
        handle = LocalTaskHandle(allocation_id, root, pid=None)
        cmd = [self.python, "-m", "det_hub.agents.local_runner",
               "--log", str(handle.log_path), "--exit-file", str(handle.exit_path)]
        if cpus and slots and slots[0].kind == "cpu":
            cmd += ["--cpus", ",".join(map(str, cpus))]
        cmd += ["--", *argv]
        with open(root / "runner.err", "wb") as runner_err:
            proc = subprocess.Popen(
                cmd, cwd=workdir, env=task_env, start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=runner_err,
            )
        handle.pid, handle.process = proc.pid, proc
        self.log.info("started allocation %s (pid %d): %s", allocation_id, proc.pid, " ".join(argv))
        return handle

    def attach(self, allocation_id: str, log_offset: int, pid: int | None) -> LocalTaskHandle | None:
        """Re-adopt a task started before a master restart.

        Returns ``None`` when the task is gone without an exit status (its runner was killed).
        """
        handle = LocalTaskHandle(allocation_id, self.task_root(allocation_id), pid, log_offset)
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

    def kill(self, handle: TaskHandle, *, force: bool = False) -> None:
        assert isinstance(handle, LocalTaskHandle)
        handle.signal(signal.SIGKILL if force else signal.SIGTERM)

    def cleanup(self, allocation_id: str) -> None:
        """Remove a finished task's directory."""
        shutil.rmtree(self.task_root(allocation_id), ignore_errors=True)
