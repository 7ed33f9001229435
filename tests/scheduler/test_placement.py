"""Where requests go, under both policies: fitting policy, gangs, multi-host splits, disabled
agents, requests that can never run."""

from __future__ import annotations

import pytest
from scheduler_checks import agent, busy, check_decision

from det_hub.scheduler import (
    Agent,
    Assignment,
    FairShareScheduler,
    Placement,
    PriorityScheduler,
    Request,
    Scheduler,
    Slot,
)

POLICIES = {
    "priority": lambda fit: PriorityScheduler(fitting_policy=fit),
    "priority+preemption": lambda fit: PriorityScheduler(preemption=True, fitting_policy=fit),
    "fair_share": lambda fit: FairShareScheduler(fitting_policy=fit),
}


@pytest.fixture(params=list(POLICIES))
def make(request):
    return POLICIES[request.param]


def placed(policy: Scheduler, agents: list[Agent], pending: list[Request]) -> dict[str, list]:
    decision = policy.schedule(agents, pending)
    check_decision(agents, pending, [], decision)
    return {a.allocation_id: [(p.agent_id, p.slot_ids) for p in a.placements]
            for a in decision.assignments}


def test_best_fit_takes_the_tightest_hole_and_keeps_the_big_one(make) -> None:
    agents = [agent("big", 4), busy("small", 2, "x", 1), busy("mid", 4, "x", 1)]
    got = placed(make("best"), agents, [Request("one", 1, queued_at=0),
                                        Request("four", 4, queued_at=1)])
    assert got == {"one": [("small", (1,))], "four": [("big", (0, 1, 2, 3))]}


def test_worst_fit_spreads_load_over_the_emptiest_agents(make) -> None:
    agents = [busy("a", 4, "x", 1), agent("b", 4), busy("c", 2, "x", 1)]
    got = placed(make("worst"), agents, [Request(f"r{i}", 1, queued_at=i) for i in range(3)])
    # b (4 free), then a and b tie at 3 (a first by id), then b with 3 free.
    assert got == {"r0": [("b", (0,))], "r1": [("a", (1,))], "r2": [("b", (1,))]}


def test_ties_go_to_the_smaller_agent_id(make) -> None:
    agents = [agent("b", 2), agent("a", 2), agent("c", 2)]
    for fit in ("best", "worst"):
        assert placed(make(fit), agents, [Request("r", 2)]) == {"r": [("a", (0, 1))]}


def test_slots_come_in_slot_order_and_skip_busy_ones(make) -> None:
    a = Agent("a", (Slot(3), Slot(7, "cpu", "x"), Slot(1), Slot(5)))
    assert placed(make("best"), [a], [Request("r", 2)]) == {"r": [("a", (3, 1))]}


def test_a_gang_gets_all_its_slots_at_once_or_nothing(make) -> None:
    agents = [busy("a", 4, "x", 2), busy("b", 4, "x", 2)]
    assert placed(make("best"), agents, [Request("three", 3)]) == {}


def test_a_request_bigger_than_any_agent_is_split_equally_over_the_fewest_agents(make) -> None:
    agents = [agent(f"a{i}", 4) for i in range(4)]
    got = placed(make("best"), agents, [Request("eight", 8)])
    assert got == {"eight": [("a0", (0, 1, 2, 3)), ("a1", (0, 1, 2, 3))]}
    # 6 over agents of 4: two parts of 3, not 4 + 2.
    got = placed(make("best"), agents, [Request("six", 6)])
    assert got == {"six": [("a0", (0, 1, 2)), ("a1", (0, 1, 2))]}


def test_a_split_takes_more_agents_when_the_fewest_are_not_free(make) -> None:
    # 12 slots, agents of 8: two parts of 6 need two agents with 6 free; only one has, so
    # three parts of 4; the busiest agents that fit go first under best fit.
    agents = [agent("a", 8), busy("b", 8, "x", 3), busy("c", 8, "x", 4), busy("d", 8, "x", 3)]
    got = placed(make("best"), agents, [Request("twelve", 12)])
    assert got == {"twelve": [("c", (4, 5, 6, 7)), ("b", (3, 4, 5, 6)), ("d", (3, 4, 5, 6))]}
    got = placed(make("worst"), agents, [Request("twelve", 12)])
    assert got == {"twelve": [("a", (0, 1, 2, 3)), ("b", (3, 4, 5, 6)), ("d", (3, 4, 5, 6))]}


def test_a_request_that_fits_one_agent_is_never_split(make) -> None:
    agents = [busy("a", 8, "x", 4), busy("b", 8, "x", 4)]
    assert placed(make("best"), agents, [Request("eight", 8)]) == {}


def test_a_request_that_can_never_run_is_left_waiting_and_blocks_nothing(make) -> None:
    agents = [agent("a", 4), agent("b", 4), agent("c", 4)]
    # 10 slots: parts of 5 are too big for these agents, ten parts of 1 need ten agents.
    got = placed(make("best"), agents, [Request("ten", 10, priority=1), Request("one", 1)])
    assert got == {"one": [("a", (0,))]}


def test_disabled_agents_get_nothing_and_do_not_count_for_splits(make) -> None:
    agents = [agent("off", 8, enabled=False), agent("on", 4), agent("on2", 4)]
    got = placed(make("best"), agents, [Request("eight", 8), Request("one", 1)])
    # The biggest enabled agent has 4 slots, so 8 is split over the two enabled ones.
    assert got == {"eight": [("on", (0, 1, 2, 3)), ("on2", (0, 1, 2, 3))]}


def test_a_request_for_no_slots_still_needs_an_enabled_agent(make) -> None:
    agents = [agent("off", 2, enabled=False), busy("full", 2, "x", 2), agent("idle", 2)]
    got = placed(make("best"), agents, [Request("tensorboard", 0)])
    assert got == {"tensorboard": [("full", ())]}  # best fit: the fullest agent
    assert placed(make("best"), [agent("off", 2, enabled=False)], [Request("t", 0)]) == {}


def test_assignment_slots_adds_up_its_placements() -> None:
    a = Assignment("r", (Placement("a", (0, 1)), Placement("b", (2, 3))))
    assert a.slots == 4
