"""A tiny stand-in for the master's trial-side HTTP surface, and fixtures around it.

It records every request and answers the shapes of docs/rest-api.md. It can be stopped and
started again on the same port to play a master restart.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

TOKEN = "alloc-token-123"
TRIAL_ID = 7
EXPERIMENT_ID = 1
ALLOCATION_ID = "7.0"



def reported_rows(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a metrics report, from either form the master takes: rows, or columns
    (``steps``, one list per metric, and ``report_times`` in seconds since 1970)."""
    if "steps" not in body:
        return list(body["metrics"])
    times = body.get("report_times")
    return [{"steps_completed": step,
             "metrics": {name: values[i] for name, values in body["metrics"].items()},
             **({"report_time": dt.datetime.fromtimestamp(times[i], dt.timezone.utc)
                 .isoformat().replace("+00:00", "Z")} if times else {})}
            for i, step in enumerate(body["steps"])]

class MasterState:
    """What the stand-in master has received, and what it should answer. Survives restarts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.metric_rows: list[tuple[str, dict[str, Any]]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.completed_ops: list[dict[str, Any]] = []
        self.ops: list[int] = []  # lengths still to hand out; then completed
        self.null_op = False  # answer {"operation": null, "completed": false}
        self.lose_metric_answers = 0  # metric batches to take in, then hang up without answering
        self.preempt = threading.Event()
        self.stopping = threading.Event()

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r["method"] == method and r["path"] == path)

    def paths(self) -> list[str]:
        with self.lock:
            return [f"{r['method']} {r['path']}" for r in self.requests]


def _handler(state: MasterState) -> type[BaseHTTPRequestHandler]:
    prefix = "/api/v1"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> tuple[str, dict[str, list[str]], Any]:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            path = url.path[len(prefix) :] if url.path.startswith(prefix) else url.path
            with state.lock:
                state.requests.append(
                    {
                        "method": self.command,
                        "path": path,
                        "query": urllib.parse.parse_qs(url.query),
                        "body": body,
                        "auth": self.headers.get("Authorization"),
                        "time": time.monotonic(),
                    }
                )
            return path, urllib.parse.parse_qs(url.query), body

        def do_GET(self) -> None:
            path, query, _ = self._record()
            if path == f"/allocations/{ALLOCATION_ID}/signals/preemption":
                timeout = min(float(query.get("timeout_seconds", ["60"])[0]), 60.0)
                end = time.monotonic() + timeout
                # Long poll: answer as soon as the flag flips, else after the timeout.
                while not state.preempt.is_set() and not state.stopping.is_set():
                    if time.monotonic() >= end:
                        break
                    state.preempt.wait(0.02)
                self._reply(200, {"preempt": state.preempt.is_set()})
            elif path == f"/trials/{TRIAL_ID}/searcher/operation":
                with state.lock:
                    if state.null_op:
                        body: Any = {"operation": None, "completed": False}
                    elif state.ops:
                        body = {"operation": {"length": state.ops[0]}, "completed": False}
                    else:
                        body = {"operation": None, "completed": True}
                self._reply(200, body)
            elif path.startswith("/checkpoints/"):
                uuid = path.rsplit("/", 1)[1]
                with state.lock:
                    ckpt = state.checkpoints.get(uuid)
                if ckpt is None:
                    self._reply(404, {"error": f"checkpoint {uuid} not found", "details": []})
                else:
                    self._reply(200, {"checkpoint": ckpt})
            else:
                self._reply(404, {"error": f"no route {path}", "details": []})

        def do_POST(self) -> None:
            path, _, body = self._record()
            if path == f"/trials/{TRIAL_ID}/metrics":
                with state.lock:
                    for row in reported_rows(body):
                        state.metric_rows.append((body["group"], row))
                    lose = state.lose_metric_answers > 0
                    state.lose_metric_answers -= lose
                if lose:  # the answer is lost on its way back
                    self.close_connection = True
                    return
                self._reply(200, {"count": len(reported_rows(body))})
            elif path == "/checkpoints":
                with state.lock:
                    state.checkpoints[body["uuid"]] = dict(body)
                self._reply(201, {"checkpoint": body})
            elif path == f"/trials/{TRIAL_ID}/searcher/completed_operation":
                with state.lock:
                    state.completed_ops.append(body)
                    if state.ops and state.ops[0] == body["length"]:
                        state.ops.pop(0)
                self._reply(200, {})
            elif path in (
                f"/trials/{TRIAL_ID}/progress",
                f"/trials/{TRIAL_ID}/early_exit",
                f"/trials/{TRIAL_ID}/alerts",
                f"/trials/{TRIAL_ID}/source_info",
                f"/allocations/{ALLOCATION_ID}/signals/ack_preemption",
            ):
                self._reply(200, {})
            else:
                self._reply(404, {"error": f"no route {path}", "details": []})

    return Handler


class FakeMaster:
    """An HTTP server on 127.0.0.1 answering like the master; stop() and start() keep the port."""

    def __init__(self, state: MasterState, port: int) -> None:
        self.state = state
        self.port = port
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.state.stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self.state))
        server.daemon_threads = True
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self.state.stopping.set()
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    fake = FakeMaster(MasterState(), _free_port())
    fake.start()
    yield fake
    fake.stop()


def write_cluster_info(
    directory: Path,
    master_url: str,
    storage_dir: Path,
    *,
    hparams: dict[str, Any] | None = None,
    latest_checkpoint: str | None = None,
) -> Path:
    """Write a cluster-info file as the master gives a trial, and return its path."""
    info = {
        "master_url": master_url,
        "cluster_id": "test-cluster",
        "agent_id": "local",
        "allocation_id": ALLOCATION_ID,
        "task_id": f"trial-{TRIAL_ID}",
        "task_type": "TRIAL",
        "slot_ids": [0],
        "container_addrs": ["127.0.0.1"],
        "trial": {
            "trial_id": TRIAL_ID,
            "experiment_id": EXPERIMENT_ID,
            "trial_seed": 123,
            "hparams": hparams if hparams is not None else {"learning_rate": 0.05, "hidden": 16},
            "config": {"name": "t", "data": {"url": "x"}},
            "steps_completed": 0,
            "latest_checkpoint": latest_checkpoint,
        },
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": str(storage_dir),
            "storage_path": None,
        },
    }
    path = directory / "cluster_info.json"
    path.write_text(json.dumps(info))
    return path


def trial_env(master_url: str, info_path: Path) -> dict[str, str]:
    """The environment variables the master gives a trial process."""
    return {
        "DET_HUB_MASTER": master_url,
        "DET_HUB_ALLOCATION_TOKEN": TOKEN,
        "DET_HUB_ALLOCATION_ID": ALLOCATION_ID,
        "DET_HUB_TRIAL_ID": str(TRIAL_ID),
        "DET_HUB_EXPERIMENT_ID": str(EXPERIMENT_ID),
        "DET_HUB_CLUSTER_INFO": str(info_path),
    }


@pytest.fixture
def in_trial(master: FakeMaster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    """This process set up as a trial of the stand-in master; checkpoints in tmp_path/storage."""
    storage = tmp_path / "storage"
    storage.mkdir()
    info_path = write_cluster_info(tmp_path, master.url, storage)
    for key, value in trial_env(master.url, info_path).items():
        monkeypatch.setenv(key, value)
    return master


@pytest.fixture
def make_trial_env(master: FakeMaster, tmp_path: Path) -> Any:
    """A function writing a cluster-info file and giving the env of a trial subprocess."""

    def make(latest_checkpoint: str | None = None, **extra: str) -> dict[str, str]:
        storage = tmp_path / "storage"
        storage.mkdir(exist_ok=True)
        info_dir = tmp_path / f"info-{latest_checkpoint or 'fresh'}"
        info_dir.mkdir(exist_ok=True)
        info_path = write_cluster_info(
            info_dir, master.url, storage, latest_checkpoint=latest_checkpoint
        )
        return {**trial_env(master.url, info_path), **extra}

    return make
