"""Building a policy from a pool's scheduler settings, and what the snapshot types accept."""

from __future__ import annotations

import pytest

from det_hub.scheduler import (
    Agent,
    FairShareScheduler,
    PriorityScheduler,
    Request,
    Running,
    Slot,
    build_scheduler,
)


def test_defaults() -> None:
    for settings in (None, {}):
        policy = build_scheduler(settings)
        assert isinstance(policy, PriorityScheduler)
        assert (policy.preemption, policy.fitting_policy) == (False, "best")
    fair = build_scheduler({"type": "fair_share"})
    assert isinstance(fair, FairShareScheduler)
    # Fair share preempts unless told not to: without it a newcomer never gets its share.
    assert (fair.preemption, fair.fitting_policy) == (True, "best")


def test_every_setting_is_passed_on() -> None:
    policy = build_scheduler({"type": "priority", "preemption": True, "fitting_policy": "worst"})
    assert isinstance(policy, PriorityScheduler)
    assert (policy.preemption, policy.fitting_policy) == (True, "worst")
    policy = build_scheduler({"type": "fair_share", "preemption": False})
    assert isinstance(policy, FairShareScheduler) and policy.preemption is False
    assert repr(policy) == "FairShareScheduler(preemption=False, fitting_policy='best')"


@pytest.mark.parametrize(("settings", "message"), [
    ({"fitting_policy": "tight"},
     "scheduler.fitting_policy: must be one of best, worst; got 'tight'"),
    ({"type": "round_robin"},
     "scheduler.type: must be one of priority, fair_share; got 'round_robin'"),
    ({"type": ["priority"]},
     "scheduler.type: must be one of priority, fair_share; got ['priority']"),
    ({"preemption": "yes"}, "scheduler.preemption: must be true or false; got 'yes'"),
    ({"preemption": 1}, "scheduler.preemption: must be true or false; got 1"),
    ({"preemtion": True}, "scheduler.preemtion: unknown key (did you mean preemption?); "
                          "allowed keys are fitting_policy, preemption, type"),
    ({"default_priority": 42},
     "scheduler.default_priority: unknown key; allowed keys are fitting_policy, preemption, "
     "type"),
])
def test_bad_settings_name_the_key_and_what_is_allowed(settings, message) -> None:
    with pytest.raises(ValueError) as e:
        build_scheduler(settings)
    assert str(e.value) == message


def test_policies_check_their_fitting_policy() -> None:
    for policy in (PriorityScheduler, FairShareScheduler):
        with pytest.raises(ValueError, match="scheduler.fitting_policy: must be one of best"):
            policy(fitting_policy="first")


def test_snapshot_types() -> None:
    assert Slot(0).free and not Slot(1, "cuda", "x").free
    a = Agent("a", (Slot(0), Slot(1, "cuda", "x"), Slot(2)))
    assert [s.id for s in a.free_slots()] == [0, 2]
    assert Agent("a", a.slots, enabled=False).free_slots() == []
    r = Request("r", 2)
    assert (r.priority, r.position, r.queued_at, r.group, r.weight, r.preemptible) == \
        (42, 0.0, 0.0, "", 1.0, True)
    assert Running("x", 1).preempting is False
    with pytest.raises(ValueError, match="r: slots must be >= 0; got -1"):
        Request("r", -1)
    with pytest.raises(ValueError, match="x: weight must be > 0; got 0"):
        Running("x", 1, weight=0)
