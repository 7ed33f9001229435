"""One scheduling pass at cluster scale: 1,000 agents of 8 slots, 10,000 waiting allocations.

No master, database or agents: the policies are pure objects, timed on one snapshot of a
pool, the same snapshot for every repeat (a policy keeps nothing between passes).

The snapshot (seeded):

* ``--agents`` agents of ``--slots`` slots each, named ``agent-0000`` and up.
* Experiments, each with 1-16 trials sharing the experiment's group, slots per trial
  (1, 2, 4 or 8, and 16 for one in twenty: more than an agent has, so it is spread over
  agents), priority (10, 30, 42 most often, 60 or 80), weight (0.5, 1 or 2) and position in
  the queue. While a ``--busy`` share of the pool's slots is not yet held, about half of an
  experiment's trials run, placed on random agents with room (so the free slots are
  fragmented, as in a pool that has been running a while); the others wait. Experiments are
  added until ``--pending`` allocations wait.
* 2% of the running allocations are already being preempted; 5% of the held slots are
  notebooks (one slot, never preemptible).

Each policy decides on the snapshot ``--repeats`` times; the table shows the median and the
90th percentile of the time of one ``schedule()`` call (``time.perf_counter``, garbage collector
on, as in the master), and what the pass decided: requests started, slots they got, running
allocations asked to stop. The decision is checked before it is timed (no slot given twice,
none busy, gangs whole).

    python bench/scheduler_scale.py [--agents 1000] [--slots 8] [--pending 10000]
        [--busy 0.5] [--repeats 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from det_hub.scheduler import (
    Agent,
    Decision,
    FairShareScheduler,
    PriorityScheduler,
    Request,
    Running,
    Scheduler,
    Slot,
)

SIZES = (1, 2, 4, 8, 16)
SIZE_WEIGHTS = (30, 25, 20, 20, 5)
PRIORITIES = (10, 30, 42, 42, 42, 42, 60, 80)
WEIGHTS = (0.5, 1.0, 1.0, 1.0, 2.0)


@dataclasses.dataclass
class Snapshot:
    """One pool's state: what a scheduling pass is given."""

    agents: list[Agent]
    pending: list[Request]
    running: list[Running]

    @property
    def busy_slots(self) -> int:
        return sum(1 for a in self.agents for s in a.slots if s.allocation_id is not None)


def make_snapshot(agents: int, slots: int, pending: int, busy: float, seed: int) -> Snapshot:
    """The seeded snapshot the module docstring describes."""
    rng = random.Random(seed)
    grid: list[list[str | None]] = [[None] * slots for _ in range(agents)]
    free = [slots] * agents
    budget = int(busy * agents * slots)
    running: list[Running] = []
    requests: list[Request] = []

    def hold(i: int, aid: str, n: int) -> None:
        row = grid[i]
        for s in range(slots):
            if n and row[s] is None:
                row[s] = aid
                n -= 1
                free[i] -= 1

    def place(aid: str, n: int) -> bool:
        if n <= slots:
            for _ in range(30):  # random probes: running work lies scattered
                i = rng.randrange(agents)
                if free[i] >= n:
                    hold(i, aid, n)
                    return True
            return False
        k = -(-n // slots)
        if n % k:
            return False
        hosts = [i for i in rng.sample(range(agents), min(agents, 8 * k)) if free[i] >= n // k]
        if len(hosts) < k:
            return False
        for i in hosts[:k]:
            hold(i, aid, n // k)
        return True

    notebooks = int(0.05 * budget)
    for j in range(notebooks):
        aid = f"notebook-{j}"
        if place(aid, 1):
            running.append(Running(aid, 1, queued_at=float(j), preemptible=False))
            budget -= 1
    t = float(notebooks)
    experiment = 0
    while len(requests) < pending:
        experiment += 1
        size = rng.choices(SIZES, SIZE_WEIGHTS)[0]
        priority = rng.choice(PRIORITIES)
        weight = rng.choice(WEIGHTS)
        group = f"exp-{experiment}"
        for trial in range(rng.randint(1, 16)):
            t += 1.0
            aid = f"exp-{experiment}.trial-{trial}"
            fields = dict(priority=priority, position=float(experiment), queued_at=t,
                          group=group, weight=weight)
            if budget >= size and rng.random() < 0.5 and place(aid, size):
                budget -= size
                running.append(Running(aid, size, preempting=rng.random() < 0.02, **fields))
            elif len(requests) < pending:
                requests.append(Request(aid, size, **fields))
    rng.shuffle(requests)  # the order requests come in must not matter
    pool = [Agent(f"agent-{i:04d}", tuple(Slot(s, "cuda", grid[i][s]) for s in range(slots)))
            for i in range(agents)]
    return Snapshot(pool, requests, running)


def check(snapshot: Snapshot, decision: Decision) -> None:
    """Raise if the decision gives a slot twice, a busy slot or a partial gang."""
    free = {(a.id, s.id) for a in snapshot.agents if a.enabled for s in a.free_slots()}
    sizes = {r.allocation_id: r.slots for r in snapshot.pending}
    for assignment in decision.assignments:
        got = [(p.agent_id, s) for p in assignment.placements for s in p.slot_ids]
        if len(got) != sizes[assignment.allocation_id]:
            raise AssertionError(f"{assignment.allocation_id}: partial gang")
        for slot in got:
            if slot not in free:
                raise AssertionError(f"{assignment.allocation_id}: slot {slot} not free")
            free.discard(slot)
    held = {r.allocation_id for r in snapshot.running if r.preemptible and not r.preempting}
    if not set(decision.preemptions) <= held:
        raise AssertionError("preempted an allocation that may not be preempted")


@dataclasses.dataclass
class Row:
    policy: str
    scenario: str
    times_ms: list[float]
    assigned: int
    slots: int
    preempted: int

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p90(self) -> float:
        if len(self.times_ms) == 1:
            return self.times_ms[0]
        return statistics.quantiles(self.times_ms, n=10, method="inclusive")[8]


POLICIES: tuple[tuple[str, str, Callable[[], Scheduler]], ...] = (
    ("priority", "no preemption, best fit", lambda: PriorityScheduler()),
    ("priority", "no preemption, worst fit",
     lambda: PriorityScheduler(fitting_policy="worst")),
    ("priority", "preemption, best fit", lambda: PriorityScheduler(preemption=True)),
    ("fair_share", "no preemption, best fit", lambda: FairShareScheduler(preemption=False)),
    ("fair_share", "preemption, best fit", lambda: FairShareScheduler()),
)


def measure(snapshot: Snapshot, repeats: int) -> list[Row]:
    """Time every policy of :data:`POLICIES` on ``snapshot``."""
    rows = []
    for name, scenario, make in POLICIES:
        policy = make()
        decision = policy.schedule(snapshot.agents, snapshot.pending, snapshot.running)
        check(snapshot, decision)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            policy.schedule(snapshot.agents, snapshot.pending, snapshot.running)
            times.append((time.perf_counter() - t0) * 1000)
        rows.append(Row(name, scenario, times, len(decision.assignments),
                        sum(a.slots for a in decision.assignments), len(decision.preemptions)))
    return rows


def print_table(rows: Sequence[Row], repeats: int) -> None:
    header = (f"{'policy':<11} {'scenario':<26} {'median ms':>10} {'p90 ms':>8} "
              f"{'assigned':>9} {'slots':>7} {'preempted':>10}")
    print(f"\nOne scheduling pass, ms ({repeats} repeats)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r.policy:<11} {r.scenario:<26} {r.median:>10.2f} {r.p90:>8.2f} "
              f"{r.assigned:>9,} {r.slots:>7,} {r.preempted:>10,}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8, help="slots per agent")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--busy", type=float, default=0.5,
                        help="share of the pool's slots held by running allocations")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    snapshot = make_snapshot(args.agents, args.slots, args.pending, args.busy, args.seed)
    sizes = sorted({r.slots for r in snapshot.pending})
    print(f"Python {sys.version.split()[0]}; {len(snapshot.agents):,} agents x {args.slots} "
          f"slots, {snapshot.busy_slots:,} slots held by {len(snapshot.running):,} running "
          f"allocations, {len(snapshot.pending):,} pending (sizes {sizes}, "
          f"{sum(r.slots for r in snapshot.pending):,} slots); "
          f"1-min load average {os.getloadavg()[0]:.2f}")
    print_table(measure(snapshot, args.repeats), args.repeats)
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
    sys.exit(code)
