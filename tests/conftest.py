"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.store import Store
from det_hub.testing import MasterProcess, postgres_database, required_env

# =============================================================================================
# Databases
#
# ``db_url`` is parametrised over SQLite and PostgreSQL, so a test written once runs on both.
# Every test gets a fresh, empty database: a new SQLite file, or a uniquely named PostgreSQL
# database created on the server at DET_HUB_TEST_PG_URL (``scripts/test-services.sh start``)
# and dropped afterwards. Without that variable the PostgreSQL runs are skipped, except in CI,
# where they fail.
# =============================================================================================

PG_URL_ENV = "DET_HUB_TEST_PG_URL"


def _pg_base_url() -> str:
    [url] = required_env(PG_URL_ENV)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """URL of a new SQLite database file."""
    return f"sqlite:///{tmp_path / 'det_hub.db'}"


@pytest.fixture
def postgresql_url() -> Iterator[str]:
    """URL of a new, empty PostgreSQL database, dropped after the test."""
    with postgres_database(_pg_base_url()) as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """URL of a fresh database, once per supported kind."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """An open store on a fresh database (SQLite and PostgreSQL)."""
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


# ============================================================================ end of databases


#: The e2e tests' Core API script: counts batches, reports and checkpoints (see its docstring).
STEPS = Path(__file__).resolve().parent / "e2e" / "contexts" / "steps"


def _steps_experiment(length: int, sleep: float, name: str = "steps",
                      report_every: int = 2) -> dict[str, Any]:
    return {
        "name": name, "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": sleep, "report_every": report_every},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
        "max_restarts": 0,
    }


@pytest.fixture
def steps_experiment() -> Callable[..., dict[str, Any]]:
    """``steps_experiment(length, sleep, name="steps", report_every=2)``: the config of a
    single-trial experiment of :data:`STEPS` that reports every ``report_every`` batches and
    sleeps ``sleep`` seconds per batch."""
    return _steps_experiment


@pytest.fixture(scope="module")
def module_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """One master on SQLite for a test module, with :data:`STEPS` as its default context;
    what is still running at the end is killed, and waited for."""
    base = tmp_path_factory.mktemp("master")
    proc = MasterProcess(base / "data", f"sqlite:///{base / 'det_hub.db'}")
    proc.default_context = STEPS
    proc.start()
    yield proc
    for exp in proc.get("/experiments?limit=1000")["experiments"]:
        if exp["state"] in ("ACTIVE", "PAUSED"):
            proc.api("POST", f"/experiments/{exp['id']}/kill")
    proc.wait(lambda: all(e["state"] in ("COMPLETED", "CANCELED", "ERROR")
                          for e in proc.get("/experiments?limit=1000")["experiments"]), 60)
    proc.stop()

