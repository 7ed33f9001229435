"""A PostgreSQL server of a fault test's own, which the test may stop and start: never the
suite's shared server (``DET_HUB_TEST_PG_URL``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from det_hub.testing import free_port


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        message = "PostgreSQL is not installed (make system-deps installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found[-1].parent


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own, in a temporary directory, on 127.0.0.1."""

    def __init__(self) -> None:
        self.bin = _pg_bin()
        # Not under tmp_path: as root, the server runs as the postgres account, which must
        # reach its data directory (pytest's are private to root).
        self.root = Path(tempfile.mkdtemp(prefix="det-hub-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://dethub@127.0.0.1:{self.port}/dethub"
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "dethub", "--auth=trust")
        self.start()
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=dethub dbname=postgres",
                             autocommit=True) as conn:
            conn.execute("CREATE DATABASE dethub")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self._as_postgres, str(self.bin / tool), *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{tool} {' '.join(args)}:\n{done.stdout}{done.stderr}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                  "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} "
                        "-c fsync=off", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
