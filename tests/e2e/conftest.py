"""A real ``det-hub master`` process per test, and helpers to drive it."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

REPO = Path(__file__).resolve().parents[2]
STEPS = Path(__file__).parent / "contexts" / "steps"
DET_HUB = str(Path(sys.executable).parent / "det-hub")
TERMINAL = ("COMPLETED", "CANCELED", "ERROR")

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MasterProcess:
    """``det-hub master`` on 127.0.0.1 with its own data directory and database."""

    def __init__(self, data_dir: Path, db_url: str) -> None:
        self.data_dir = data_dir
        self.db_url = db_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.log_path = data_dir / "master.log"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process writes to it
        self.proc = subprocess.Popen(
            [DET_HUB, "master", "--data-dir", str(self.data_dir), "--db", self.db_url,
             "--port", str(self.port), "--MasterApp.kill_grace_seconds=3"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
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

    def create(self, config: dict[str, Any] | str, context: Path = STEPS,
               activate: bool = True) -> requests.Response:
        text = config if isinstance(config, str) else yaml.safe_dump(config)
        return self.api("POST", "/experiments", json={
            "config": text, "context": pack(context), "activate": activate})

    def create_ok(self, config: dict[str, Any], **kwargs: Any) -> int:
        r = self.create(config, **kwargs)
        assert r.status_code == 201, r.text
        return int(r.json()["experiment"]["id"])

    def experiment(self, eid: int) -> dict[str, Any]:
        return self.get(f"/experiments/{eid}")["experiment"]  # type: ignore[no-any-return]

    def trials(self, eid: int) -> list[dict[str, Any]]:
        return self.get(f"/experiments/{eid}/trials")["trials"]  # type: ignore[no-any-return]

    def logs(self, trial_id: int) -> list[str]:
        r = self.api("GET", f"/trials/{trial_id}/logs")
        return [json.loads(line)["message"] for line in r.text.splitlines()]

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
        return self.wait(lambda: (e := self.experiment(eid))["state"] in states and e,  # type: ignore[no-any-return]
                         timeout)

    def cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, DET_HUB_MASTER=self.url, DET_HUB_TOKEN=self.token)
        done = subprocess.run([DET_HUB, *args], capture_output=True, text=True, env=env,
                              timeout=180, cwd=REPO)
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done


def pack(directory: Path) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            if "__pycache__" not in path.parts:
                tar.add(path, str(path.relative_to(directory)), recursive=False)
    return base64.b64encode(buf.getvalue()).decode()


def steps_config(name: str = "steps", length: int = 30, max_restarts: int = 0,
                 **hparams: Any) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": hparams,
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
        "max_restarts": max_restarts,
    }


@pytest.fixture
def master(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    """A master on SQLite."""
    proc = MasterProcess(tmp_path / "data", sqlite_url)
    proc.start()
    yield proc
    proc.stop()
    _reap_tasks(tmp_path)


@pytest.fixture
def master_any_db(tmp_path: Path, db_url: str) -> Iterator[MasterProcess]:
    """A master on each supported database."""
    proc = MasterProcess(tmp_path / "data", db_url)
    proc.start()
    yield proc
    proc.stop()
    _reap_tasks(tmp_path)


def _reap_tasks(tmp_path: Path) -> None:
    """Trials outlive the master by design; a finished test must not leave any behind."""
    marker = str(tmp_path).encode()
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            cmdline = (pid_dir / "cmdline").read_bytes()
        except OSError:
            continue
        if b"local_runner" in cmdline and marker in cmdline:
            try:
                os.killpg(int(pid_dir.name), signal.SIGKILL)
            except OSError:
                pass
