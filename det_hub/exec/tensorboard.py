"""A TensorBoard task: TensorBoard over experiments' event files, under the master's proxy path.

``python3 -m det_hub.exec.tensorboard`` is what the master runs for ``det-hub tensorboard start
EXP...``. ``DET_HUB_TENSORBOARD_LOGDIRS`` names each experiment's TensorBoard directory (where
its trials write event files from the metrics they report); TensorBoard shows one run per
trial, under the experiment's name, and reloads them as trials write more.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from det_hub.exec._serve import bind_host, fail, free_port, http_answers, proxy_path, run_server


def logdir_spec(logdirs: dict[str, str]) -> str:
    """TensorBoard's ``--logdir_spec``: ``name:path,...``, names made safe for its syntax."""
    return ",".join(
        f"{name.replace(' ', '_').replace(':', '_').replace(',', '_')}:{path}"
        for name, path in logdirs.items())


def main() -> int:
    if importlib.util.find_spec("tensorboard") is None:
        return fail("TensorBoard is not installed where this task runs: add it to its image "
                    "(pip install tensorboard)")
    logdirs = json.loads(os.environ.get("DET_HUB_TENSORBOARD_LOGDIRS") or "{}")
    if not logdirs:
        return fail("no experiment's TensorBoard directory was given")
    for name, path in logdirs.items():
        print(f"det_hub: {name}: {path}", flush=True)
    host, base = bind_host(), proxy_path()
    port = free_port(host)
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", logdir_spec(logdirs),
            "--host", host, "--port", str(port), "--path_prefix", base.rstrip("/"),
            "--reload_interval", "5", "--load_fast", "false"]
    return run_server(argv, port, http_answers(f"http://{host}:{port}{base}"))


if __name__ == "__main__":
    sys.exit(main())
