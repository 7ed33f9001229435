"""Fair share: the pool's slots divided among jobs in proportion to their weights.

Each job (a ``group``: an experiment and all its trials) is entitled to a share of the enabled
agents' slots, max-min fair by weight (:func:`fair_shares`): a job that wants less than its
share gets what it wants and the rest is divided again among the others. A job's demand is what
it holds plus what it waits for (requests that can never run in the pool left out).

A pass then

1. starts waiting requests of jobs below their share, the job furthest below first (in slots),
   each job's requests in queue order (priority, position, queued_at), while the job stays
   below its share; so a job passes its share by at most its last request (else a job whose
   requests are each bigger than its share would never start one);
2. with preemption, for a request of a job below its share that does not fit, asks running
   allocations of jobs above their share to stop (the job most above its share first, its most
   recently queued allocation first) just enough for the request to fit, and reserves that room
   for it as :class:`~det_hub.scheduler.PriorityScheduler` does; slots of allocations already
   told to stop count first. A victim's job must end less short of its share than the
   requesting job is now: otherwise the preemption would only move the shortfall from one job
   to the other, and a later pass could move it back;
3. lets every job, below its share or not, take the slots still free (backfill), the job
   furthest below its share first, so that no slot idles while a request that fits it waits.

Repeated passes converge: a preemption lowers the larger shortfall of the two jobs involved,
and the room it makes goes to the requester in a later pass unless a job still further below
its share takes it (the furthest below go first), so the largest shortfalls only shrink and
preemptions stop; at rest no job is short of its share, nor above it, by more than the slots
of about one request.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator, Mapping, Sequence

from det_hub.scheduler._base import (
    Agent,
    Assignment,
    Decision,
    Placement,
    Request,
    Running,
    Scheduler,
)
from det_hub.scheduler._placement import FreeSlots
from det_hub.scheduler._queue import in_queue_order, queue_key


def fair_shares(
    demands: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Max-min fair shares of ``capacity`` by weight (water-filling).

    Every group gets ``min(demand, level * weight)`` for the one ``level`` at which the shares
    add up to ``capacity`` (or everyone gets their demand, when it all fits).

    Args:
        demands: Slots each group wants.
        weights: Each group's weight (positive); a group missing here weighs 1.
        capacity: Slots to divide.

    Returns:
        Each group's share (a real number of slots).
    """
    shares: dict[str, float] = {}
    left = float(capacity)
    weight_left = sum(weights.get(g, 1.0) for g in demands)
    # Groups that want least per unit of weight are satisfied first.
    for g in sorted(demands, key=lambda g: (demands[g] / weights.get(g, 1.0), g)):
        w = weights.get(g, 1.0)
        level = left / weight_left if weight_left > 0 else 0.0
        share = min(float(demands[g]), max(level, 0.0) * w)
        shares[g] = share
        left -= share
        weight_left -= w
    return shares


#: Slack on comparisons of slots with shares, which are sums of floating-point divisions.
_EPS = 1e-9


def _group_of(item: Request | Running) -> str:
    # An allocation without a job is a job of its own; the NUL keeps its name apart from
    # any real group's.
    return item.group or "\x00" + item.allocation_id


class _Job:
    """One group during a pass."""

    __slots__ = ("name", "weight", "demand", "share", "allocated", "requests", "next",
                 "victims")

    def __init__(self, name: str, weight: float):
        self.name = name
        self.weight = weight
        self.demand = 0
        self.share = 0.0
        # Slots held by its allocations not told to stop, plus what it got or had reserved
        # in this pass, less its allocations preempted in this pass.
        self.allocated = 0.0
        self.requests: list[Request] = []  # in queue order; those before ``next`` are done
        self.next = 0
        self.victims: list[Running] = []  # preemptible, not stopping; latest queued first

    def under(self) -> bool:
        return self.allocated < self.share - _EPS

    def over(self) -> bool:
        return self.allocated > self.share + _EPS

    def entry(self) -> tuple[float, tuple[int, float, float, str], str]:
        # Heap order: the job furthest below its share first, then its next request's place.
        return (self.allocated - self.share, queue_key(self.requests[self.next]), self.name)


class _Taking:
    """What one request takes, as its room is planned agent by agent."""

    __slots__ = ("slots", "victims", "freed")

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # per job: slots of its victims chosen
        self.victims: set[str] = set()
        self.freed: dict[int, int] = {}  # per agent: slots chosen victims hold there


class _Room:
    """What running allocations could give up, and who may take it, within one pass.

    ``freeing``: per agent, slots of allocations already told to stop that no request has
    claimed yet in this pass. Victims: the preemptible allocations not stopping yet.

    A victim of job ``h`` may go for a request of job ``g`` that is ``short`` slots below its
    share only while ``h`` keeps more than ``h.share - short`` slots (module docstring).
    """

    def __init__(self, pool: FreeSlots, running: Sequence[Running], jobs: dict[str, _Job]):
        self.pool = pool
        self.jobs = jobs
        n = len(pool.agent_ids)
        info, self.freeing, self.spans = pool.holdings(running)
        #: Per agent: the victims holding slots there.
        self.on_agent: list[list[Running]] = [[] for _ in range(n)]
        for aid, span in self.spans.items():
            r = info[aid]
            jobs[_group_of(r)].victims.append(r)
            for i, _ in span:
                self.on_agent[i].append(r)
        for job in jobs.values():
            job.victims.sort(key=lambda r: (-r.queued_at, r.allocation_id))
        self.freeing_agents = {i for i, f in enumerate(self.freeing) if f}
        self.unclaimed = len(self.spans)
        # Per request size: the largest shortfall for which no room was found.
        self.failures: dict[int, float] = {}
        # Jobs above their share with victims, the most above first: (-excess, name); and
        # the same jobs by the shortfall a requester needs to take their smallest victim.
        self._over: list[tuple[float, str]] = []
        self._limits: list[tuple[float, str]] = []
        self._keys: dict[str, tuple[tuple[float, str], tuple[float, str]]] = {}
        self._dirty: set[str] = set(jobs)
        #: Requests given room, and the free slots reserved for each: (agent, slot ids).
        self.reserved: dict[str, list[tuple[int, tuple[int, ...]]]] = {}

    # --- jobs above their share ------------------------------------------------------------
    def changed(self, job: _Job) -> None:
        """``job``'s allocation changed: its place among the jobs above share may have too."""
        self._dirty.add(job.name)

    def _update(self) -> None:
        for name in self._dirty:
            old = self._keys.pop(name, None)
            if old is not None:
                del self._over[bisect.bisect_left(self._over, old[0])]
                del self._limits[bisect.bisect_left(self._limits, old[1])]
            job = self.jobs[name]
            if job.victims and job.over():
                smallest = min(r.slots for r in job.victims)
                excess = job.allocated - job.share
                keys = ((-excess, name), (smallest - excess, name))
                bisect.insort(self._over, keys[0])
                bisect.insort(self._limits, keys[1])
                self._keys[name] = keys
        self._dirty.clear()

    def over_share(self) -> Iterator[_Job]:
        """Jobs above their share with victims left, the most above first."""
        if self._dirty:
            self._update()
        return (self.jobs[name] for _, name in self._over)

    def _least_shortfall_that_helps(self) -> float:
        # A requester must be short of its share by more than this to take any victim.
        if self._dirty:
            self._update()
        return self._limits[0][0] if self._limits else float("inf")

    # --- finding room ----------------------------------------------------------------------
    def _count(self, i: int, aid: str) -> int:
        return next(c for j, c in self.spans[aid] if j == i)

    def _plan(self, i: int, n: int, short: float, requester: str,
              taking: _Taking) -> list[Running] | None:
        # Victims on agent i that make room for n, most over-share job and latest first,
        # then pruned to just enough. ``taking`` (what the request already takes on other
        # agents) is updated when a plan is found.
        pool = self.pool
        if pool.capacity[i] < n:
            return None
        need = n - pool.nfree[i] - self.freeing[i] - taking.freed.get(i, 0)
        if need <= 0:
            return []
        jobs = self.jobs
        candidates = sorted(
            (r for r in self.on_agent[i] if r.allocation_id not in taking.victims),
            key=lambda r: (jobs[_group_of(r)].share - jobs[_group_of(r)].allocated,
                           _group_of(r), -r.queued_at, r.allocation_id))
        local = dict(taking.slots)
        chosen: list[Running] = []
        got = 0
        for r in candidates:
            job = jobs[_group_of(r)]
            if job.name == requester or not job.over():
                continue
            if job.allocated - local.get(job.name, 0) - r.slots <= job.share - short + _EPS:
                continue
            chosen.append(r)
            local[job.name] = local.get(job.name, 0) + r.slots
            got += self._count(i, r.allocation_id)
            if got >= need:
                break
        else:
            return None
        for r in reversed(chosen[:-1]):  # the last one was needed to reach ``need``
            count = self._count(i, r.allocation_id)
            if got - count >= need:
                chosen.remove(r)
                got -= count
        for r in chosen:
            taking.slots[_group_of(r)] = taking.slots.get(_group_of(r), 0) + r.slots
            taking.victims.add(r.allocation_id)
            for j, count in self.spans[r.allocation_id]:
                if j != i:
                    taking.freed[j] = taking.freed.get(j, 0) + count
        return chosen

    def _agents_to_try(self, n: int, short: float, requester: str) -> Iterator[int]:
        # Agents worth a plan, in the order preemption prefers: those where slots already
        # stopping are enough (by fitting policy), then the agents of victims that may go,
        # the job most above its share and its latest allocation first. Lazily: the first
        # few usually do.
        pool = self.pool
        if self.freeing_agents:
            easy = [i for i in self.freeing_agents
                    if pool.nfree[i] + self.freeing[i] >= n and pool.capacity[i] >= n]
            sign = 1 if pool.best else -1
            easy.sort(key=lambda i: (sign * (pool.nfree[i] + self.freeing[i]), i))
            yield from easy
        for job in self.over_share():
            if job.name == requester:
                continue
            floor = job.share - short + _EPS
            for r in job.victims:
                if job.allocated - r.slots > floor:
                    for i, _ in self.spans[r.allocation_id]:
                        if pool.capacity[i] >= n:
                            yield i

    def _known_to_fail(self, n: int, short: float) -> bool:
        # Within a pass room only shrinks (until forget()), and a larger request, or a
        # requester less short of its share, finds less of it.
        if not self.freeing_agents and short <= self._least_shortfall_that_helps():
            return True
        if n > self.pool.max_capacity:
            failed = self.failures.get(n)
            return failed is not None and failed >= short
        return any(m <= n and s >= short for m, s in self.failures.items()
                   if m <= self.pool.max_capacity)

    def forget(self) -> None:
        """Some room grew (slots started freeing, or a job went above its share): failures
        seen so far may not hold any more."""
        self.failures.clear()

    def make_room(self, request: Request, job: _Job) -> list[str] | None:
        """Find and reserve room for ``request`` of ``job``, which is below its share.

        Returns:
            Allocations newly to preempt (possibly none), or None if no room was found.
        """
        n = request.slots
        short = job.share - job.allocated
        if self._known_to_fail(n, short):
            return None
        pool = self.pool
        for k, per in pool.shapes(n):
            chosen: list[tuple[int, list[Running]]] = []
            taking = _Taking()
            if k > 1:
                # Agents with enough free slots come first: they cost no preemption.
                chosen = [(i, []) for i in pool.agents_with_free(per)[:k]]
            tried = {i for i, _ in chosen}
            for i in self._agents_to_try(per, short, job.name):
                if len(chosen) == k:
                    break
                if i in tried:
                    continue
                tried.add(i)
                plan = self._plan(i, per, short, job.name, taking)
                if plan is not None:
                    chosen.append((i, plan))
            if len(chosen) == k:
                self.reserved[request.allocation_id] = []
                return [aid for i, plan in chosen
                        for aid in self._claim(i, per, plan, request.allocation_id)]
        self.failures[n] = max(self.failures.get(n, short), short)
        return None

    # --- committing ------------------------------------------------------------------------
    def _claim(self, i: int, n: int, plan: list[Running], owner: str) -> list[str]:
        pool = self.pool
        taken = min(pool.nfree[i], n)
        if taken:
            # Reserved: these slots go to nobody else in this pass.
            self.reserved[owner].append((i, pool.take(i, taken)))
        rest = n - taken
        use = min(self.freeing[i], rest)
        self._add_freeing(i, -use)
        rest -= use
        got = 0
        grown = False
        for r in plan:
            self.unclaimed -= 1
            job = self.jobs[_group_of(r)]
            job.allocated -= r.slots
            job.victims.remove(r)
            self.changed(job)
            for j, count in self.spans[r.allocation_id]:
                self.on_agent[j].remove(r)
                if j == i:
                    got += count
                else:
                    self._add_freeing(j, count)  # frees elsewhere too: others may claim it
                    grown = True
        if got > rest:
            self._add_freeing(i, got - rest)
            grown = True
        if grown:
            self.forget()
        return [r.allocation_id for r in plan]

    def _add_freeing(self, i: int, count: int) -> None:
        self.freeing[i] += count
        if self.freeing[i]:
            self.freeing_agents.add(i)
        else:
            self.freeing_agents.discard(i)

    def possible(self) -> bool:
        """Whether any room could still come from running allocations."""
        return bool(self.freeing_agents) or self.unclaimed > 0


class FairShareScheduler(Scheduler):
    """Slots shared among jobs by weight; see the module docstring for the rules.

    Args:
        preemption: Ask allocations of jobs above their share to stop for jobs below theirs.
        fitting_policy: ``"best"`` (fewest free slots that fit) or ``"worst"`` (most).

    Raises:
        ValueError: ``fitting_policy`` is neither.
    """

    default_preemption = True

    def _schedule(
        self, agents: Sequence[Agent], pending: Sequence[Request], running: Sequence[Running]
    ) -> tuple[Decision, dict[str, tuple[Placement, ...]]]:
        # The decision, and the requests given room to wait in, with the free slots reserved
        # for each (the tests check them).
        decision = Decision()
        reserved: dict[str, tuple[Placement, ...]] = {}
        pool = FreeSlots(agents, self.fitting_policy, holders=self.preemption)
        if not pool.agent_ids or not pending:
            return decision, reserved
        jobs: dict[str, _Job] = {}
        everyone: list[Request | Running] = [*running, *pending]
        for item in everyone:
            name = _group_of(item)
            if name not in jobs:
                jobs[name] = _Job(name, item.weight)
        for r in running:
            job = jobs[_group_of(r)]
            job.demand += r.slots
            if not r.preempting:
                job.allocated += r.slots
        holes = {n: pool.smallest_hole(n) for n in {r.slots for r in pending}}
        # Requests that can never run here are left out: they want nothing of this pool.
        fits = {n: h for n, h in holes.items() if h is not None}
        if not fits:
            return decision, reserved
        smallest = min(fits.values())
        for request in in_queue_order(pending):
            if request.slots in fits:
                job = jobs[_group_of(request)]
                job.demand += request.slots
                job.requests.append(request)
        shares = fair_shares({j.name: j.demand for j in jobs.values()},
                             {j.name: j.weight for j in jobs.values()}, pool.total_capacity)
        for job in jobs.values():
            job.share = shares[job.name]
        waiting = [j for j in jobs.values() if j.requests]
        room = _Room(pool, running, jobs) if self.preemption else None
        ids = pool.agent_ids

        def grant(job: _Job, slots: int) -> None:
            was_over = job.over()
            job.allocated += slots
            if room is not None:
                room.changed(job)
                if not was_over and job.over() and job.victims:
                    room.forget()  # its running allocations may now be preempted

        def start(request: Request, job: _Job) -> bool:
            if fits[request.slots] > pool.max_hole:
                return False
            placed = pool.place(request.slots)
            if placed is None:
                return False
            decision.assignments.append(Assignment(
                request.allocation_id,
                tuple(Placement(ids[i], slot_ids) for i, slot_ids in placed)))
            grant(job, request.slots)
            return True

        # 1. Jobs below their share, the furthest below first; with preemption, room is made.
        heap = [j.entry() for j in waiting if j.under()]
        heapq.heapify(heap)
        while heap:
            job = jobs[heapq.heappop(heap)[2]]
            request = job.requests[job.next]
            job.next += 1
            if start(request, job):
                pass
            elif room is not None and room.possible():
                victims = room.make_room(request, job)
                if victims is not None:
                    decision.preemptions.extend(victims)
                    grant(job, request.slots)  # its room is held for it
            elif pool.max_hole < smallest:
                break  # nothing fits what is free, and nothing can be preempted
            if job.next < len(job.requests) and job.under():
                heapq.heappush(heap, job.entry())

        # 2. Backfill: whatever is still free, the least served job first.
        heap = [j.entry() for j in waiting if j.next < len(j.requests)]
        heapq.heapify(heap)
        while heap and pool.max_hole >= smallest:
            job = jobs[heapq.heappop(heap)[2]]
            request = job.requests[job.next]
            job.next += 1
            start(request, job)
            if job.next < len(job.requests):
                heapq.heappush(heap, job.entry())
        if room is not None:
            for aid, taken in room.reserved.items():
                reserved[aid] = tuple(Placement(ids[i], slot_ids) for i, slot_ids in taken)
        return decision, reserved


__all__ = ["FairShareScheduler", "fair_shares"]
