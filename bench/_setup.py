"""What the benchmarks share: a master process on a fresh database, and a context to run."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from det_hub.testing import (
    MasterProcess,
    postgres_database,
    remove_agent_containers,
    write_docker_config,
)

#: The test engines and image, as ``scripts/test-services.sh start`` prints them.
DOCKER_HOSTS = ("DET_HUB_TEST_DOCKER_HOST", "DET_HUB_TEST_DOCKER_HOST_2")
DOCKER_IMAGE = "DET_HUB_TEST_IMAGE"


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


def docker_engines(most: int = 2) -> tuple[list[str], str]:
    """The test engines' addresses (the second only when it is set, at most ``most``) and
    the image their containers run; exits with a message when they are not set."""
    hosts = [os.environ.get(name, "") for name in DOCKER_HOSTS]
    image = os.environ.get(DOCKER_IMAGE, "")
    if not hosts[0] or not image:
        sys.exit(f"{DOCKER_HOSTS[0]} and {DOCKER_IMAGE} are not set: run `make bench`, or "
                 "start the engines with `scripts/test-services.sh start > .test-services.env`"
                 " and `. ./.test-services.env` first")
    return [h for h in hosts if h][:most], image


@contextlib.contextmanager
def running_master(kind: str, agents: str = "local", engines: int = 2,
                   master_args: list[str] | None = None) -> Iterator[MasterProcess]:
    """A master on a fresh ``kind`` database ("sqlite" or "postgres").

    Args:
        agents: "local" for the embedded local agent; "docker" for the test Docker engines
            (DET_HUB_TEST_DOCKER_HOST, and DET_HUB_TEST_DOCKER_HOST_2 when set) as agents,
            with DET_HUB_TEST_IMAGE as their image.
        engines: with "docker", use at most this many engines.
        master_args: more settings for the master (``--MasterApp.ingest_workers=0``).
    """
    if agents not in ("local", "docker"):
        raise ValueError(f"agents: {agents!r} is neither 'local' nor 'docker'")
    hosts: list[str] = []
    agent_ids: list[str] = []
    extra: list[str] = []
    with fresh_database(kind) as url, tempfile.TemporaryDirectory() as tmp:
        if agents == "docker":
            hosts, image = docker_engines(engines)
            # Names of this process's own: a bench running beside tests or another bench on
            # the same engines leaves their containers alone.
            agent_ids = [f"bench-{os.getpid()}-{i}" for i in range(len(hosts))]
            config = write_docker_config(Path(tmp) / "det_hub_config.py", hosts, image,
                                         agent_ids)
            extra = ["--config", str(config)]
        master = MasterProcess(Path(tmp) / "data", url, [*extra, *(master_args or [])])
        master.start()
        try:
            yield master
        finally:
            master.stop()
            if hosts:
                remove_agent_containers(hosts, agent_ids)


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
