"""Priority scheduling: queue order, backfilling, and preemption with its reservations."""

from __future__ import annotations

from scheduler_checks import agent, busy, check_decision

from det_hub.scheduler import Agent, Decision, PriorityScheduler, Request, Running


def decide(agents: list[Agent], pending: list[Request], running: list[Running] = (),
           preemption: bool = True, fitting_policy: str = "best") -> Decision:
    policy = PriorityScheduler(preemption=preemption, fitting_policy=fitting_policy)
    decision = policy.schedule(agents, pending, list(running))
    check_decision(agents, pending, list(running), decision, preemption)
    return decision


def started(decision: Decision) -> list[str]:
    return [a.allocation_id for a in decision.assignments]


# --- order and backfilling ------------------------------------------------------------------
def test_most_important_first_then_position_then_first_come() -> None:
    pending = [Request("late", 1, queued_at=2.0),
               Request("early", 1, queued_at=1.0),
               Request("moved-ahead", 1, position=-1.0, queued_at=5.0),
               Request("urgent", 1, priority=1, queued_at=3.0),
               Request("same-time-b", 1, queued_at=0.5),
               Request("same-time-a", 1, queued_at=0.5)]
    decision = decide([agent("a", 5)], pending, preemption=False)
    assert started(decision) == ["urgent", "moved-ahead", "same-time-a", "same-time-b", "early"]


def test_a_request_that_does_not_fit_does_not_block_smaller_ones() -> None:
    decision = decide([busy("a", 2, "x", 1)],
                      [Request("two", 2, queued_at=0), Request("one", 1, queued_at=1)],
                      preemption=False)
    assert [(a.allocation_id, a.placements[0].slot_ids) for a in decision.assignments] == \
        [("one", (1,))]


def test_without_preemption_nothing_is_preempted() -> None:
    running = [Running("low", 4, priority=99)]
    decision = decide([busy("a", 4, "low", 4)], [Request("high", 4, priority=1)], running,
                      preemption=False)
    assert decision.assignments == [] and decision.preemptions == []


# --- preemption -----------------------------------------------------------------------------
def test_preempts_the_least_important_victims() -> None:
    agents = [busy("a", 4, "p80", 4), busy("b", 4, "p60", 4)]
    running = [Running("p80", 4, priority=80), Running("p60", 4, priority=60)]
    decision = decide(agents, [Request("urgent", 4, priority=10)], running)
    assert decision.preemptions == ["p80"] and decision.assignments == []


def test_prefers_less_important_victims_even_when_that_costs_more_slots() -> None:
    agents = [busy("a", 4, "p50", 2), busy("b", 4, "p90", 4)]
    running = [Running("p50", 2, priority=50), Running("p90", 4, priority=90)]
    decision = decide(agents, [Request("urgent", 4, priority=10)], running)
    assert decision.preemptions == ["p90"]


def test_preempts_as_few_slots_as_possible() -> None:
    # Need 4 on one agent: a's two allocations of 2, or b's 8; a's cost fewer slots.
    agents = [agent("a", 4, ["x1", "x1", "x2", "x2"]), busy("b", 8, "big", 8)]
    running = [Running("x1", 2, priority=80), Running("x2", 2, priority=80),
               Running("big", 8, priority=80)]
    decision = decide(agents, [Request("r", 4, priority=10)], running)
    assert sorted(decision.preemptions) == ["x1", "x2"]
    # Need 4 among victims of 3, 2 and 2 on one agent: 2 + 2 preempts 4 slots, not 5.
    agents = [agent("a", 7, ["t", "t", "t", "u", "u", "v", "v"])]
    running = [Running("t", 3, priority=80, queued_at=9.0), Running("u", 2, priority=80),
               Running("v", 2, priority=80)]
    decision = decide(agents, [Request("r", 4, priority=10)], running)
    assert sorted(decision.preemptions) == ["u", "v"]


def test_among_equals_the_most_recently_queued_goes() -> None:
    agents = [agent("a", 2, ["old", "new"])]
    running = [Running("old", 1, priority=80, queued_at=1.0),
               Running("new", 1, priority=80, queued_at=2.0)]
    assert decide(agents, [Request("r", 1, priority=10)], running).preemptions == ["new"]
    # Across agents too.
    agents = [busy("a", 2, "old", 2), busy("b", 2, "new", 2)]
    running = [Running("old", 2, priority=80, queued_at=1.0),
               Running("new", 2, priority=80, queued_at=2.0)]
    assert decide(agents, [Request("r", 2, priority=10)], running).preemptions == ["new"]


def test_free_slots_are_used_before_preempting() -> None:
    # 2 free on a, so only 2 more are needed there: one allocation of 2, not b's 4.
    agents = [agent("a", 4, ["x", "x"]), busy("b", 4, "y", 4)]
    running = [Running("x", 2, priority=80), Running("y", 4, priority=80)]
    decision = decide(agents, [Request("r", 4, priority=10)], running)
    assert decision.preemptions == ["x"]


def test_reserved_room_is_not_backfilled_by_less_important_requests() -> None:
    agents = [agent("a", 4, ["low", "low"])]
    running = [Running("low", 2, priority=80)]
    pending = [Request("urgent", 4, priority=10), Request("filler", 2, priority=50)]
    decision = decide(agents, pending, running)
    assert decision.preemptions == ["low"]
    assert decision.assignments == []  # filler would have taken urgent's free slots
    # Without preemption nothing is reserved: the filler backfills.
    assert started(decide(agents, pending, running, preemption=False)) == ["filler"]


def test_reservation_leaves_other_agents_to_backfill() -> None:
    agents = [agent("a", 4, ["low", "low"]), agent("b", 2)]
    running = [Running("low", 2, priority=80)]
    pending = [Request("urgent", 4, priority=10), Request("filler", 2, priority=50)]
    decision = decide(agents, pending, running)
    assert decision.preemptions == ["low"]
    assert [(a.allocation_id, a.placements[0].agent_id) for a in decision.assignments] == \
        [("filler", "b")]


def test_slots_already_being_freed_count_and_need_no_new_preemption() -> None:
    agents = [agent("a", 4, ["leaving", "leaving", "low", "low"])]
    running = [Running("leaving", 2, priority=80, preempting=True),
               Running("low", 2, priority=80)]
    pending = [Request("r", 4, priority=10)]
    # 2 leaving + 2 of low: only low is new.
    assert decide(agents, pending, running).preemptions == ["low"]
    agents = [agent("a", 4, ["leaving", "leaving", None, None])]
    running = [Running("leaving", 2, priority=80, preempting=True)]
    pending = [Request("r", 4, priority=10), Request("filler", 1, priority=60)]
    decision = decide(agents, pending, running)
    assert decision.preemptions == [] and decision.assignments == []


def test_slots_being_freed_are_claimed_once() -> None:
    # Two requests for the same 4 slots being freed: the second has to preempt elsewhere.
    agents = [busy("a", 4, "leaving", 4), busy("b", 4, "low", 4)]
    running = [Running("leaving", 4, priority=80, preempting=True),
               Running("low", 4, priority=80)]
    pending = [Request("r1", 4, priority=10, queued_at=1), Request("r2", 4, priority=10,
                                                                      queued_at=2)]
    assert decide(agents, pending, running).preemptions == ["low"]


def test_a_victim_frees_slots_once_for_one_request() -> None:
    # One victim of 4 on a; two requests of 2 more important: the second uses the half the
    # first left over instead of preempting another allocation.
    agents = [busy("a", 4, "big", 4), busy("b", 2, "small", 2)]
    running = [Running("big", 4, priority=80, queued_at=2), Running("small", 2, priority=80)]
    pending = [Request("r1", 4, priority=10, queued_at=1), Request("r2", 2, priority=10,
                                                                      queued_at=2)]
    decision = decide(agents, pending, running)
    assert decision.preemptions == ["big", "small"]
    pending = [Request("r1", 2, priority=10, queued_at=1), Request("r2", 2, priority=10,
                                                                      queued_at=2)]
    agents = [busy("a", 4, "big", 4)]
    running = [Running("big", 4, priority=80)]
    assert decide(agents, pending, running).preemptions == ["big"]


def test_never_preempts_what_is_not_preemptible() -> None:
    agents = [busy("a", 4, "notebook", 4)]
    running = [Running("notebook", 4, priority=99, preemptible=False)]
    decision = decide(agents, [Request("r", 4, priority=1)], running)
    assert decision.preemptions == []


def test_never_preempts_for_a_request_of_equal_or_lesser_importance() -> None:
    agents = [busy("a", 4, "x", 4)]
    for priority in (42, 50):
        running = [Running("x", 4, priority=42)]
        assert decide(agents, [Request("r", 4, priority=priority)], running).preemptions == []


def test_multi_host_request_preempts_on_equal_parts() -> None:
    agents = [busy("a", 4, "x", 4), busy("b", 4, "y", 4), agent("c", 4, ["z"])]
    running = [Running("x", 4, priority=80, queued_at=1), Running("y", 4, priority=70),
               Running("z", 1, priority=80)]
    decision = decide(agents, [Request("eight", 8, priority=10)], running)
    # Parts of 4 on two agents: the least important victims are x and z (level 80).
    assert sorted(decision.preemptions) == ["x", "z"]


def test_a_victim_spanning_agents_frees_its_other_part_for_others() -> None:
    # "wide" (the least important) holds 4 on a and 4 on b. r1 preempts it for a's part;
    # b's part then counts as freeing for r2, which preempts nothing more.
    agents = [busy("a", 4, "wide", 4), busy("b", 4, "wide", 4), busy("c", 4, "other", 4)]
    running = [Running("wide", 8, priority=90), Running("other", 4, priority=80)]
    pending = [Request("r1", 4, priority=10, queued_at=1), Request("r2", 4, priority=10,
                                                                      queued_at=2)]
    assert decide(agents, pending, running).preemptions == ["wide"]
    # Counted by slots preempted in all, wide (8) costs more than other (4) at one level.
    running = [Running("wide", 8, priority=80), Running("other", 4, priority=80)]
    assert decide(agents, pending[:1], running).preemptions == ["other"]


def test_disabled_agent_drains_and_is_not_preempted_for() -> None:
    agents = [busy("off", 4, "low", 2, enabled=False)]
    running = [Running("low", 2, priority=99)]
    decision = decide(agents, [Request("r", 2, priority=1)], running)
    assert decision.assignments == [] and decision.preemptions == []


def test_a_request_that_can_never_run_preempts_nothing() -> None:
    agents = [busy("a", 4, "low", 4)]
    running = [Running("low", 4, priority=99)]
    decision = decide(agents, [Request("huge", 5, priority=1)], running)
    assert decision.preemptions == []


def test_the_same_snapshot_gives_the_same_decision() -> None:
    agents = [agent("a", 4, ["x", "x", "y", None]), agent("b", 4, ["z", None, None, None])]
    running = [Running("x", 2, priority=80), Running("y", 1, priority=70),
               Running("z", 1, priority=90)]
    pending = [Request(f"r{i}", 1 + i % 3, priority=10 * (i % 4) + 1, queued_at=i)
               for i in range(8)]
    first = decide(agents, pending, running)
    again = decide(agents[::-1], pending[::-1], running[::-1])
    assert first == again
