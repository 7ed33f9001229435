"""Slot-hours per user, from the allocations of their trials and tasks, on both databases."""

from __future__ import annotations

import datetime as dt

import pytest

from det_hub.states import TaskState, TaskType
from det_hub.store import Store, Trial, User

NOW = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


async def test_slot_hours_add_up_ended_and_running_allocations_per_owner(
        store: Store, user: User, trial: Trial) -> None:
    bob = await store.create_user("bob")
    await store.create_user("carol")  # no work: not listed

    async def allocation(alloc_id: str, slots: int, started: dt.datetime | None,
                         ended: dt.datetime | None, **owner: int) -> None:
        await store.create_allocation(id=alloc_id, token_hash=alloc_id, slots=slots,
                                      state="RUNNING", **owner)
        await store.update_allocation(alloc_id, started_at=started, ended_at=ended)

    hour = dt.timedelta(hours=1)
    # alice's trial: 2 slots for 3 hours, ended; then 1 slot running for the last half hour.
    await allocation("t.0", 2, NOW - 5 * hour, NOW - 2 * hour, trial_id=trial.id)
    await allocation("t.1", 1, NOW - hour / 2, None, trial_id=trial.id)
    # Queued and never started: held nothing.
    await allocation("t.2", 8, None, None, trial_id=trial.id)
    task = await store.create_task(type=TaskType.NOTEBOOK, owner_id=bob.id,
                                   state=TaskState.TERMINATED, config={})
    # bob's notebook: 4 slots for 15 minutes.
    await allocation("task.0", 4, NOW - hour, NOW - hour * 3 / 4, task_id=task.id)

    usage = await store.slot_hours_by_user(NOW)
    assert usage == {"alice": pytest.approx(6.5), "bob": pytest.approx(1.0)}
    # Running allocations count up to the time given.
    later = await store.slot_hours_by_user(NOW + hour)
    assert later["alice"] == pytest.approx(7.5) and later["bob"] == pytest.approx(1.0)


async def test_no_allocations_no_usage(store: Store, user: User) -> None:
    assert await store.slot_hours_by_user(NOW) == {}
