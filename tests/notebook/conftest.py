"""An IPython shell with the det_hub magics, and a real master for the end-to-end tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from det_hub.testing import MasterProcess

STEPS = Path(__file__).parents[1] / "e2e" / "contexts" / "steps"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Ran:
    """What one magic call gave back and printed (``stdout`` without IPython's ``Out[n]:``
    echo of the value)."""

    value: Any
    stdout: str
    stderr: str
    error: BaseException | None = None


@pytest.fixture(scope="session")
def shell() -> InteractiveShell:
    """The IPython shell, with ``%load_ext det_hub`` done."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "det_hub")
    return ip


def run_magic(shell: InteractiveShell, line: str, cell: str | None = None) -> Ran:
    """Runs ``%det_experiment line`` (or the cell magic) as a cell would, capturing output."""
    source = f"%det_experiment {line}" if cell is None else f"%%det_experiment {line}\n{cell}"
    with capture_output() as captured:
        result = shell.run_cell(source, store_history=False)
    stdout = captured.stdout
    if result.result is not None:
        stdout = stdout[:stdout.rindex("Out[")]
    return Ran(result.result, stdout, _ANSI.sub("", captured.stderr),
               result.error_in_exec or result.error_before_exec)


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    """The module's master (tests/conftest.py)."""
    return module_master


@pytest.fixture
def master_env(master: MasterProcess, monkeypatch: pytest.MonkeyPatch) -> MasterProcess:
    """DET_HUB_MASTER and DET_HUB_TOKEN pointing at the test master, as the hub sets them."""
    monkeypatch.setenv("DET_HUB_MASTER", master.url)
    monkeypatch.setenv("DET_HUB_TOKEN", master.token)
    return master


def closed_port_url() -> str:
    """A URL where nothing listens."""
    from det_hub.testing import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=1)
    return url
