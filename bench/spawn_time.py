"""Time from a spawn request to a ready notebook server, behind a real JupyterHub (`det-hub up`).

The clock starts when ``POST /hub/api/users/<name>/server`` is sent and stops when the hub
says the server is ready (its API polled every 20 ms); then one request through the hub's proxy
(``/user/<name>/api/status``) checks that it answers. Each run uses a fresh user and stops the
server afterwards.

* ``--spawner local``: ``det-hub up``'s default, the notebook server as a local process.
* ``--spawner docker``: DetSpawner. The server asks det_hub's scheduler for a slot and its
  container starts on the Docker engine holding it, with this checkout's Python bind-mounted
  (DET_HUB_TEST_DOCKER_HOST and DET_HUB_TEST_IMAGE, as ``scripts/test-services.sh start``
  prints them).
* ``--spawner both`` (the default): one after the other.

    python bench/spawn_time.py [--runs 5] [--spawner local|docker|both]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

from det_hub.testing import HubProcess, detspawner_config, write_docker_config


def time_one(hub: HubProcess, user: str, timeout: float = 120.0) -> float:
    """Seconds from the spawn request to a ready server that answers through the proxy."""
    token = hub.token(user)
    auth = {"Authorization": f"token {token}"}
    t0 = time.perf_counter()
    started = requests.post(f"{hub.url}/hub/api/users/{user}/server", headers=auth, timeout=60)
    started.raise_for_status()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        model = requests.get(f"{hub.url}/hub/api/users/{user}", headers=auth, timeout=10).json()
        if model["servers"].get("", {}).get("ready"):
            break
        time.sleep(0.02)
    else:
        raise RuntimeError(f"{user}'s server was not ready within {timeout:g} s")
    elapsed = time.perf_counter() - t0
    status = requests.get(f"{hub.url}/user/{user}/api/status", headers=auth, timeout=10)
    status.raise_for_status()
    requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=auth,
                    timeout=60).raise_for_status()
    return elapsed


def run(spawner: str, runs: int, root: Path) -> list[float]:
    data = root / spawner
    data.mkdir()
    extra: list[str] = []
    if spawner == "docker":
        host, image = os.environ.get("DET_HUB_TEST_DOCKER_HOST"), os.environ.get(
            "DET_HUB_TEST_IMAGE")
        if not host or not image:
            sys.exit("--spawner docker needs DET_HUB_TEST_DOCKER_HOST and DET_HUB_TEST_IMAGE "
                     "(scripts/test-services.sh start)")
        config = write_docker_config(root / "det_hub_config.py", [host], image, ["bench-a"])
        (data / "jupyterhub_config.local.py").write_text(
            detspawner_config(image, "det-hub-bench-"))
        extra = ["--master-config", str(config)]
    hub = HubProcess(data, extra)
    try:
        return [time_one(hub, f"{spawner}{i}") for i in range(runs)]
    finally:
        hub.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--spawner", choices=("local", "docker", "both"), default="both")
    args = parser.parse_args()
    kinds = ["local", "docker"] if args.spawner == "both" else [args.spawner]
    print(f"Python {sys.version.split()[0]}; {args.runs} spawns each; 1-min load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print(f"{'spawner':<10}{'median s':>10}{'min s':>8}{'max s':>8}")
    with tempfile.TemporaryDirectory(prefix="det-hub-spawn-") as tmp:
        for kind in kinds:
            times = run(kind, args.runs, Path(tmp))
            print(f"{kind:<10}{statistics.median(times):>10.2f}{min(times):>8.2f}"
                  f"{max(times):>8.2f}", flush=True)


if __name__ == "__main__":
    main()
