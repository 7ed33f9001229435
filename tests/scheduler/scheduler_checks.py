"""What the scheduler tests share: pool builders, random snapshots, an independent fit rule,
a plain reference scheduler, the checks every decision must pass, and a multi-pass simulator."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence

from hypothesis import strategies as st

from det_hub.scheduler import (
    Agent,
    Assignment,
    Decision,
    Placement,
    Request,
    Running,
    Scheduler,
    Slot,
)


def agent(aid: str, n: int, held: Sequence[str | None] = (), enabled: bool = True) -> Agent:
    """Agent ``aid`` with ``n`` slots; ``held[i]`` holds slot i (free past its end)."""
    return Agent(aid, tuple(Slot(i, "cpu", held[i] if i < len(held) else None)
                            for i in range(n)), enabled)


def busy(aid: str, n: int, holder: str, count: int, enabled: bool = True) -> Agent:
    """Agent ``aid`` with ``n`` slots, its first ``count`` held by ``holder``."""
    return agent(aid, n, [holder] * count, enabled)


def queue_key(r: Request | Running) -> tuple[int, float, float, str]:
    return (r.priority, r.position, r.queued_at, r.allocation_id)


# --- the fit rule, written plainly ---------------------------------------------------------
def max_capacity(agents: Sequence[Agent]) -> int:
    return max((len(a.slots) for a in agents if a.enabled), default=0)


def can_ever_run(agents: Sequence[Agent], slots: int) -> bool:
    """Whether a request of ``slots`` fits the enabled agents when all their slots are free."""
    caps = {a.id: len(a.slots) for a in agents if a.enabled}
    return fits(caps, max_capacity(agents), slots)


def fits(free: Mapping[str, int], top: int, slots: int) -> bool:
    """Whether ``slots`` fit in agents with ``free`` slots each, when the biggest enabled
    agent has ``top`` slots: on one agent if it is big enough for one, else in equal parts."""
    if not free:
        return False
    if slots <= top:
        return any(f >= slots for f in free.values())
    return any(slots % k == 0 and sum(f >= slots // k for f in free.values()) >= k
               for k in range(2, slots + 1))


def free_after(agents: Sequence[Agent], decision: Decision) -> dict[str, int]:
    """Free slots per enabled agent once the decision's assignments have started."""
    free = {a.id: len(a.free_slots()) for a in agents if a.enabled}
    for assignment in decision.assignments:
        for p in assignment.placements:
            free[p.agent_id] -= len(p.slot_ids)
    return free


# --- a reference priority scheduler: no preemption, no cleverness ---------------------------
def reference_priority(agents: Sequence[Agent], pending: Sequence[Request],
                       fitting_policy: str = "best") -> list[Assignment]:
    """The priority scheduler's assignments without preemption, by scanning every agent for
    every request."""
    enabled = sorted((a for a in agents if a.enabled), key=lambda a: a.id)
    free = {a.id: [s.id for s in a.free_slots()] for a in enabled}
    top = max_capacity(agents)

    def order(aid: str) -> tuple[int, str]:
        n = len(free[aid])
        return (n if fitting_policy == "best" else -n, aid)

    out = []
    for r in sorted(pending, key=queue_key):
        if r.slots <= top:
            shapes = [(1, r.slots)]
        else:
            shapes = [(k, r.slots // k) for k in range(2, r.slots + 1) if r.slots % k == 0]
        for k, per in shapes:
            hosts = sorted((aid for aid in free if len(free[aid]) >= per), key=order)[:k]
            if len(hosts) == k:
                placements = []
                for aid in hosts:
                    placements.append(Placement(aid, tuple(free[aid][:per])))
                    free[aid] = free[aid][per:]
                out.append(Assignment(r.allocation_id, tuple(placements)))
                break
    return out


# --- checks every decision must pass --------------------------------------------------------
def check_decision(agents: Sequence[Agent], pending: Sequence[Request],
                   running: Sequence[Running], decision: Decision,
                   preemption: bool = True) -> None:
    """No slot twice, none busy or on a disabled agent, gangs whole, multi-host parts equal and
    only for requests too big for one agent; victims preemptible, not already stopping and on
    an enabled agent."""
    by_id = {r.allocation_id: r for r in pending}
    free = {(a.id, s.id) for a in agents if a.enabled for s in a.free_slots()}
    top = max_capacity(agents)
    ids = [a.allocation_id for a in decision.assignments]
    assert len(ids) == len(set(ids)), "a request assigned twice"
    for assignment in decision.assignments:
        request = by_id[assignment.allocation_id]
        hosts = [p.agent_id for p in assignment.placements]
        assert hosts and len(hosts) == len(set(hosts)), assignment
        assert assignment.slots == request.slots, f"partial gang: {assignment}"
        for p in assignment.placements:
            for s in p.slot_ids:
                assert (p.agent_id, s) in free, f"slot {p.agent_id}/{s} not free: {assignment}"
                free.discard((p.agent_id, s))
        if request.slots <= top:
            assert len(hosts) == 1, f"split a request that fits one agent: {assignment}"
        else:
            parts = {len(p.slot_ids) for p in assignment.placements}
            assert len(parts) == 1 and len(hosts) >= 2, f"unequal split: {assignment}"
    if not preemption:
        assert decision.preemptions == []
    assert len(decision.preemptions) == len(set(decision.preemptions))
    info = {r.allocation_id: r for r in running}
    on_enabled = {s.allocation_id for a in agents if a.enabled for s in a.slots}
    for aid in decision.preemptions:
        victim = info[aid]
        assert victim.preemptible and not victim.preempting, victim
        assert aid in on_enabled, f"{aid} holds nothing on an enabled agent"


# --- random snapshots -----------------------------------------------------------------------
@dataclasses.dataclass
class Snapshot:
    agents: list[Agent]
    pending: list[Request]
    running: list[Running]


PRIORITIES = st.sampled_from([1, 10, 42, 42, 50, 99])


@st.composite
def snapshots(draw: st.DrawFn, max_agents: int = 5, max_slots: int = 6,
              max_pending: int = 12, max_running: int = 6) -> Snapshot:
    """A pool with agents of 1..max_slots slots (some disabled), slots held at random by
    running allocations (some spanning agents, some preemptible, some stopping; and now and
    then by an allocation the policy is not told about), and requests of 0 to twice the
    biggest agent's slots, with tied priorities, positions and queue times."""
    caps = draw(st.lists(st.integers(1, max_slots), min_size=1, max_size=max_agents))
    enabled = [draw(st.booleans()) or draw(st.booleans()) for _ in caps]
    groups = ["g0", "g1", "g2", ""]
    weights = {g: draw(st.sampled_from([0.5, 1.0, 2.0])) for g in groups}
    n_running = draw(st.integers(0, max_running))
    holders: list[str | None] = [None, None, *(f"x{i}" for i in range(n_running)), "ghost"]
    grid = [[draw(st.sampled_from(holders)) for _ in range(c)] for c in caps]
    agents = [agent(f"a{i}", c, grid[i], enabled[i]) for i, c in enumerate(caps)]
    counts: dict[str, int] = {}
    for row in grid:
        for h in row:
            if h is not None:
                counts[h] = counts.get(h, 0) + 1
    running = []
    for i in range(n_running):
        aid = f"x{i}"
        if aid not in counts:
            continue
        group = draw(st.sampled_from(groups))
        running.append(Running(
            aid, counts[aid], priority=draw(PRIORITIES), queued_at=float(draw(st.integers(0, 5))),
            group=group, weight=weights[group], preemptible=draw(st.booleans()) or draw(st.booleans()),
            preempting=draw(st.integers(0, 4)) == 0))
    top = max(caps)
    pending = []
    for i in range(draw(st.integers(0, max_pending))):
        group = draw(st.sampled_from(groups))
        pending.append(Request(
            f"r{i}", draw(st.integers(0, 2 * top + 1)), priority=draw(PRIORITIES),
            position=float(draw(st.integers(0, 2))), queued_at=float(draw(st.integers(0, 5))),
            group=group, weight=weights[group]))
    return Snapshot(agents, pending, running)


# --- passes over time -----------------------------------------------------------------------
@dataclasses.dataclass
class Held:
    running: Running
    placements: list[tuple[str, tuple[int, ...]]]


class Cluster:
    """A pool that carries out decisions pass after pass: assignments start at once; a
    preempted allocation is told to stop in the next pass (``preempting``) and is back in the
    queue, with its old queue time, in the one after."""

    def __init__(self, capacities: Mapping[str, int]):
        self.capacities = dict(capacities)
        self.held: dict[str, Held] = {}
        self.pending: dict[str, Request] = {}
        self.stopping: set[str] = set()
        self._serial = itertools.count()

    def submit(self, group: str, slots: int, weight: float = 1.0, priority: int = 42,
               queued_at: float | None = None) -> Request:
        n = next(self._serial)
        request = Request(f"{group or 'task'}-{n}", slots, priority=priority,
                          queued_at=float(n) if queued_at is None else queued_at,
                          group=group, weight=weight)
        self.pending[request.allocation_id] = request
        return request

    def agents(self) -> list[Agent]:
        grid: dict[str, list[str | None]] = {a: [None] * c for a, c in self.capacities.items()}
        for aid, h in self.held.items():
            for agent_id, slot_ids in h.placements:
                for s in slot_ids:
                    grid[agent_id][s] = aid
        return [agent(a, len(row), row) for a, row in grid.items()]

    def running(self) -> list[Running]:
        return [dataclasses.replace(h.running, preempting=aid in self.stopping)
                for aid, h in self.held.items()]

    def step(self, policy: Scheduler) -> Decision:
        for aid in sorted(self.stopping):
            r = self.held.pop(aid).running
            self.pending[aid] = Request(aid, r.slots, priority=r.priority,
                                        queued_at=r.queued_at, group=r.group, weight=r.weight)
        self.stopping = set()
        agents, running = self.agents(), self.running()
        pending = list(self.pending.values())
        decision = policy.schedule(agents, pending, running)
        check_decision(agents, pending, running, decision)
        for a in decision.assignments:
            r = self.pending.pop(a.allocation_id)
            self.held[a.allocation_id] = Held(
                Running(r.allocation_id, r.slots, priority=r.priority, queued_at=r.queued_at,
                        group=r.group, weight=r.weight),
                [(p.agent_id, p.slot_ids) for p in a.placements])
        self.stopping = set(decision.preemptions)
        return decision

    def held_by(self, groups: Iterable[str]) -> dict[str, int]:
        """Slots each group holds in allocations not told to stop."""
        out = dict.fromkeys(groups, 0)
        for aid, h in self.held.items():
            if aid not in self.stopping:
                out[h.running.group] = out.get(h.running.group, 0) + h.running.slots
        return out
