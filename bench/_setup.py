"""What the benchmarks share: a master process on a fresh database, and a context to run."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from det_hub.testing import MasterProcess, postgres_database


@contextlib.contextmanager
def fresh_database(kind: str) -> Iterator[str]:
    """A new, empty database URL: an SQLite file, or a PostgreSQL database that is dropped
    afterwards (on the server named by DET_HUB_TEST_PG_URL, as `make bench` starts it)."""
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "sqlite":
            yield f"sqlite:///{tmp}/bench.db"
            return
        base_url = os.environ.get("DET_HUB_TEST_PG_URL")
        if not base_url:
            sys.exit("DET_HUB_TEST_PG_URL is not set: run `make bench`, or start the services "
                     "with scripts/test-services.sh first")
        with postgres_database(base_url, prefix="dethub_bench") as url:
            yield url


@contextlib.contextmanager
def running_master(kind: str) -> Iterator[MasterProcess]:
    with fresh_database(kind) as url, tempfile.TemporaryDirectory() as tmp:
        master = MasterProcess(Path(tmp) / "data", url)
        master.start()
        try:
            yield master
        finally:
            master.stop()


def script_context(directory: Path, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.py").write_text(source)
    return directory


def single_config(name: str, length: int = 1) -> dict[str, object]:
    return {"name": name, "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss",
                         "max_length": {"batches": length}}}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by the inclusive method."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
