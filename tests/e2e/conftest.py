"""A real ``det-hub master`` process per test, and helpers to drive it."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from det_hub.testing import MasterProcess, jupyterlab_server, reap_tasks

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



def jupyterlab(master: MasterProcess, tmp_path: Path, work: Path, token: str,
               args: Sequence[str] = (), env: Mapping[str, str] | None = None,
               ) -> contextlib.AbstractContextManager[str]:
    """A JupyterLab server on 127.0.0.1 serving ``work``, whose kernels reach ``master``
    (see :func:`det_hub.testing.jupyterlab_server`)."""
    return jupyterlab_server(master.url, master.token, tmp_path, work, token, args, env)
