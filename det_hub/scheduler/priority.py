"""Priority scheduling: the most important request first, with backfilling and optional preemption.

Requests are considered in queue order: priority (1 first), then the job's position, then when
the allocation was queued. Each takes free slots where the fitting policy says
(:mod:`det_hub.scheduler._placement`); one that does not fit does not hold up the smaller ones
behind it (backfilling), since idle slots help nobody.

With preemption on, a request that does not fit looks at what runs: allocations that are
preemptible, strictly less important and on enabled agents. Among the ways to make room on one
agent (or on ``k`` agents for a multi-host request) it takes, in this order of preference:

1. none at all, when free slots and slots of allocations already told to stop are enough;
2. victims whose most important member is as unimportant as possible;
3. the fewest slots preempted;
4. victims queued as recently as possible (the oldest victim of the set the youngest);
5. the agent the fitting policy prefers, then the smaller agent id.

The request then owns that room for the rest of the pass: the free slots it needs on its
agents, and the slots being freed there, are reserved for it, so that less important requests
behind it cannot take them; it starts in a later pass, once its victims have left. Slots a
victim frees beyond what the request needs (on its agent, or on other agents for a victim that
spans several) count as being freed for the requests behind it, which then preempt no more
than they must.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

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
from det_hub.scheduler._queue import in_queue_order

# A victim on an agent: (priority, queued_at, allocation id, slots on this agent, slots in all).
_Victim = tuple[int, float, str, int, int]
# A heap entry's key: (-level, slots preempted, -queued_at of the oldest victim, fit, agent).
_Key = tuple[float, int, float, int, int]
# A heap entry: the key, then the agent's version and free count it was computed at.
_Entry = tuple[_Key, int, int]

_NO_VICTIM = -math.inf  # -level of a plan that preempts nothing: better than any level


def _preference(v: _Victim) -> tuple[int, float, str]:
    # Victims in the order they are preferred: least important, then latest queued.
    return (-v[0], -v[1], v[2])


def _lowest_bit(x: int) -> int:
    return (x & -x).bit_length() - 1


def _cheapest(items: Sequence[_Victim], need: int) -> tuple[int, float]:
    """Among sets of ``items`` holding at least ``need`` slots on the agent: the fewest slots
    preempted, and the latest queued_at the oldest member of such a set can have."""
    if all(v[3] == v[4] for v in items):
        # Each victim lives on this agent only: the cheapest set is a subset sum, done on the
        # bits of an int (bit s set: some subset holds exactly s slots).
        reach = 1
        for v in items:
            reach |= reach << v[3]
        cost = need + _lowest_bit(reach >> need)
        reach = 1
        # Latest queued first; items of one level already come so.
        by_age = items if items[0][0] == items[-1][0] else sorted(items, key=lambda v: -v[1])
        for v in by_age:
            reach |= reach << v[3]
            rest = reach >> need
            if rest and need + _lowest_bit(rest) == cost:
                return cost, v[1]
        raise AssertionError("unreachable: all items reach the cost")
    chosen = _choose(items, need)
    return sum(v[4] for v in chosen), min(v[1] for v in chosen)


def _choose(items: Sequence[_Victim], need: int) -> list[_Victim]:
    """The set :func:`_cheapest` describes; among equals, the first found in ``items``' order.

    A knapsack over slots held on the agent, capped at ``need``: for each total it keeps the
    best (slots preempted, -queued_at of the oldest) and the set that gives it. Keeping only the
    best per total is exact, since adding the same victims later keeps the order of both parts.
    """
    best: dict[int, tuple[int, float, tuple[_Victim, ...]]] = {0: (0, -math.inf, ())}
    for v in items:
        for total, (cost, oldest, chosen) in list(best.items()):
            reached = min(need, total + v[3])
            candidate = (cost + v[4], max(oldest, -v[1]), (*chosen, v))
            current = best.get(reached)
            if current is None or candidate[:2] < current[:2]:
                best[reached] = candidate
    return list(best[need][2])


class _Room:
    """What running allocations could give up for a request, within one pass.

    Per enabled agent: ``freeing``, slots of allocations already told to stop that no request
    has claimed yet in this pass, and ``victims``, the preemptible allocations that are not
    stopping yet, least important and most recently queued first.

    For each request size ``n`` a heap ranks the agents by how they would make room for ``n``
    (the module docstring's preferences). Entries are recomputed when they come to the top if
    the agent changed since (its version or free count): changes made by assignments and
    reservations only make an agent's plan worse, so a fresh entry on top is truly the best.
    Changes that make a plan better (slots of a victim that spans agents start freeing on its
    other agents) push a fresh entry at once.
    """

    def __init__(self, pool: FreeSlots, running: Sequence[Running]):
        self.pool = pool
        n = len(pool.agent_ids)
        info, self.freeing, self.spans = pool.holdings(running)
        self.victims: list[list[_Victim]] = [[] for _ in range(n)]
        self.by_priority: dict[int, int] = {}
        #: Per agent: slots its victims hold there.
        self.held_by_victims = [0] * n
        victims, potential = self.victims, self.held_by_victims
        for aid, span in self.spans.items():
            r = info[aid]
            total = max(r.slots, sum(c for _, c in span))
            for i, count in span:
                victims[i].append((r.priority, r.queued_at, aid, count, total))
                potential[i] += count
            self.by_priority[r.priority] = self.by_priority.get(r.priority, 0) + 1
        for vs in victims:
            if len(vs) > 1:
                vs.sort(key=_preference)
        self.priorities = sorted(self.by_priority, reverse=True)
        self.freeing_total = sum(self.freeing)
        self.version = [0] * n
        self.heaps: dict[int, list[_Entry]] = {}
        # Per heap: agent -> (version, free count) of the entry it has there.
        self.live: dict[int, dict[int, tuple[int, int]]] = {}
        # Sizes for which no agent can make room for the requests still to come; forgotten
        # when some agent's room grows.
        self.dead_single = math.inf
        self.dead_multi: set[int] = set()
        #: Free slots reserved per request: (agent, slot ids).
        self.reserved: dict[str, list[tuple[int, tuple[int, ...]]]] = {}

    def least_important(self) -> int:
        """The largest priority number among victims still available; 0 if none."""
        while self.priorities and not self.by_priority[self.priorities[0]]:
            self.priorities.pop(0)
        return self.priorities[0] if self.priorities else 0

    def possible(self, priority: int) -> bool:
        """Whether any request of ``priority`` or less important could get room."""
        return self.freeing_total > 0 or self.least_important() > priority

    # --- ranking agents --------------------------------------------------------------------
    def _level_items(self, i: int, need: int) -> list[_Victim] | None:
        # The victims of the least important level that suffices, and all less important.
        vs = self.victims[i]
        total = 0
        for j, v in enumerate(vs):
            total += v[3]
            if total >= need:
                level = v[0]
                j += 1
                while j < len(vs) and vs[j][0] == level:
                    j += 1
                return vs[:j]
        return None

    def key(self, i: int, n: int) -> _Key | None:
        """How agent ``i`` would make room for ``n`` slots; None if it cannot."""
        pool = self.pool
        have = pool.nfree[i] + self.freeing[i]
        if pool.capacity[i] < n or have + self.held_by_victims[i] < n:
            return None
        fit = have if pool.best else -have
        need = n - have
        if need <= 0:
            return (_NO_VICTIM, 0, 0.0, fit, i)
        items = self._level_items(i, need)
        assert items is not None  # the victims hold enough
        if len(items) == 1:
            v = items[0]
            return (-v[0], v[4], -v[1], fit, i)
        cost, oldest = _cheapest(items, need)
        return (-items[-1][0], cost, -oldest, fit, i)

    def _heap(self, n: int) -> list[_Entry]:
        heap = self.heaps.get(n)
        if heap is None:
            pool, version, freeing = self.pool, self.version, self.freeing
            capacity, potential, victims = pool.capacity, self.held_by_victims, self.victims
            best = pool.best
            live: dict[int, tuple[int, int]] = {}
            heap = []
            for i, free in enumerate(pool.nfree):
                have = free + freeing[i]
                if have + potential[i] < n or capacity[i] < n:
                    continue
                # What key() gives, inlined for the common cases: a thousand agents per size.
                vs = victims[i]
                k: _Key | None
                if have >= n:
                    k = (_NO_VICTIM, 0, 0.0, have if best else -have, i)
                elif vs[0][3] >= n - have and (len(vs) == 1 or vs[1][0] != vs[0][0]):
                    v = vs[0]
                    k = (-v[0], v[4], -v[1], have if best else -have, i)
                else:
                    k = self.key(i, n)
                if k is not None:
                    heap.append((k, version[i], free))
                    live[i] = (version[i], free)
            heapq.heapify(heap)
            self.heaps[n] = heap
            self.live[n] = live
        return heap

    def _refresh(self, i: int) -> None:
        # Agent i's room grew: give it a fresh entry in every heap.
        self.version[i] += 1
        free = self.pool.nfree[i]
        for n, heap in self.heaps.items():
            k = self.key(i, n)
            if k is not None:
                heapq.heappush(heap, (k, self.version[i], free))
                self.live[n][i] = (self.version[i], free)
        self.dead_single = math.inf
        self.dead_multi.clear()

    def best_agents(self, n: int, k: int, priority: int) -> list[int] | None:
        """The ``k`` agents that best make room for ``n`` slots each for a request of
        ``priority``, best first; None if fewer than ``k`` can."""
        heap = self._heap(n)
        live = self.live[n]
        version, nfree = self.version, self.pool.nfree
        chosen: list[_Entry] = []
        while heap:
            key, ver, free = heap[0]
            i = key[-1]
            if ver != version[i] or free != nfree[i]:
                now = (version[i], nfree[i])
                if live.get(i) == now:
                    heapq.heappop(heap)  # it has a current entry further down
                    continue
                fresh = self.key(i, n)
                if fresh is None:
                    heapq.heappop(heap)
                    live.pop(i, None)
                else:
                    heapq.heapreplace(heap, (fresh, *now))
                    live[i] = now
                continue
            if -key[0] <= priority:
                break  # the best level left is not below the request's importance
            if k == 1:
                return [i]
            chosen.append(heapq.heappop(heap))
            if len(chosen) == k:
                break
        for entry in chosen:
            heapq.heappush(heap, entry)
        return [e[0][-1] for e in chosen] if len(chosen) == k else None

    # --- committing ------------------------------------------------------------------------
    def claim(self, i: int, n: int, owner: str) -> list[str]:
        """Reserve room for ``n`` slots on agent ``i`` (which :meth:`best_agents` gave) for
        request ``owner``.

        Returns:
            Allocations newly to preempt.
        """
        pool = self.pool
        taken = min(pool.nfree[i], n)
        if taken:
            # Reserved: these slots go to nobody else in this pass.
            self.reserved.setdefault(owner, []).append((i, pool.take(i, taken)))
        rest = n - taken
        use = min(self.freeing[i], rest)
        self.freeing[i] -= use
        self.freeing_total -= use
        rest -= use
        self.version[i] += 1
        if rest <= 0:
            return []
        items = self._level_items(i, rest)
        assert items is not None, "claim() follows best_agents()"
        chosen = items if len(items) == 1 else _choose(items, rest)
        grown: set[int] = set()
        for v in chosen:
            aid = v[2]
            self.by_priority[v[0]] -= 1
            for j, count in self.spans.pop(aid):
                self.victims[j].remove(next(x for x in self.victims[j] if x[2] == aid))
                self.held_by_victims[j] -= count
                if j != i:
                    # Its slots elsewhere start freeing: another request may claim them.
                    self.freeing[j] += count
                    self.freeing_total += count
                    grown.add(j)
        leftover = sum(v[3] for v in chosen) - rest
        if leftover:
            self.freeing[i] += leftover
            self.freeing_total += leftover
            grown.add(i)
        for j in sorted(grown):
            self._refresh(j)
        return [v[2] for v in chosen]


class PriorityScheduler(Scheduler):
    """The most important request first; backfilling; optional preemption.

    See the module docstring for the rules.

    Args:
        preemption: Ask less important running allocations to stop for a request that does
            not fit.
        fitting_policy: ``"best"`` (fewest free slots that fit) or ``"worst"`` (most).

    Raises:
        ValueError: ``fitting_policy`` is neither.
    """

    def _schedule(
        self, agents: Sequence[Agent], pending: Sequence[Request], running: Sequence[Running]
    ) -> tuple[Decision, dict[str, tuple[Placement, ...]]]:
        # The decision, and the free slots reserved for each request that waits for its
        # victims (what the pass kept from less important requests; the tests check it).
        decision = Decision()
        reserved: dict[str, tuple[Placement, ...]] = {}
        pool = FreeSlots(agents, self.fitting_policy, holders=self.preemption)
        if not pool.agent_ids or not pending:
            return decision, reserved
        holes = {n: pool.smallest_hole(n) for n in {r.slots for r in pending}}
        smallest = min((h for h in holes.values() if h is not None), default=None)
        if smallest is None:
            return decision, reserved  # nothing could ever run here
        room: _Room | None = None
        ids = pool.agent_ids
        assignments = decision.assignments
        one_agent = pool.max_capacity
        for request in in_queue_order(pending):
            n = request.slots
            if n <= one_agent:
                # The common case, inlined: a request that fits on one agent or waits.
                if n <= pool.max_hole:
                    i = pool.find_one(n)
                    assignments.append(Assignment(
                        request.allocation_id, (Placement(ids[i], pool.take(i, n)),)))
                    continue
            elif (hole := holes[n]) is None:
                continue
            elif hole <= pool.max_hole:
                placed = pool.place(n)
                if placed is not None:
                    assignments.append(Assignment(
                        request.allocation_id,
                        tuple(Placement(ids[i], slot_ids) for i, slot_ids in placed)))
                    continue
            if self.preemption:
                if room is None:
                    room = _Room(pool, running)
                if room.possible(request.priority):
                    decision.preemptions.extend(self._make_room(room, request))
                    continue
            if pool.max_hole < smallest:
                break  # no free slot fits anything and nothing more can be preempted
        if room is not None:
            for aid, taken in room.reserved.items():
                reserved[aid] = tuple(Placement(ids[i], slot_ids) for i, slot_ids in taken)
        return decision, reserved

    @staticmethod
    def _make_room(room: _Room, request: Request) -> list[str]:
        n, priority = request.slots, request.priority
        pool = room.pool
        if n <= pool.max_capacity:
            if n >= room.dead_single:
                return []
            best = room.best_agents(n, 1, priority)
            if best is None:
                room.dead_single = n
                return []
            return room.claim(best[0], n, request.allocation_id)
        if n in room.dead_multi:
            return []
        for k, per in pool.shapes(n):
            chosen = room.best_agents(per, k, priority)
            if chosen is not None:
                victims: list[str] = []
                for i in chosen:
                    victims.extend(room.claim(i, per, request.allocation_id))
                return victims
        room.dead_multi.add(n)
        return []


__all__ = ["PriorityScheduler"]
