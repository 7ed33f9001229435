"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from det_hub.store import Store
from det_hub.testing import postgres_database, required_env

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
