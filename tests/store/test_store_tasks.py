"""Tasks (commands): their rows, contexts, allocations and logs, on both databases."""

from __future__ import annotations

import pytest

from det_hub.states import TaskState, TaskType
from det_hub.store import NotFound, Store, Trial, User


async def _command(store: Store, user: User, **kw: object) -> object:
    fields: dict[str, object] = {
        "type": TaskType.COMMAND, "owner_id": user.id, "state": TaskState.QUEUED,
        "config": {"entrypoint": ["echo", "hi"], "resources": {"slots": 1}},
        "description": "Command (echo hi)", "resource_pool": "default", "priority": 30,
    }
    fields.update(kw)
    return await store.create_task(**fields)  # type: ignore[arg-type]


async def test_a_task_is_stored_with_its_context_and_updated(store: Store, user: User) -> None:
    task = await _command(store, user, context=b"\x1f\x8bcontext")
    got = await store.get_task(task.id)  # type: ignore[attr-defined]
    assert got is not None
    assert (got.type, got.state, got.priority, got.resource_pool) == (
        "COMMAND", "QUEUED", 30, "default")
    assert got.config["entrypoint"] == ["echo", "hi"]
    assert got.ended_at is None and got.exit_code is None
    assert await store.get_task_context(got.id) == b"\x1f\x8bcontext"
    done = await store.update_task(got.id, state=TaskState.TERMINATED, exit_code=3,
                                   exit_reason="exited with code 3")
    assert (done.state, done.exit_code) == ("TERMINATED", 3)
    without = await _command(store, user)
    assert await store.get_task_context(without.id) is None  # type: ignore[attr-defined]
    with pytest.raises(NotFound):
        await store.update_task(9999, state="RUNNING")


async def test_tasks_are_listed_by_state_owner_and_type(store: Store, user: User) -> None:
    bob = await store.create_user("bob")
    a = await _command(store, user)
    b = await _command(store, bob, state=TaskState.RUNNING)
    c = await _command(store, user, state=TaskState.TERMINATED)
    ids = lambda rows: [r.id for r in rows]  # noqa: E731
    assert ids(await store.list_tasks()) == [a.id, b.id, c.id]  # type: ignore[attr-defined]
    assert ids(await store.list_tasks(states=["QUEUED", "RUNNING"])) == [a.id, b.id]  # type: ignore[attr-defined]
    assert ids(await store.list_tasks(owner_id=bob.id)) == [b.id]  # type: ignore[attr-defined]
    assert ids(await store.list_tasks(type="COMMAND", limit=2)) == [b.id, c.id]  # type: ignore[attr-defined]
    assert await store.list_tasks(states=[]) == []


async def test_allocations_and_logs_belong_to_a_trial_or_a_task(
        store: Store, user: User, trial: Trial) -> None:
    task = await _command(store, user)
    tid = task.id  # type: ignore[attr-defined]
    alloc = await store.create_allocation(id=f"task-{tid}.0", task_id=tid, token_hash="h1",
                                          slots=1, state="QUEUED")
    assert (alloc.trial_id, alloc.task_id) == (None, tid)
    assert [a.id for a in await store.list_open_allocations()] == [f"task-{tid}.0"]
    with pytest.raises(ValueError):
        await store.create_allocation(id="x", token_hash="h2", slots=1, state="QUEUED")
    with pytest.raises(ValueError):
        await store.create_allocation(id="y", trial_id=trial.id, task_id=tid, token_hash="h3",
                                      slots=1, state="QUEUED")
    await store.add_logs([
        {"task_id": tid, "allocation_id": alloc.id, "stdtype": "stdout", "message": "one"},
        {"trial_id": trial.id, "stdtype": "stdout", "message": "trial line"},
        {"task_id": tid, "allocation_id": alloc.id, "stdtype": "stderr", "message": "two"},
    ])
    lines = await store.get_task_logs(tid)
    assert [(line.message, line.trial_id) for line in lines] == [("one", None), ("two", None)]
    assert [line.message for line in await store.get_task_logs(tid, after_id=lines[0].id)] \
        == ["two"]
    assert [line.message for line in await store.get_logs(trial.id)] == ["trial line"]
