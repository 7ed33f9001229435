"""A TensorBoard task: TensorBoard over experiments' event files, under the master's proxy path.

``python3 -m det_hub.exec.tensorboard`` is what the master runs for ``det-hub tensorboard start
EXP...``. ``DET_HUB_TENSORBOARD_LOGDIRS`` names each experiment's TensorBoard directory (where
its trials write event files from the metrics they report); TensorBoard shows one run per
trial, under the experiment's name, and reloads them as trials write more.

Experiments whose files are in remote storage (S3) come in ``DET_HUB_TENSORBOARD_STORAGES``
(``{"experiment 3": {"experiment_id": 3, "checkpoint_storage": {...}}}``) instead: TensorBoard
cannot read ``s3://`` without TensorFlow, so the task keeps a local copy of each in a
temporary directory, brought up to date every few seconds, and shows that.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from det_hub.env_names import TENSORBOARD_LOGDIRS_ENV, TENSORBOARD_STORAGES_ENV
from det_hub.exec._serve import bind_host, fail, free_port, http_answers, proxy_path, run_server

#: Seconds between downloads of remote event files (TensorBoard reloads every 5 s).
SYNC_SECS = 5.0


class RemoteEventFiles:
    """Local copies of experiments' TensorBoard files kept in remote storage.

    Args:
        remote: Run name to ``{"experiment_id": ID, "checkpoint_storage": CONFIG}``.
        root: A directory for the copies, one sub-directory per run.

    Raises:
        ValueError: A storage config is invalid.
    """

    def __init__(self, remote: dict[str, dict[str, Any]], root: Path) -> None:
        from det_hub.storage import build_storage

        self.root = root
        self.runs = [
            (name, int(spec["experiment_id"]), build_storage(spec["checkpoint_storage"]),
             root / f"run{i}")
            for i, (name, spec) in enumerate(remote.items())
        ]
        self._failing: set[str] = set()
        self._stop = threading.Event()

    @property
    def logdirs(self) -> dict[str, str]:
        """Run name to its local directory."""
        return {name: str(path) for name, _, _, path in self.runs}

    def sync(self) -> None:
        """Bring every copy up to date; a failure is printed once (until it recovers)."""
        for name, exp_id, storage, path in self.runs:
            path.mkdir(parents=True, exist_ok=True)
            try:
                storage.download_tensorboard(exp_id, path)
            except Exception as exc:
                if name not in self._failing:
                    print(f"det_hub: cannot fetch {name}'s event files from {storage} "
                          f"(will retry): {exc}", file=sys.stderr, flush=True)
                self._failing.add(name)
            else:
                self._failing.discard(name)

    def start(self, interval: float = SYNC_SECS) -> None:
        """Sync every ``interval`` seconds in a background thread."""

        def loop() -> None:
            while not self._stop.wait(interval):
                self.sync()

        threading.Thread(target=loop, name="det_hub-tensorboard-fetch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def logdir_spec(logdirs: dict[str, str]) -> str:
    """TensorBoard's ``--logdir_spec``: ``name:path,...``, names made safe for its syntax."""
    return ",".join(
        f"{name.replace(' ', '_').replace(':', '_').replace(',', '_')}:{path}"
        for name, path in logdirs.items())


def main() -> int:
    if importlib.util.find_spec("tensorboard") is None:
        return fail("TensorBoard is not installed where this task runs: add it to its image "
                    "(pip install tensorboard)")
    logdirs = json.loads(os.environ.get(TENSORBOARD_LOGDIRS_ENV) or "{}")
    remote_specs = json.loads(os.environ.get(TENSORBOARD_STORAGES_ENV) or "{}")
    if not logdirs and not remote_specs:
        return fail("no experiment's TensorBoard directory was given")
    remote = None
    if remote_specs:
        root = Path(tempfile.mkdtemp(prefix="det_hub_tensorboard_"))
        try:
            remote = RemoteEventFiles(remote_specs, root)
        except (ValueError, ImportError) as exc:
            return fail(f"cannot read the event files' storage: {exc}")
        remote.sync()  # TensorBoard starts with what there is
        remote.start()
        logdirs.update(remote.logdirs)
    for name, path in logdirs.items():
        print(f"det_hub: {name}: {path}", flush=True)
    host, base = bind_host(), proxy_path()
    port = free_port(host)
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", logdir_spec(logdirs),
            "--host", host, "--port", str(port), "--path_prefix", base.rstrip("/"),
            "--reload_interval", "5", "--load_fast", "false"]
    try:
        return run_server(argv, port, http_answers(f"http://{host}:{port}{base}"))
    finally:
        if remote is not None:
            remote.stop()
            shutil.rmtree(remote.root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
