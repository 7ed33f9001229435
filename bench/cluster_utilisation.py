"""Slot utilisation over an ASHA search: how busy the scheduler keeps the cluster's slots.

An ``adaptive_asha`` search (stop mode, aggressive bracket, rungs at 4, 8 and 16 batches) of
``--trials`` one-slot trials runs the synthetic learning curve of
``tests/e2e/contexts/curves/train.py``, sleeping ``--sleep`` seconds a batch so a trial lasts
seconds. Its ``max_concurrent_trials`` is twice the cluster's slots, so trials wait in the
queue for most of the search and a slot left idle is the master's doing, not the searcher's.

While it runs, ``GET /api/v1/agents`` (which slots hold an allocation) and ``GET
/api/v1/jobs`` (what each job asks for and holds) are sampled every 50 ms. A sample has work
pending when some job has ``slots_requested > slots_allocated``. The figures:

* busy while pending: busy slot-seconds over slot-seconds, over the samples with work pending
  (each sample weighs the time to the next). Aim: 95 % or more.
* busy overall: the same over the whole search, the first trials' start and the last ones'
  tail included.
* wall time from create to the experiment's end, trials, samples.

Agents: ``--agent docker`` (the default) runs on the test Docker engines (DET_HUB_TEST_DOCKER_HOST,
and DET_HUB_TEST_DOCKER_HOST_2 when set; two CPU slots each), ``--agent local`` on the embedded
local agent. SQLite store.

    python bench/cluster_utilisation.py [--trials 16] [--sleep 0.25] [--agent docker|local]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).parent))
from _setup import running_master  # noqa: E402

from det_hub.testing import MasterProcess  # noqa: E402

CURVES = Path(__file__).resolve().parents[1] / "tests" / "e2e" / "contexts" / "curves"
MAX_LENGTH = 16
EVERY = 0.05
AIM = 0.95


@dataclasses.dataclass
class Sample:
    t: float
    slots: int
    busy: int
    pending: bool


class Sampler:
    """Samples the agents' slots and the job queue every ``every`` seconds on a thread."""

    def __init__(self, master: MasterProcess, every: float = EVERY) -> None:
        self.every = every
        self.samples: list[Sample] = []
        self.errors = 0
        self._url = master.url + "/api/v1"
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {master.token}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._session.close()

    def _get(self, path: str, key: str) -> list[dict[str, Any]]:
        r = self._session.get(self._url + path, timeout=10)
        r.raise_for_status()
        return list(r.json()[key])

    def _run(self) -> None:
        next_at = time.perf_counter()
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                jobs = self._get("/jobs", "jobs")
                agents = self._get("/agents", "agents")
            except (requests.RequestException, ValueError, KeyError):
                self.errors += 1
            else:
                slots = [s for a in agents if a["connected"] and a["enabled"]
                         for s in a["slots"]]
                self.samples.append(Sample(
                    t, len(slots), sum(s["allocation_id"] is not None for s in slots),
                    any(j["slots_requested"] > j["slots_allocated"] for j in jobs)))
            next_at += self.every
            self._stop.wait(max(0.0, next_at - time.perf_counter()))


@dataclasses.dataclass
class Utilisation:
    pending: float | None  # busy share of slot-seconds while work was pending
    overall: float | None
    pending_slot_seconds: float
    samples: int
    pending_samples: int


def utilisation(samples: list[Sample]) -> Utilisation:
    """Busy shares of slot-seconds; each sample stands for the time until the next one."""
    busy = total = busy_pending = total_pending = 0.0
    pending_samples = 0
    for here, after in itertools.pairwise(samples):
        dt = after.t - here.t
        busy += here.busy * dt
        total += here.slots * dt
        if here.pending:
            pending_samples += 1
            busy_pending += here.busy * dt
            total_pending += here.slots * dt
    return Utilisation(busy_pending / total_pending if total_pending else None,
                       busy / total if total else None, total_pending, len(samples),
                       pending_samples)


def search_config(trials: int, sleep: float, concurrent: int) -> dict[str, Any]:
    return {
        "name": "cluster-utilisation",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                            "sleep": sleep},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "max_length": {"batches": MAX_LENGTH}, "max_trials": trials,
                     "divisor": 2, "max_rungs": 3, "mode": "aggressive",
                     "max_concurrent_trials": concurrent},
        "reproducibility": {"experiment_seed": 7},
        "max_restarts": 0,
    }


def percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.1f} %"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--sleep", type=float, default=0.25, help="seconds a batch")
    parser.add_argument("--agent", choices=("docker", "local"), default="docker")
    args = parser.parse_args(argv)

    with running_master("sqlite", agents=args.agent) as master:
        agents = master.get("/agents")["agents"]
        slots = sum(len(a["slots"]) for a in agents)
        concurrent = 2 * slots
        config = search_config(args.trials, args.sleep, concurrent)
        with Sampler(master) as sampler:
            t0 = time.perf_counter()
            eid = master.create_ok(config, context=CURVES)
            exp = master.wait_state(eid, timeout=600)
            wall = time.perf_counter() - t0
        trials = master.trials(eid)
    assert exp["state"] == "COMPLETED", f"the search ended {exp['state']}"
    samples = [s for s in sampler.samples if t0 <= s.t <= t0 + wall]
    u = utilisation(samples)
    batches = sum(t["steps_completed"] for t in trials)
    where = (f"the docker cluster ({len(agents)} engine(s))" if args.agent == "docker"
             else "the local agent")
    print(f"slot utilisation, adaptive_asha search on {where}: {slots} slots, "
          f"max_concurrent_trials {concurrent}, {args.sleep:g} s a batch, SQLite store")
    rows = [
        ("busy while work was pending", f"{percent(u.pending)} of "
         f"{u.pending_slot_seconds:.1f} slot-seconds  (aim: {100 * AIM:.0f} % or more)"),
        ("busy overall", percent(u.overall)),
        ("wall time", f"{wall:.2f} s"),
        ("trials", f"{len(trials)} ({sum(t['state'] == 'COMPLETED' for t in trials)} "
                   f"completed, {batches} batches)"),
        ("samples", f"{u.samples} ({u.pending_samples} with work pending), every "
                    f"{1000 * EVERY:.0f} ms, {sampler.errors} failed"),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label + ':':<{width + 1}}  {value}")


if __name__ == "__main__":
    main()
