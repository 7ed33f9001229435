"""A real ``det-hub master`` process per test, and helpers to drive it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub.testing import MasterProcess, free_port, reap_tasks

REPO = Path(__file__).resolve().parents[2]
STEPS = Path(__file__).parent / "contexts" / "steps"

pytestmark = pytest.mark.slow


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
    proc = _master(tmp_path, sqlite_url)
    yield proc
    proc.stop()
    reap_tasks(tmp_path)


@pytest.fixture
def master_any_db(tmp_path: Path, db_url: str) -> Iterator[MasterProcess]:
    """A master on each supported database."""
    proc = _master(tmp_path, db_url)
    yield proc
    proc.stop()
    reap_tasks(tmp_path)


def _master(tmp_path: Path, db_url: str) -> MasterProcess:
    proc = MasterProcess(tmp_path / "data", db_url)
    proc.default_context = STEPS
    proc.cli_cwd = REPO
    proc.start()
    return proc


#: Debian's Chromium, which the browser tests drive through playwright-core.
CHROMIUM = "/usr/bin/chromium"
BROWSER_DIR = Path(__file__).parent / "browser"


def browser_node() -> str:
    """``node``, once Chromium and playwright-core are there too; the test fails (it is not
    skipped) when one is missing, saying how to get them."""
    node = shutil.which("node")
    driver = BROWSER_DIR / "node_modules" / "playwright-core"
    missing = [what for what, there in (
        (f"Chromium ({CHROMIUM})", os.access(CHROMIUM, os.X_OK)), ("node", node is not None),
        (f"playwright-core ({driver})", driver.is_dir())) if not there]
    if missing or node is None:
        pytest.fail(f"the browser test needs {', '.join(missing)}: make install-test "
                    "installs them")
    return node



@contextlib.contextmanager
def jupyterlab(master: MasterProcess, tmp_path: Path, work: Path, token: str,
               args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 serving ``work``, whose kernels reach ``master``, with
    its settings and state under ``tmp_path``; yields its base URL once it answers.

    Args:
        args: More ``jupyter lab`` options.
        env: More environment variables.
    """
    # No "would you like news?" prompt over the screenshots.
    notifications = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    notifications.mkdir(parents=True)
    (notifications / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false"}))
    environment = {**os.environ, "DET_HUB_MASTER": master.url, "DET_HUB_TOKEN": master.token,
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
