"""Fair share: shares by weight, the least served job first, preemption from jobs above their
share, backfilling, convergence over passes, and making room within a pass."""

from __future__ import annotations

import pytest
from scheduler_checks import Cluster, agent, busy, check_decision

from det_hub.scheduler import (
    Agent,
    Decision,
    FairShareScheduler,
    Placement,
    Request,
    Running,
    fair_shares,
)
from det_hub.scheduler._placement import FreeSlots
from det_hub.scheduler.fair_share import _Job, _Room


def decide(agents: list[Agent], pending: list[Request], running: list[Running] = (),
           preemption: bool = True) -> Decision:
    policy = FairShareScheduler(preemption=preemption)
    decision = policy.schedule(agents, pending, list(running))
    check_decision(agents, pending, list(running), decision, preemption)
    return decision


def trials(group: str, n: int, slots: int = 1, weight: float = 1.0, start: int = 0,
           running: bool = False) -> list:
    kind = Running if running else Request
    return [kind(f"{group}{i}", slots, queued_at=float(start + i), group=group, weight=weight)
            for i in range(n)]


# --- shares ---------------------------------------------------------------------------------
def test_shares_are_max_min_fair_by_weight() -> None:
    assert fair_shares({"a": 2, "b": 10, "c": 10}, {}, 10) == {"a": 2, "b": 4, "c": 4}
    shares = fair_shares({"a": 2, "b": 10, "c": 10}, {"b": 3.0}, 10)
    assert shares == pytest.approx({"a": 2, "b": 6, "c": 2})
    # Everyone's demand fits: everyone gets it.
    assert fair_shares({"a": 1, "b": 2}, {"a": 5.0}, 10) == {"a": 1, "b": 2}
    assert fair_shares({"a": 3}, {}, 0) == {"a": 0}


# --- starting -------------------------------------------------------------------------------
def test_the_least_served_job_goes_first() -> None:
    # a already holds 2 of its share of 2; b holds none: b's requests go first even though
    # a's were queued earlier.
    agents = [agent("x", 4, ["a-run", "a-run"])]
    running = [Running("a-run", 2, group="a")]
    pending = trials("a", 2, start=0) + trials("b", 2, start=10)
    decision = decide(agents, pending, running, preemption=False)
    assert [x.allocation_id for x in decision.assignments] == ["b0", "b1"]


def test_jobs_take_turns_by_how_far_below_share_they_are() -> None:
    pending = trials("a", 4, start=0) + trials("b", 4, start=10) + trials("c", 4, slots=1,
                                                                          weight=2.0, start=20)
    decision = decide([agent("x", 8)], pending, preemption=False)
    got: dict[str, int] = {}
    for x in decision.assignments:
        got[x.allocation_id[0]] = got.get(x.allocation_id[0], 0) + 1
    assert got == {"a": 2, "b": 2, "c": 4}


def test_within_a_job_requests_go_in_queue_order() -> None:
    pending = [Request("low", 1, priority=60, group="a"),
               Request("high", 1, priority=10, queued_at=5, group="a")]
    decision = decide([agent("x", 1)], pending)
    assert [x.allocation_id for x in decision.assignments] == ["high"]


def test_idle_slots_are_backfilled_by_jobs_at_their_share() -> None:
    # Shares 4 and 4. b's 8-slot request cannot fit; a may go above its share with the slots
    # b cannot use.
    agents = [agent("x", 4, ["b-run"] * 2), agent("y", 4)]
    running = [Running("b-run", 2, group="b")]
    pending = trials("a", 8) + [Request("b-big", 4, group="b", queued_at=100)]
    for preemption in (False, True):
        decision = decide(agents, pending, running, preemption=preemption)
        assert sorted(x.allocation_id for x in decision.assignments) == \
            ["a0", "a1", "a2", "a3", "a4", "a5"]
        assert decision.preemptions == []


# --- preemption -----------------------------------------------------------------------------
def test_a_new_job_gets_its_share_by_preemption() -> None:
    running = trials("a", 8, running=True)
    agents = [agent("x", 4, ["a0", "a1", "a2", "a3"]), agent("y", 4, ["a4", "a5", "a6", "a7"])]
    decision = decide(agents, trials("b", 4, start=10), running)
    # Shares 4 and 4: a's four latest allocations go, and nothing starts yet.
    assert sorted(decision.preemptions) == ["a4", "a5", "a6", "a7"]
    assert decision.assignments == []
    assert decide(agents, trials("b", 4, start=10), running, preemption=False) == Decision()


def test_weights_set_the_shares_preemption_restores() -> None:
    running = trials("a", 12, running=True)
    agents = [agent(f"x{j}", 4, [f"a{4 * j + i}" for i in range(4)]) for j in range(3)]
    decision = decide(agents, trials("b", 12, weight=2.0, start=20), running)
    assert len(decision.preemptions) == 8  # b's share is 8 of 12


def test_the_job_most_above_its_share_loses_first() -> None:
    # Shares 4, 4, 4 of 12; a holds 7, c holds 5; b needs 4 slots of 1.
    running = trials("a", 7, running=True) + trials("c", 5, start=10, running=True)
    holders = [r.allocation_id for r in running]
    agents = [agent(f"x{j}", 4, holders[4 * j:4 * j + 4]) for j in range(3)]
    decision = decide(agents, trials("b", 4, start=20), running)
    # a: 7 -> 6 -> 5, then a and c tie at 5 (a first by name) -> 4, then c 5 -> 4.
    assert decision.preemptions == ["a6", "a5", "a4", "c4"]


def test_no_preemption_from_jobs_at_or_below_their_share() -> None:
    running = trials("a", 4, running=True)
    agents = [agent("x", 4, ["a0", "a1", "a2", "a3"]), agent("y", 4)]
    pending = trials("a", 4, start=10) + trials("b", 8, start=20)
    decision = decide(agents, pending, running)
    assert decision.preemptions == []
    assert sorted(x.allocation_id for x in decision.assignments) == ["b0", "b1", "b2", "b3"]


def test_no_preemption_that_would_only_swap_who_is_short() -> None:
    # a holds 6 of an 8-slot agent in one allocation, b wants 4: taking a's 6 would leave a
    # with 0, worse off than b would be; b waits.
    agents = [busy("x", 8, "a-big", 6)]
    running = [Running("a-big", 6, group="a")]
    pending = [Request("b0", 4, group="b"), Request("a-more", 2, group="a")]
    decision = decide(agents, pending, running)
    assert decision.preemptions == []


def test_never_preempts_what_is_not_preemptible() -> None:
    running = [Running(r.allocation_id, 1, group="a", preemptible=False)
               for r in trials("a", 4, running=True)]
    agents = [agent("x", 4, [r.allocation_id for r in running])]
    assert decide(agents, trials("b", 2, start=10), running).preemptions == []


def test_slots_being_freed_count_and_are_reserved() -> None:
    # a was told to give back two slots; b needs 4 (2 free + those 2) and preempts nothing
    # more; c's request of 1 may not take b's free slots meanwhile.
    running = [Running("a0", 1, group="a", preempting=True),
               Running("a1", 1, group="a", preempting=True)]
    agents = [agent("x", 4, ["a0", "a1"])]
    pending = [Request("b0", 4, group="b", queued_at=1), Request("c0", 1, group="c",
                                                                  queued_at=2)]
    assert decide(agents, pending, running) == Decision()
    # Without preemption nothing is reserved: c starts.
    decision = decide(agents, pending, running, preemption=False)
    assert [x.allocation_id for x in decision.assignments] == ["c0"]


def test_a_request_that_finds_no_room_does_not_stop_the_next_of_its_job() -> None:
    # Shares 4/3 each. b, the furthest below, first: b-big (4) cannot get room, h may give
    # one slot only (it must keep more than 4/3 - 4/3 = 0 of its 2). a, 1/3 below, could take
    # nothing from anyone; b's next request, b-small (2), still gets the free slot and h's
    # latest allocation.
    agents = [agent("x", 4, [None, "a-run", "h-run1", "h-run2"])]
    running = [Running("a-run", 1, group="a", queued_at=0),
               Running("h-run1", 1, group="h", queued_at=1),
               Running("h-run2", 1, group="h", queued_at=2)]
    pending = [Request("h-more", 2, group="h", queued_at=10),
               Request("b-big", 4, group="b", queued_at=11),
               Request("b-small", 2, group="b", queued_at=12),
               Request("a-more", 3, group="a", queued_at=13)]
    assert decide(agents, pending, running) == Decision(preemptions=["h-run2"])
    _, reserved = FairShareScheduler()._schedule(agents, pending, running)
    assert reserved == {"b-small": (Placement("x", (0,)),)}


def test_disabled_agents_drain() -> None:
    running = trials("a", 4, running=True)
    agents = [agent("off", 4, [r.allocation_id for r in running], enabled=False),
              agent("on", 2)]
    decision = decide(agents, trials("b", 4, start=10), running)
    assert decision.preemptions == []
    assert sorted(x.allocation_id for x in decision.assignments) == ["b0", "b1"]


# --- over passes ----------------------------------------------------------------------------
def test_shares_are_reached_when_jobs_arrive_one_after_another() -> None:
    cluster = Cluster({f"x{i}": 8 for i in range(4)})
    policy = FairShareScheduler()
    sizes = {"a": 1, "b": 4, "c": 2}
    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    arrive = {"a": 0, "b": 2, "c": 4}
    for step in range(12):
        for g, when in arrive.items():
            if step >= when:
                while sum(r.slots for r in cluster.pending.values() if r.group == g) < 32:
                    cluster.submit(g, sizes[g], weights[g])
        cluster.step(policy)
        if step == 1:
            assert cluster.held_by("abc") == {"a": 32, "b": 0, "c": 0}
    assert cluster.held_by("abc") == {"a": 8, "b": 8, "c": 16}


def test_a_multi_host_request_gets_room_on_equal_parts() -> None:
    # a holds all 12 slots; b's 8-slot request (parts of 4) has a share of 6: a's latest
    # allocations go, filling two agents.
    running = trials("a", 12, running=True)
    agents = [agent(f"x{j}", 4, [f"a{4 * j + i}" for i in range(4)]) for j in range(3)]
    decision = decide(agents, [Request("b0", 8, group="b", queued_at=50)], running)
    assert sorted(decision.preemptions) == sorted(f"a{i}" for i in range(4, 12))


# --- making room within a pass --------------------------------------------------------------
def test_room_is_found_for_a_requester_further_below_its_share_than_the_one_before() -> None:
    # Within a pass, a job whose smallest allocation may not go for a requester is passed
    # over until it changes, as the requesters after it are no further below their share.
    # Should one be further below after all, the job is considered again.
    agents = [agent("x", 2, [None, "h0"]), agent("y", 2, ["h1", "g1"]), agent("z", 1, ["g0"])]
    running = [Running("h0", 1, group="h"), Running("h1", 1, group="h", preemptible=False),
               Running("g0", 1, group="g"), Running("g1", 1, group="g", preemptible=False)]
    jobs = {}
    for name, share, allocated in (("h", 1.8, 2.0), ("g", 1.0, 2.0), ("b", 0.5, 0.0),
                                   ("a", 1.5, 0.0)):
        jobs[name] = _Job(name, 1.0)
        jobs[name].share, jobs[name].allocated = share, allocated
    room = _Room(FreeSlots(agents, "best", holders=True), running, jobs)
    # b, 0.5 below its share, may take from g (whose only victim is on too small an agent
    # for 2 slots), not from h: h would keep 1 of its 1.8 (it must keep more than 1.3).
    assert room.make_room(Request("b0", 2, group="b"), jobs["b"]) is None
    # a, 1.5 below, may take from h (it keeps 1, more than 0.3): h0 goes, next to x's free
    # slot.
    assert room.make_room(Request("a0", 2, group="a"), jobs["a"]) == ["h0"]
    assert room.reserved == {"a0": [(0, (0,))]}
