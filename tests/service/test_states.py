"""The transition tables are the one place that says which state changes are legal."""

from __future__ import annotations

import pytest

from det_hub.states import (
    ALLOCATION_TRANSITIONS,
    EXPERIMENT_TRANSITIONS,
    TASK_TRANSITIONS,
    TRIAL_TRANSITIONS,
    AllocationState,
    ExperimentState,
    IllegalTransition,
    TaskState,
    TrialState,
    check_allocation_transition,
    check_experiment_transition,
    check_task_transition,
    check_trial_transition,
)


def test_a_terminal_state_leads_only_back_to_active() -> None:
    """The one way out of a finished state is `det-hub experiment continue`."""
    for table, active in ((EXPERIMENT_TRANSITIONS, ExperimentState.ACTIVE),
                          (TRIAL_TRANSITIONS, TrialState.ACTIVE)):
        for state, moves in table.items():
            if state.terminal:
                assert moves == frozenset({active}), state
            else:
                assert moves and all(m != state for m in moves), state


def test_every_state_reaches_a_terminal_state() -> None:
    for table in (EXPERIMENT_TRANSITIONS, TRIAL_TRANSITIONS):
        for start in table:
            seen, frontier = {start}, [start]
            while frontier:
                for nxt in table[frontier.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        frontier.append(nxt)
            assert any(s.terminal for s in seen), start


@pytest.mark.parametrize(("current", "target"), [
    (ExperimentState.COMPLETED, ExperimentState.PAUSED),
    (ExperimentState.CANCELED, ExperimentState.COMPLETED),
    (ExperimentState.PAUSED, ExperimentState.COMPLETED),
    (ExperimentState.STOPPING_CANCELED, ExperimentState.ACTIVE),
    (ExperimentState.STOPPING_ERROR, ExperimentState.CANCELED),
])
def test_illegal_experiment_moves_raise(current, target) -> None:
    with pytest.raises(IllegalTransition) as err:
        check_experiment_transition(current, target)
    assert str(err.value) == f"experiment cannot go from {current.value} to {target.value}"


def test_legal_moves_pass_and_staying_put_is_allowed() -> None:
    check_experiment_transition(ExperimentState.ACTIVE, ExperimentState.PAUSED)
    check_experiment_transition(ExperimentState.ERROR, ExperimentState.ERROR)
    check_trial_transition(TrialState.STOPPING_COMPLETED, TrialState.COMPLETED)
    check_trial_transition(TrialState.ERROR, TrialState.ACTIVE)
    with pytest.raises(IllegalTransition):
        check_trial_transition(TrialState.ERROR, TrialState.COMPLETED)


def test_task_states_run_forwards_only_and_end_in_terminated() -> None:
    """A command goes QUEUED -> (PULLING) -> STARTING -> RUNNING -> TERMINATING -> TERMINATED,
    may end from any state short of that, and never moves back."""
    order = list(TaskState)
    for state, moves in TASK_TRANSITIONS.items():
        assert all(order.index(m) > order.index(state) for m in moves), state
        if state.terminal:
            assert moves == frozenset()
        else:
            assert TaskState.TERMINATED in moves, state
    assert [s for s in TaskState if s.terminal] == [TaskState.TERMINATED]


@pytest.mark.parametrize(("current", "target"), [
    (TaskState.RUNNING, TaskState.STARTING),
    (TaskState.TERMINATED, TaskState.RUNNING),
    (TaskState.TERMINATING, TaskState.RUNNING),
    (TaskState.QUEUED, TaskState.RUNNING),
])
def test_illegal_task_moves_raise(current: TaskState, target: TaskState) -> None:
    with pytest.raises(IllegalTransition) as err:
        check_task_transition(current, target)
    assert str(err.value) == f"task cannot go from {current.value} to {target.value}"


def test_legal_task_moves_pass() -> None:
    for current, target in ((TaskState.QUEUED, TaskState.STARTING),
                            (TaskState.STARTING, TaskState.RUNNING),
                            (TaskState.RUNNING, TaskState.TERMINATING),
                            (TaskState.TERMINATING, TaskState.TERMINATED),
                            (TaskState.QUEUED, TaskState.TERMINATED),
                            (TaskState.QUEUED, TaskState.TERMINATING),
                            (TaskState.RUNNING, TaskState.RUNNING)):
        check_task_transition(current, target)


def test_allocations_run_forwards_only_and_end_in_terminated() -> None:
    """An allocation goes QUEUED -> STARTING -> RUNNING -> TERMINATED, may end from any state
    short of that, and never moves back: a new attempt is a new allocation."""
    order = list(AllocationState)
    assert [s.value for s in order] == ["QUEUED", "STARTING", "RUNNING", "TERMINATED"]
    for state, moves in ALLOCATION_TRANSITIONS.items():
        assert all(order.index(m) > order.index(state) for m in moves), state
        if state is AllocationState.TERMINATED:
            assert moves == frozenset()
        else:
            assert AllocationState.TERMINATED in moves, state
    for current, target in ((AllocationState.QUEUED, AllocationState.STARTING),
                            (AllocationState.STARTING, AllocationState.RUNNING),
                            (AllocationState.RUNNING, AllocationState.RUNNING)):
        check_allocation_transition(current, target)
    with pytest.raises(IllegalTransition) as err:
        check_allocation_transition(AllocationState.QUEUED, AllocationState.RUNNING)
    assert str(err.value) == "allocation cannot go from QUEUED to RUNNING"
