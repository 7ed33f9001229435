"""Idle time of a slot between two short trials: from one trial's last line to the next one's
first line, ``import det_hub.core`` done.

One cluster (the master's loop, its default 0.2 s round, a SQLite store) with a one-slot local
agent; ``--trials`` trials queued at once, each ``import det_hub.core``, print the time, print
it again, exit. The gap between one trial's last print and the next one's first covers the
interpreter's exit, the runner noticing it, the cluster freeing the slot, placing and starting
the next task (runner, sandbox, task_start) and that task's interpreter start and import. Three
ways, one after the other in the same process:

* ``polled``: ends found by the cluster's round, every task started from scratch (what the
  master did before ends were announced by the agent);
* ``event``: the agent tells the cluster of an end at once, tasks start from scratch;
* ``warm``: as ``event``, and queued trials are prepared while the slot is busy.

    python bench/slot_handover.py [--trials 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from det_hub.agents import TaskHandle
from det_hub.agents.local import LocalAgent
from det_hub.service.bus import AllocationExited, EventBus
from det_hub.service.cluster import Cluster, LaunchSpec
from det_hub.service.unix_accounts import task_account
from det_hub.store import Store
from det_hub.testing import targz

SCRIPT = """
import time
import det_hub.core
print("first", time.time(), flush=True)
print("last", time.time(), flush=True)
"""


class PolledAgent(LocalAgent):
    """A local agent that does not announce ends: the cluster's rounds find them."""

    def notify_exit(self, handle: TaskHandle, callback: Callable[[], None]) -> bool:
        return False


async def gaps(mode: str, trials: int, work: Path) -> list[float]:
    """Seconds from each trial's last line to the next one's first line."""
    store = await Store.open(f"sqlite:///{work / 'store.db'}")
    user = await store.create_user("bench")
    exp = await store.create_experiment(
        name=mode, owner_id=user.id, config={}, original_config="", context=None,
        state="ACTIVE", searcher_metric="loss", smaller_is_better=True)
    rows = [await store.create_trial(experiment_id=exp.id, request_id=f"r{i}", hparams={},
                                     seed=1, state="ACTIVE") for i in range(trials)]
    bus = EventBus()
    ended: list[str] = []

    async def on_exit(event: AllocationExited) -> None:
        if not event.status.success:
            raise RuntimeError(f"{event.alloc.id} failed: {event.status}")
        ended.append(event.alloc.id)

    bus.subscribe(AllocationExited, on_exit)
    kind = PolledAgent if mode == "polled" else LocalAgent
    agent = kind(work_root=work / "tasks", use_gpus=False, max_cpu_slots=1,
                 warm_start=mode == "warm")
    cluster = Cluster(store, agent, bus)
    cluster.start()
    try:
        for row in rows:
            await cluster.request(LaunchSpec(
                owner="bench", slots=1, cluster_info={}, context=targz({"t.py": SCRIPT}),
                env={}, argv=["python3", "t.py"], trial_id=row.id, experiment_id=exp.id,
                run_as=task_account() if os.geteuid() == 0 else None))
        while len(ended) < trials:
            await asyncio.sleep(0.05)
        times = []
        for row in rows:
            lines = {line.message.split()[0]: float(line.message.split()[1])
                     for line in await store.get_logs(row.id)}
            times.append((lines["first"], lines["last"]))
    finally:
        await cluster.stop()
        await store.close()
    times.sort()
    return [nxt[0] - prev[1] for prev, nxt in zip(times, times[1:], strict=False)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    print(f"slot idle between trials (last line -> next first line), {args.trials} trials, "
          "1 slot")
    for mode in ("polled", "event", "warm"):
        with tempfile.TemporaryDirectory(prefix="det-hub-bench-") as work:
            found = asyncio.run(gaps(mode, args.trials, Path(work)))
        print(f"  {mode:7s} median {statistics.median(found):.3f} s  "
              f"min {min(found):.3f}  max {max(found):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
