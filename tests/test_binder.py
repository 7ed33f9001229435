"""The Binder demo's start script, run here as repo2docker runs it (``binder/start CMD``): it
starts the embedded master, and the command it hands over to reaches it with the CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_hub.testing import free_port

REPO = Path(__file__).resolve().parent.parent
START = REPO / "binder" / "start"

pytestmark = pytest.mark.slow


@pytest.fixture
def binder_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = dict(os.environ, HOME=str(tmp_path),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               DET_HUB_MASTER=f"http://127.0.0.1:{free_port()}")
    env.pop("DET_HUB_TOKEN", None)
    env.pop("DET_HUB_DATA_DIR", None)
    yield env
    pid_file = tmp_path / ".det_hub" / "master.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_the_start_script_runs_the_master_for_the_notebook_session(
        binder_env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run([str(START), sys.executable, "-m", "det_hub.cli.main", "experiment",
                           "list", "--json"], env=binder_env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["experiments"] == []
    assert (tmp_path / ".det_hub" / "admin-token").exists()
    requirements = (REPO / "binder" / "requirements.txt").read_text()
    assert "-e .[pytorch,notebook,tensorboard]" in requirements
    assert "jupyter-server-proxy" in requirements


def test_the_start_script_says_why_when_the_master_cannot_start(
        binder_env: dict[str, str]) -> None:
    port = int(binder_env["DET_HUB_MASTER"].rsplit(":", 1)[1])
    with socket.socket() as taken:  # something else holds the port and answers no HTTP
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = subprocess.run([str(START), "true"], env=binder_env, capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 1
    assert "the master did not start" in done.stderr
