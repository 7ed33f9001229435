"""What the fault tests share: masters on a database of the test's choosing, and a PostgreSQL
server of the test's own (see :mod:`.private_postgres`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from det_hub.testing import MasterProcess, reap_tasks

from .private_postgres import PrivatePostgres


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        yield pg
    finally:
        pg.close()


#: The context a fault test's master sends when the test gives none: the end-to-end tests'
#: step-counting Core API script.
STEPS = Path(__file__).resolve().parent.parent / "e2e" / "contexts" / "steps"

StartMaster = Callable[..., MasterProcess]


@pytest.fixture
def start_master(tmp_path: Path) -> Iterator[StartMaster]:
    """``start_master(db_url, extra_args=(), *, context=STEPS, port=None)``: a master on
    ``db_url`` with its data under the test's directory (``port``: the one it listens on, for
    a test that puts something in front of it); each is stopped at the end, and the tasks
    left reaped."""
    started: list[MasterProcess] = []

    def start(db_url: str, extra_args: Sequence[str] = (), *, context: Path = STEPS,
              port: int | None = None) -> MasterProcess:
        master = MasterProcess(tmp_path / "data", db_url, list(extra_args))
        if port is not None:
            master.port, master.url = port, f"http://127.0.0.1:{port}"
        master.default_context = context
        master.start()
        started.append(master)
        return master

    yield start
    for master in started:
        master.stop()
    reap_tasks(tmp_path)
