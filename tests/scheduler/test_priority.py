"""Priority scheduling: order, fit, and never more slots than exist."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from det_hub.scheduler import Agent, PriorityScheduler, Request, Slot


def agent(aid: str, n: int, busy: int = 0) -> Agent:
    return Agent(aid, tuple(Slot(i, "cpu", "x" if i < busy else None) for i in range(n)))


def test_most_important_first_then_first_come() -> None:
    pending = [Request("late", 1, priority=42, queued_at=2.0),
               Request("early", 1, priority=42, queued_at=1.0),
               Request("urgent", 1, priority=1, queued_at=3.0)]
    decision = PriorityScheduler().schedule([agent("a", 2)], pending)
    assert [a.allocation_id for a in decision.assignments] == ["urgent", "early"]


def test_best_fit_keeps_the_big_hole_for_big_requests() -> None:
    agents = [agent("big", 4), agent("small", 2, busy=1)]
    decision = PriorityScheduler().schedule(agents, [Request("one", 1, queued_at=0),
                                                      Request("four", 4, queued_at=1)])
    placed = {a.allocation_id: a.agent_id for a in decision.assignments}
    assert placed == {"one": "small", "four": "big"}


def test_a_request_that_does_not_fit_does_not_block_smaller_ones() -> None:
    decision = PriorityScheduler().schedule(
        [agent("a", 2, busy=1)], [Request("two", 2, queued_at=0), Request("one", 1, queued_at=1)])
    assert [(a.allocation_id, a.slot_ids) for a in decision.assignments] == [("one", (1,))]


def test_disabled_agents_get_nothing() -> None:
    a = Agent("off", (Slot(0),), enabled=False)
    assert PriorityScheduler().schedule([a], [Request("r", 1)]).assignments == []


@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    requests=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 99)), max_size=20),
)
def test_never_hands_out_a_slot_twice_or_a_busy_one(sizes, requests) -> None:
    agents = [agent(f"a{i}", n, busy=n // 3) for i, n in enumerate(sizes)]
    pending = [Request(f"r{i}", s, p, float(i)) for i, (s, p) in enumerate(requests)]
    decision = PriorityScheduler().schedule(agents, pending)
    used: set[tuple[str, int]] = set()
    by_id = {r.allocation_id: r for r in pending}
    for a in decision.assignments:
        assert len(a.slot_ids) == by_id[a.allocation_id].slots
        for s in a.slot_ids:
            slot = next(x for x in next(g for g in agents if g.id == a.agent_id).slots
                        if x.id == s)
            assert slot.free
            assert (a.agent_id, s) not in used
            used.add((a.agent_id, s))
    # Anything left out really did not fit in what remained when its turn came.
    placed = {a.allocation_id for a in decision.assignments}
    free_total = sum(len(g.free_slots()) for g in agents)
    assert len(used) <= free_total
    if not placed and pending:
        assert all(r.slots > max(len(g.free_slots()) for g in agents) for r in pending)
