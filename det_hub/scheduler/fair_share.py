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

A pass over a thousand agents and ten thousand requests stays within milliseconds because
making room reuses what earlier requests of the pass found (:class:`_Room`): the jobs above
their share stay sorted as allocations change rather than being sorted per request; a job
whose smallest allocation may not go for a requester sits out until it changes, since the
requesters that follow are no further below their share; an agent's room (free slots, and
slots held by allocations that may go or are stopping) only shrinks during a pass, so an
allocation none of whose agents has room for a size is passed over from then on; a size for
which no room was found is not looked for again until room grows; and once nothing free fits
any request and no job is short enough of its share to take from another, step 1 ends.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence

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
    return dict(_water_fill([(g, d, weights.get(g, 1.0)) for g, d in demands.items()],
                            capacity))


def _water_fill(groups: list[tuple[str, float, float]],
                capacity: float) -> list[tuple[str, float]]:
    # fair_shares() of (group, demand, weight) triples, in the order the shares are set.
    shares = []
    left = float(capacity)
    weight_left = sum(w for _, _, w in groups)
    # Groups that want least per unit of weight are satisfied first (the group names, all
    # different, settle ties before the rest of a tuple is compared).
    for _, g, d, w in sorted([(d / w, g, d, w) for g, d, w in groups]):
        level = left / weight_left if weight_left > 0 else 0.0
        if level < 0.0:
            level = 0.0
        # min(demand, level * w), without the calls: a thousand groups in a large pool.
        want = float(d)
        share = level * w
        if not share < want:
            share = want
        shares.append((g, share))
        left -= share
        weight_left -= w
    return shares


#: Slack on comparisons of slots with shares, which are sums of floating-point divisions.
_EPS = 1e-9


def _group_of(item: Request | Running) -> str:
    # An allocation without a job is a job of its own; the NUL keeps its name apart from
    # any real group's.
    return item.group or "\x00" + item.allocation_id


def _latest(v: _Victim) -> tuple[float, str]:
    return v.latest


class _Job:
    """One group during a pass."""

    __slots__ = ("name", "weight", "demand", "share", "allocated", "requests", "next",
                 "victims", "smallest", "reach")

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
        self.victims: list[_Victim] = []  # preemptible, not stopping; latest queued first
        self.smallest = 0  # slots of its smallest victim, while it has victims
        self.reach = math.inf  # at least the reach of each of its victims

    def under(self) -> bool:
        return self.allocated < self.share - _EPS

    def over(self) -> bool:
        return self.allocated > self.share + _EPS

    def entry(self) -> tuple[float, tuple[int, float, float, str], str, _Job]:
        # Heap order: the job furthest below its share first, then its next request's place
        # (the name settles ties: the job itself is never compared).
        return (self.allocated - self.share, queue_key(self.requests[self.next]), self.name,
                self)


class _Victim:
    """A running allocation that may be preempted: preemptible and not stopping yet."""

    __slots__ = ("allocation_id", "slots", "latest", "spans", "reach")

    # No reference to its job, which lists it: without a cycle, what a pass leaves goes as
    # soon as the pass ends, not at the next run of the garbage collector.
    def __init__(self, r: Running, spans: list[tuple[int, int]]):
        self.allocation_id = r.allocation_id
        self.slots = r.slots
        #: Orders a job's victims, the latest queued first.
        self.latest = (-r.queued_at, r.allocation_id)
        #: ``(agent index, slots held there)`` for each agent it holds slots on.
        self.spans = spans
        #: At least the room of each of its agents (see ``_Room._choose_agents``): it can
        #: help make room for no more slots than this.
        self.reach = math.inf


#: A victim on one agent, with the slots it holds there, and its job.
_OnAgent = tuple[_Victim, int, _Job]
#: A job above its share: (-excess, name, job), the most above first.
_OverKey = tuple[float, str, _Job]


class _Taking:
    """What one request takes, as its room is planned agent by agent."""

    __slots__ = ("slots", "victims", "freed")

    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # per job: slots of its victims chosen
        self.victims: set[str] = set()
        self.freed: dict[int, int] = {}  # per agent: slots chosen victims hold there


#: What a request for one agent takes elsewhere: nothing (shared, never changed).
_NOTHING = _Taking()


class _Room:
    """What running allocations could give up, and who may take it, within one pass.

    ``freeing``: per agent, slots of allocations already told to stop that no request has
    claimed yet in this pass. Victims: the preemptible allocations not stopping yet.

    A victim of job ``h`` may go for a request of job ``g`` that is ``short`` slots below its
    share only while ``h`` keeps more than ``h.share - short`` slots (module docstring).

    :meth:`make_room` is asked in step 1 of a pass, the requester furthest below its share
    first, so no requester is further below its share than the one before; what was learnt
    for one request holds for the next until something it rests on changes. Jobs report their
    changes (:meth:`changed`); the jobs above their share are re-sorted lazily.
    """

    def __init__(self, pool: FreeSlots, running: Sequence[Running], jobs: dict[str, _Job]):
        self.pool = pool
        n = len(pool.agent_ids)
        info, self.freeing, spans = pool.holdings(running)
        #: Per agent: the victims holding slots there, with the slots each holds there.
        self.on_agent: list[list[_OnAgent]] = [[] for _ in range(n)]
        #: Per agent: slots its victims hold there.
        self.potential = potential = [0] * n
        on_agent = self.on_agent
        with_victims: list[_Job] = []
        for aid, span in spans.items():
            r = info[aid]
            job = jobs[_group_of(r)]
            if not job.victims:
                with_victims.append(job)
            victim = _Victim(r, span)
            job.victims.append(victim)
            for i, count in span:
                on_agent[i].append((victim, count, job))
                potential[i] += count
        for job in with_victims:
            job.victims.sort(key=_latest)
            job.smallest = min(v.slots for v in job.victims)
        self.freeing_agents = {i for i, f in enumerate(self.freeing) if f}
        self.unclaimed = len(spans)
        # The largest shortfall for which no room was found: for a request on one agent,
        # by size, the largest for any size up to it (room for more slots is no easier to
        # find); for a request spread over agents, for that size.
        self._failed_upto = [-math.inf] * (pool.max_capacity + 1)
        self.failures: dict[int, float] = {}
        # Jobs above their share with victims, by the shortfall a requester needs to take
        # their smallest victim: a heap of (limit, name), an entry current while it is the
        # job's in _limit_keys.
        self._limits: list[tuple[float, str]] = []
        self._limit_keys: dict[str, tuple[float, str]] = {}
        # The same jobs, the most above their share first: (-excess, name, job); less those
        # that are dormant (see _choose_agents).
        self._over: list[_OverKey] = []
        self._over_keys: dict[str, _OverKey] = {}
        self._dormant: dict[str, _OverKey] = {}
        self._dormant_short = math.inf  # the least shortfall a job went dormant for
        # Jobs changed since the lists were last brought up to date (by _update).
        self._dirty: set[_Job] = set()
        for job in with_victims:
            if job.over():
                limit, key = self._keys(job)
                self._limits.append(limit)
                self._over.append(key)
        heapq.heapify(self._limits)
        self._over.sort()
        #: Requests given room, and the free slots reserved for each: (agent, slot ids).
        self.reserved: dict[str, list[tuple[int, tuple[int, ...]]]] = {}

    # --- jobs above their share ------------------------------------------------------------
    def changed(self, job: _Job) -> None:
        """``job``'s allocation changed: its place among the jobs above share may have too."""
        self._dirty.add(job)

    def _update(self) -> None:
        for job in self._dirty:
            name = job.name
            self._limit_keys.pop(name, None)
            key = self._over_keys.pop(name, None)
            if key is not None:
                del self._over[bisect.bisect_left(self._over, key)]
            self._dormant.pop(name, None)
            if job.victims and job.over():
                limit, key = self._keys(job)
                heapq.heappush(self._limits, limit)
                bisect.insort(self._over, key)
        self._dirty.clear()

    def _keys(self, job: _Job) -> tuple[tuple[float, str], _OverKey]:
        # A job above its share with victims: its keys in _limits and _over, recorded.
        excess = job.allocated - job.share
        self._limit_keys[job.name] = limit = (job.smallest - excess, job.name)
        self._over_keys[job.name] = key = (-excess, job.name, job)
        return limit, key

    def _wake(self) -> None:
        # A requester further below its share than those the dormant jobs were passed over
        # for: they may give to it.
        for name, key in self._dormant.items():
            bisect.insort(self._over, key)
            self._over_keys[name] = key
        self._dormant.clear()
        self._dormant_short = math.inf

    def hopeless(self, short: float) -> bool:
        """Whether no room can be made for a requester ``short`` slots below its share:
        no slots are freeing, and every victim's job would end as short as the requester."""
        if self.freeing_agents:
            return False
        if self._dirty:
            self._update()
        # A requester must be short of its share by more than this to take any victim.
        limits, current = self._limits, self._limit_keys
        while limits and current.get(limits[0][1]) != limits[0]:
            heapq.heappop(limits)
        return not limits or short <= limits[0][0]

    # --- finding room ----------------------------------------------------------------------
    def _plan(self, i: int, n: int, short: float, requester: _Job,
              taking: _Taking) -> list[_OnAgent] | None:
        # Victims on agent i that make room for n, most over-share job and latest first,
        # then pruned to just enough, given ``taking`` (what the request already takes on
        # other agents).
        pool = self.pool
        if pool.capacity[i] < n:
            return None
        need = n - pool.nfree[i] - self.freeing[i] - taking.freed.get(i, 0)
        if need <= 0:
            return []
        # The victims that may go, given what the request takes already: those skipped here
        # only fall further below the floor as more victims are chosen below. Most agents
        # fail for want of enough of them, which is seen before anything is sorted.
        taken, took = taking.victims, taking.slots
        candidates = []
        total = 0
        for entry in self.on_agent[i]:
            v, count, job = entry
            if (job is requester or not job.allocated > job.share + _EPS
                    or v.allocation_id in taken
                    or job.allocated - took.get(job.name, 0) - v.slots
                    <= job.share - short + _EPS):
                continue
            candidates.append((job.share - job.allocated, job.name, v.latest, entry))
            total += count
        if total < need:
            return None
        if len(candidates) == 1:
            chosen = [candidates[0][3]]  # what the loop below comes to, at once
        else:
            candidates.sort()  # the allocation id in ``latest`` makes every key unique
            local = dict(took)
            chosen = []
            got = 0
            for candidate in candidates:
                entry = candidate[3]
                v, count, job = entry
                if (job.allocated - local.get(job.name, 0) - v.slots
                        <= job.share - short + _EPS):
                    continue
                chosen.append(entry)
                local[job.name] = local.get(job.name, 0) + v.slots
                got += count
                if got >= need:
                    break
            else:
                return None
            for k in range(len(chosen) - 2, -1, -1):  # the last one was needed
                count = chosen[k][1]
                if got - count >= need:
                    del chosen[k]
                    got -= count
        return chosen

    @staticmethod
    def _take(taking: _Taking, i: int, plan: list[_OnAgent]) -> None:
        # The request takes ``plan`` on agent i.
        took, freed = taking.slots, taking.freed
        for v, _, job in plan:
            took[job.name] = took.get(job.name, 0) + v.slots
            taking.victims.add(v.allocation_id)
            for j, count in v.spans:
                if j != i:
                    freed[j] = freed.get(j, 0) + count

    def _choose_agents(self, n: int, k: int, short: float, requester: _Job,
                       chosen: list[tuple[int, list[_OnAgent]]], taking: _Taking) -> bool:
        # Adds to ``chosen`` the agents that make room for n slots each, until there are k
        # (whether there are). Agents are tried in the order preemption prefers: those where
        # slots already stopping are enough (by fitting policy), then the agents of victims
        # that may go, the job most above its share and its latest allocation first; each
        # agent once. The first few usually do.
        pool = self.pool
        capacity, nfree, freeing = pool.capacity, pool.nfree, self.freeing
        tried = {i for i, _ in chosen} if chosen else set()
        if k > 1 and self.freeing_agents:  # for one agent, make_room has looked already
            easy = [i for i in self.freeing_agents
                    if nfree[i] + freeing[i] >= n and capacity[i] >= n and i not in tried]
            if easy:
                sign = 1 if pool.best else -1
                easy.sort(key=lambda i: (sign * (nfree[i] + freeing[i]), i))
                for i in easy:
                    tried.add(i)
                    plan = self._plan(i, n, short, requester, taking)
                    if plan is not None:
                        chosen.append((i, plan))
                        if len(chosen) == k:
                            return True
                        self._take(taking, i, plan)
        # An agent's room, its free slots and the slots its victims and its stopping
        # allocations hold, never grows within a pass (what leaves one of these joins
        # another or goes to a request), and no plan succeeds on an agent with less room
        # than n (victims the request takes on other agents count in both ``taking.freed``
        # and ``potential``). So a victim none of whose agents has room for n, or a job none
        # of whose victims has, is passed over at once from then on: ``reach`` keeps the
        # most room seen, for the victim and for the job.
        #
        # A job whose smallest victim may not go for this requester may not for the next
        # either, until the job changes: requesters come no further below their share than
        # the one before (the furthest below go first). Such a job goes dormant, out of
        # ``_over``, until it changes or a requester further below its share comes.
        if self._dirty:
            self._update()
        if short > self._dormant_short:
            self._wake()
        potential, over = self.potential, self._over
        index = 0
        while index < len(over):
            key = over[index]
            job = key[2]
            if job is requester or job.reach < n:
                index += 1
                continue
            floor = job.share - short + _EPS
            if job.allocated - job.smallest <= floor:
                del over[index]
                del self._over_keys[job.name]
                self._dormant[job.name] = key
                self._dormant_short = min(self._dormant_short, short)
                continue
            index += 1
            job_reach = 0.0
            for v in job.victims:
                if v.reach >= n and job.allocated - v.slots > floor:
                    reach = 0
                    for i, _ in v.spans:
                        room = min(capacity[i], nfree[i] + freeing[i] + potential[i])
                        if room > reach:
                            reach = room
                        if room < n or i in tried:
                            continue
                        tried.add(i)
                        plan = self._plan(i, n, short, requester, taking)
                        if plan is not None:
                            chosen.append((i, plan))
                            if len(chosen) == k:
                                return True
                            self._take(taking, i, plan)
                    v.reach = reach
                if v.reach > job_reach:
                    job_reach = v.reach
            job.reach = job_reach
        return False

    def _easiest(self, n: int) -> int:
        # The first agent _choose_agents tries for n slots on one agent if it is one where
        # the slots already stopping are enough (they always are: the plan is empty); -1 if
        # there is none.
        pool = self.pool
        capacity, nfree, freeing = pool.capacity, pool.nfree, self.freeing
        sign = 1 if pool.best else -1
        best: tuple[int, int] | None = None
        for i in self.freeing_agents:
            have = nfree[i] + freeing[i]
            if have >= n and capacity[i] >= n:
                key = (sign * have, i)
                if best is None or key < best:
                    best = key
        return -1 if best is None else best[1]

    def known_to_fail(self, n: int, short: float) -> bool:
        """Whether :meth:`make_room` finds nothing, without looking, for ``n`` slots for a
        requester ``short`` slots below its share."""
        # Within a pass room only shrinks (until forget()), and a larger request, or a
        # requester less short of its share, finds less of it.
        if self.hopeless(short):
            return True
        if n < len(self._failed_upto):
            return self._failed_upto[n] >= short
        failed = self.failures.get(n)
        return failed is not None and failed >= short

    def _failed(self, n: int, short: float) -> None:
        upto = self._failed_upto
        if n < len(upto):
            for m in range(n, len(upto)):
                if upto[m] < short:
                    upto[m] = short
        else:
            self.failures[n] = max(self.failures.get(n, short), short)

    def forget(self) -> None:
        """Some room grew (slots started freeing, or a job went above its share): failures
        seen so far may not hold any more."""
        self.failures.clear()
        self._failed_upto = [-math.inf] * len(self._failed_upto)

    def make_room(self, request: Request, job: _Job) -> list[str] | None:
        """Find and reserve room for ``request`` of ``job``, which is below its share.

        Returns:
            Allocations newly to preempt (possibly none), or None if no room was found.
        """
        n = request.slots
        short = job.share - job.allocated
        if self.known_to_fail(n, short):
            return None
        pool = self.pool
        if n <= pool.max_capacity:
            # On one agent (shapes() is ((1, n),)): first where slots already stopping will
            # do (the plan is empty), else where victims may go.
            if self.freeing_agents and (i := self._easiest(n)) >= 0:
                self.reserved[request.allocation_id] = []
                return self._claim(i, n, [], request.allocation_id)
            chosen: list[tuple[int, list[_OnAgent]]] = []
            if self._choose_agents(n, 1, short, job, chosen, _NOTHING):
                i, plan = chosen[0]
                self.reserved[request.allocation_id] = []
                return self._claim(i, n, plan, request.allocation_id)
            self._failed(n, short)
            return None
        for k, per in pool.shapes(n):
            chosen = []
            taking = _Taking()
            if k > 1:
                # Agents with enough free slots come first: they cost no preemption.
                chosen = [(i, []) for i in pool.agents_with_free(per)[:k]]
            if len(chosen) == k or self._choose_agents(per, k, short, job, chosen, taking):
                self.reserved[request.allocation_id] = []
                return [aid for i, plan in chosen
                        for aid in self._claim(i, per, plan, request.allocation_id)]
        self._failed(n, short)
        return None

    # --- committing ------------------------------------------------------------------------
    def _claim(self, i: int, n: int, plan: list[_OnAgent], owner: str) -> list[str]:
        pool = self.pool
        taken = min(pool.nfree[i], n)
        if taken:
            # Reserved: these slots go to nobody else in this pass.
            self.reserved[owner].append((i, pool.take(i, taken)))
        rest = n - taken
        use = min(self.freeing[i], rest)
        if use:
            self._add_freeing(i, -use)
            rest -= use
        got = 0
        grown = False
        for v, _, job in plan:
            self.unclaimed -= 1
            job.allocated -= v.slots
            job.victims.remove(v)
            if v.slots == job.smallest and job.victims:
                job.smallest = min(x.slots for x in job.victims)
            self._dirty.add(job)  # changed(job)
            for j, count in v.spans:
                self.on_agent[j].remove((v, count, job))
                self.potential[j] -= count
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
        return [v.allocation_id for v, _, _ in plan]

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
        # A job takes its weight from the first of its allocations, running ones first.
        jobs: dict[str, _Job] = {}
        for r in running:
            name = r.group or "\x00" + r.allocation_id  # _group_of, inlined
            job = jobs.get(name)
            if job is None:
                job = jobs[name] = _Job(name, r.weight)
            job.demand += r.slots
            if not r.preempting:
                job.allocated += r.slots
        for request in pending:
            name = request.group or "\x00" + request.allocation_id
            if name not in jobs:
                jobs[name] = _Job(name, request.weight)
        holes = {n: pool.smallest_hole(n) for n in {r.slots for r in pending}}
        # Requests that can never run here are left out: they want nothing of this pool.
        fits = {n: h for n, h in holes.items() if h is not None}
        if not fits:
            return decision, reserved
        smallest = min(fits.values())
        for request in in_queue_order(pending):
            n = request.slots
            if n in fits:
                job = jobs[request.group or "\x00" + request.allocation_id]
                job.demand += n
                job.requests.append(request)
        for name, share in _water_fill([(j.name, j.demand, j.weight) for j in jobs.values()],
                                       pool.total_capacity):
            jobs[name].share = share
        waiting = [j for j in jobs.values() if j.requests]
        room = _Room(pool, running, jobs) if self.preemption else None
        ids = pool.agent_ids

        def grant(job: _Job, slots: int) -> None:
            was_over = job.allocated > job.share + _EPS  # job.over(), inlined: per start
            job.allocated += slots
            if room is not None and job.victims and job.over():
                # Only jobs above their share with victims have a place to keep up to date.
                room.changed(job)
                if not was_over:
                    room.forget()  # its running allocations may now be preempted

        assignments = decision.assignments
        one_agent = pool.max_capacity

        def start(request: Request, job: _Job) -> bool:
            # Whether the request starts now; the caller has seen that it might (its hole).
            n = request.slots
            if n <= one_agent:
                # The common case, inlined: on one agent (it fits, as max_hole >= n).
                i = pool.find_one(n)
                assignments.append(Assignment(
                    request.allocation_id, (Placement(ids[i], pool.take(i, n)),)))
            else:
                placed = pool.place(n)
                if placed is None:
                    return False
                assignments.append(Assignment(
                    request.allocation_id,
                    tuple(Placement(ids[i], slot_ids) for i, slot_ids in placed)))
            grant(job, n)
            return True

        # 1. Jobs below their share, the furthest below first; with preemption, room is made.
        # ``top`` is the entry being served; the job's next entry goes into the heap as the
        # following one comes out (heappushpop: one step, none when it comes straight back).
        heappop, heappushpop = heapq.heappop, heapq.heappushpop
        heap = [j.entry() for j in waiting if j.under()]
        heapq.heapify(heap)
        top = heappop(heap) if heap else None
        while top is not None:
            job = top[3]
            requests = job.requests
            request = requests[job.next]
            job.next += 1
            stuck = False
            if fits[request.slots] <= pool.max_hole and start(request, job):
                pass
            elif room is not None and room.possible():
                victims = room.make_room(request, job)
                if victims is not None:
                    decision.preemptions.extend(victims)
                    grant(job, request.slots)  # its room is held for it
                else:
                    stuck = pool.max_hole < smallest
                    # A request that gets nothing changes nothing: while the job would come
                    # straight back out of the heap, its next requests that would get nothing
                    # either (they fit nothing free, and no room is known) are passed over
                    # here.
                    below = top[0]  # the job's place: allocated - share
                    while job.next < len(requests):
                        following = requests[job.next]
                        n = following.slots
                        if heap and heap[0] < (below, queue_key(following), job.name, job):
                            break  # another job comes first
                        if fits[n] <= pool.max_hole or not room.known_to_fail(n, -below):
                            break
                        job.next += 1
            elif pool.max_hole < smallest:
                break  # nothing fits what is free, and nothing can be preempted
            if job.next < len(requests) and job.allocated < job.share - _EPS:  # under()
                # job.entry(), inlined: a step per request
                top = heappushpop(heap, (job.allocated - job.share,
                                         queue_key(requests[job.next]), job.name, job))
            else:
                top = heappop(heap) if heap else None
            if stuck and top is not None and room is not None and room.hopeless(-top[0]):
                # Nothing fits what is free, and no job is short enough of its share to
                # take anything from others: the jobs to come are even less short.
                break

        # 2. Backfill: whatever is still free, the least served job first.
        heap = [j.entry() for j in waiting
                if j.next < len(j.requests)] if pool.max_hole >= smallest else []
        heapq.heapify(heap)
        top = heapq.heappop(heap) if heap else None
        while top is not None and pool.max_hole >= smallest:
            job = top[3]
            request = job.requests[job.next]
            job.next += 1
            if fits[request.slots] <= pool.max_hole:
                start(request, job)
            if job.next < len(job.requests):
                top = heapq.heappushpop(heap, job.entry())
            else:
                top = heapq.heappop(heap) if heap else None
        if room is not None:
            for aid, taken in room.reserved.items():
                # Most wait for slots that are stopping, with none free reserved.
                reserved[aid] = tuple(Placement(ids[i], slot_ids)
                                      for i, slot_ids in taken) if taken else ()
        return decision, reserved


__all__ = ["FairShareScheduler", "fair_shares"]
