from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_master import FakeMaster


@pytest.fixture
def fake_master() -> Iterator[FakeMaster]:
    master = FakeMaster().start()
    yield master
    master.stop()


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the developer's real master, token or data directory."""
    for name in ("DET_HUB_MASTER", "DET_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DET_HUB_DATA_DIR", str(tmp_path_factory.mktemp("data_dir")))
