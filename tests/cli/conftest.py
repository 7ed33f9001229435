from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The fake master is shared with the client tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "client"))

from cli_result import Result  # noqa: E402
from fake_master import FakeMaster  # noqa: E402

from det_hub.cli.main import main  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the developer's real master, token or data directory."""
    for name in ("DET_HUB_MASTER", "DET_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DET_HUB_DATA_DIR", str(tmp_path_factory.mktemp("data_dir")))


@pytest.fixture
def fake_master() -> Iterator[FakeMaster]:
    master = FakeMaster().start()
    yield master
    master.stop()


@pytest.fixture
def det(fake_master: FakeMaster, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Runs ``det-hub -m <fake master> --token t ARGS`` in-process."""

    def run(*argv: str) -> Result:
        code = main(["-m", fake_master.url, "--token", "t", *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
