"""Where a request fits: the free slots of a pool during one scheduling pass.

:class:`FreeSlots` is the working copy a policy takes from, shared by every policy so that they
place gangs, split multi-host requests and apply the fitting policy the same way:

* A request fits on one agent that has enough free slots. ``best`` fit takes the agent with the
  fewest free slots among those that fit (big holes stay for big requests), ``worst`` fit the
  one with the most (load spreads); ties go to the smaller agent id.
* A request larger than every enabled agent's slot count is spread over ``k`` agents with
  ``slots // k`` slots on each (torch.distributed wants as many processes on every node): the
  smallest ``k`` that divides the request and for which ``k`` agents have that many free slots,
  those agents chosen by the fitting policy. A request that fits on one agent by size is never
  spread.

Agents sit in buckets by free-slot count, so a fit costs a walk over slot counts, not over
agents: a pass over a thousand agents and ten thousand requests stays within milliseconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import attrgetter

from det_hub.scheduler._base import Agent, Running, check_fitting_policy

_by_id = attrgetter("id")


class FreeSlots:
    """The enabled agents of a pool and their free slots, taken from as a pass decides.

    Agents are numbered 0.. in id order; the number is what the methods take and return.
    Free slots only ever go down within a pass (slots being preempted free up in a later
    pass), which is what lets the buckets below drop stale entries lazily.

    Args:
        agents: Every agent of the pool; disabled ones are left out.
        fitting_policy: ``"best"`` or ``"worst"``.
        holders: Also record, per agent, how many slots each allocation holds there (for
            policies that preempt).
    """

    def __init__(self, agents: Sequence[Agent], fitting_policy: str, holders: bool = False):
        enabled = sorted((a for a in agents if a.enabled), key=_by_id)
        self.agent_ids: list[str] = [a.id for a in enabled]
        self.capacity: list[int] = [len(a.slots) for a in enabled]
        #: Per agent: allocation id -> slots it holds there (empty unless ``holders``).
        self.held: list[dict[str, int]] = []
        if holders:
            free_ids: list[list[int]] = []
            for agent in enabled:
                free: list[int] = []
                held: dict[str, int] = {}
                for slot in agent.slots:
                    aid = slot.allocation_id
                    if aid is None:
                        free.append(slot.id)
                    else:
                        held[aid] = held.get(aid, 0) + 1
                free_ids.append(free)
                self.held.append(held)
        else:
            free_ids = [[s.id for s in a.slots if s.allocation_id is None] for a in enabled]
        #: Per agent: ids of its free slots, in slot order; taken from the front.
        self.free_ids = free_ids
        #: Per agent: how many free slots it has (len of ``free_ids``).
        self.nfree: list[int] = [len(f) for f in free_ids]
        self.best = check_fitting_policy(fitting_policy) == "best"
        top = max(self.capacity, default=0)
        self.max_capacity = top
        self.total_capacity = sum(self.capacity)
        # buckets[b]: heap of agents that had b free slots when pushed; an entry is current
        # while the agent still has b free. count[b]: agents that have b free now.
        self.buckets: list[list[int]] = [[] for _ in range(top + 1)]
        self.count = [0] * (top + 1)
        for i, n in enumerate(self.nfree):
            self.buckets[n].append(i)  # pushed in increasing order: already a heap
            self.count[n] += 1
        #: The most free slots any agent has; -1 without agents.
        self.max_hole = max(self.nfree, default=-1)
        # at_least[c]: agents with at least c slots in all.
        at_least = [0] * (top + 2)
        for c in self.capacity:
            at_least[c] += 1
        for c in range(top - 1, -1, -1):
            at_least[c] += at_least[c + 1]
        self._capacity_at_least = at_least
        self._shapes: dict[int, tuple[tuple[int, int], ...]] = {}

    # --- shapes --------------------------------------------------------------------------

    def holdings(
        self, running: Sequence[Running]
    ) -> tuple[dict[str, Running], list[int], dict[str, list[tuple[int, int]]]]:
        """How the running allocations hold the slots recorded with ``holders``.

        Returns:
            The running allocations by id; per agent, the slots of allocations already told
            to stop (they are freeing); and per preemptible allocation not stopping yet, the
            ``(agent index, slots held there)`` of each agent it holds slots on. A holder
            ``running`` does not describe is neither stopping nor preemptible.
        """
        info = {r.allocation_id: r for r in running}
        freeing = [0] * len(self.agent_ids)
        spans: dict[str, list[tuple[int, int]]] = {}
        for i, held in enumerate(self.held):
            for aid, count in held.items():
                r = info.get(aid)
                if r is None:
                    continue
                if r.preempting:
                    freeing[i] += count
                elif r.preemptible:
                    spans.setdefault(aid, []).append((i, count))
        return info, freeing, spans
    def shapes(self, slots: int) -> tuple[tuple[int, int], ...]:
        """The ways a request of ``slots`` may be laid out here, by slot count alone.

        Returns:
            ``(k, per_agent)`` pairs, fewest agents first: ``((1, slots),)`` when one agent is
            big enough, else every split into ``k`` equal parts that ``k`` agents are big
            enough for; empty when the request can never run in this pool.
        """
        found = self._shapes.get(slots)
        if found is None:
            found = self._compute_shapes(slots)
            self._shapes[slots] = found
        return found

    def _compute_shapes(self, slots: int) -> tuple[tuple[int, int], ...]:
        if not self.agent_ids:
            return ()
        if slots <= self.max_capacity:
            return ((1, slots),)
        at_least = self._capacity_at_least
        found = []
        for k in range(2, min(slots, len(self.agent_ids)) + 1):
            per, rest = divmod(slots, k)
            if rest == 0 and per <= self.max_capacity and at_least[per] >= k:
                found.append((k, per))
        return tuple(found)

    def smallest_hole(self, slots: int) -> int | None:
        """The fewest free slots an agent must have to take part in placing ``slots``; None
        when the request can never run here."""
        shapes = self.shapes(slots)
        return min(per for _, per in shapes) if shapes else None

    # --- counting and choosing agents -------------------------------------------------------
    def agents_with(self, at_least: int) -> int:
        """How many agents have at least ``at_least`` free slots."""
        count = self.count
        return sum(count[b] for b in range(max(at_least, 0), self.max_hole + 1))

    def _top(self, b: int) -> int:
        heap = self.buckets[b]
        nfree = self.nfree
        while nfree[heap[0]] != b:
            heapq.heappop(heap)
        return heap[0]

    def find_one(self, slots: int) -> int:
        """The agent the fitting policy gives ``slots`` on one agent, or -1 if none fits."""
        if slots > self.max_hole:
            return -1
        if not self.best:
            return self._top(self.max_hole)
        count = self.count
        for b in range(max(slots, 0), self.max_hole + 1):
            if count[b]:
                return self._top(b)
        return -1  # unreachable: max_hole has an agent

    def agents_with_free(self, at_least: int) -> list[int]:
        """The agents with at least ``at_least`` free slots, in fitting-policy order."""
        found: list[int] = []
        steps = range(max(at_least, 0), self.max_hole + 1)
        for b in steps if self.best else reversed(steps):
            if self.count[b]:
                nfree = self.nfree
                found.extend(sorted({i for i in self.buckets[b] if nfree[i] == b}))
        return found

    def _pop_agents(self, at_least: int, k: int) -> list[int]:
        # The k agents the fitting policy picks among those with at_least free; the caller
        # has counted that there are k and takes from each at once.
        chosen: list[int] = []
        steps = range(max(at_least, 0), self.max_hole + 1)
        nfree, count = self.nfree, self.count
        for b in steps if self.best else reversed(steps):
            if not count[b]:
                continue
            heap = self.buckets[b]
            want = min(k - len(chosen), count[b])
            while want:
                i = heapq.heappop(heap)
                if nfree[i] == b:
                    chosen.append(i)
                    want -= 1
            if len(chosen) == k:
                break
        return chosen

    # --- taking slots ----------------------------------------------------------------------
    def take(self, i: int, slots: int) -> tuple[int, ...]:
        """Take ``slots`` free slots of agent ``i`` (the first in slot order).

        Returns:
            The ids of the slots taken.
        """
        if slots == 0:
            return ()  # moving the agent to the bucket it is in would list it there twice
        free = self.free_ids[i]
        ids = tuple(free[:slots])
        del free[:slots]
        old = self.nfree[i]
        new = old - slots
        self.nfree[i] = new
        count = self.count
        count[old] -= 1
        count[new] += 1
        heapq.heappush(self.buckets[new], i)
        if old == self.max_hole and not count[old]:
            hole = old - 1
            while hole >= 0 and not count[hole]:
                hole -= 1
            self.max_hole = hole
        return ids

    def place(self, slots: int) -> list[tuple[int, tuple[int, ...]]] | None:
        """Take slots for a request of ``slots`` if it fits now.

        Returns:
            ``(agent, slot ids)`` per agent used, or None (nothing taken) if it does not fit.
        """
        for k, per in self.shapes(slots):
            if per > self.max_hole:
                continue
            if k == 1:
                i = self.find_one(per)
                return [(i, self.take(i, per))]
            if self.agents_with(per) >= k:
                return [(i, self.take(i, per)) for i in self._pop_agents(per, k)]
        return None

    def fits(self, slots: int) -> bool:
        """Whether a request of ``slots`` fits in the free slots now (nothing is taken)."""
        return any(per <= self.max_hole and (k == 1 or self.agents_with(per) >= k)
                   for k, per in self.shapes(slots))


__all__ = ["FreeSlots"]
