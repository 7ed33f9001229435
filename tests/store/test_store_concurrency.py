"""Many writers at once, in one process and across processes, lose no rows."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter

from det_hub.store import Store, Trial, utcnow

WORKERS = 4
CALLS_PER_WORKER = 25
ROWS_PER_CALL = 20


async def test_concurrent_tasks_add_metrics(store: Store, trial: Trial) -> None:
    tasks, calls, rows = 16, 50, 20

    async def writer(task: int) -> int:
        added = 0
        for call in range(calls):
            batch = [
                {"steps_completed": call * rows + i, "metrics": {"task": task, "call": call}}
                for i in range(rows)
            ]
            added += await store.add_metrics(trial.id, "training", batch)
        return added

    results = await asyncio.gather(*(writer(t) for t in range(tasks)))
    assert results == [calls * rows] * tasks
    stored = await store.get_metrics(trial.id)
    assert len(stored) == tasks * calls * rows == 16_000
    per_task = Counter(m.metrics["task"] for m in stored)
    assert per_task == dict.fromkeys(range(tasks), calls * rows)
    assert len({m.id for m in stored}) == 16_000


async def _write_logs(url: str, trial_id: int, worker: int) -> None:
    store = await Store.open(url)
    try:
        for call in range(CALLS_PER_WORKER):
            await store.add_logs(
                [
                    {
                        "trial_id": trial_id,
                        "allocation_id": f"{trial_id}.{worker}",
                        "timestamp": utcnow(),
                        "rank": worker,
                        "stdtype": "stdout",
                        "message": f"w{worker} c{call} r{i}",
                    }
                    for i in range(ROWS_PER_CALL)
                ]
            )
    finally:
        await store.close()


def log_writer_process(url: str, trial_id: int, worker: int) -> None:
    """Entry point of a writer process (module level, so that 'spawn' can find it)."""
    asyncio.run(_write_logs(url, trial_id, worker))


async def test_processes_write_logs_concurrently(store: Store, trial: Trial) -> None:
    ctx = multiprocessing.get_context("spawn")
    processes = [
        ctx.Process(target=log_writer_process, args=(store.url, trial.id, w))
        for w in range(WORKERS)
    ]
    for p in processes:
        p.start()
    try:
        for p in processes:
            await asyncio.to_thread(p.join, 120)
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in processes] == [0] * WORKERS

    logs = []
    after = 0
    while batch := await store.get_logs(trial.id, after_id=after, limit=1000):
        logs.extend(batch)
        after = batch[-1].id
    total = WORKERS * CALLS_PER_WORKER * ROWS_PER_CALL
    assert len(logs) == total == 2000
    assert len({log.message for log in logs}) == total
    assert Counter(log.rank for log in logs) == dict.fromkeys(range(WORKERS), total // WORKERS)
    # Each process's lines stay in the order it wrote them.
    for w in range(WORKERS):
        mine = [log.message for log in logs if log.rank == w]
        assert mine == [
            f"w{w} c{c} r{i}" for c in range(CALLS_PER_WORKER) for i in range(ROWS_PER_CALL)
        ]


async def _open_and_add_user(url: str, worker: int) -> None:
    store = await Store.open(url)
    try:
        await store.create_user(f"user{worker}")
    finally:
        await store.close()


def first_open_process(url: str, worker: int) -> None:
    """Entry point of a process that opens (and so migrates) a store on a fresh database."""
    asyncio.run(_open_and_add_user(url, worker))


async def test_processes_migrate_a_fresh_database_at_once(db_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    processes = [ctx.Process(target=first_open_process, args=(db_url, w)) for w in range(3)]
    for p in processes:
        p.start()
    try:
        for p in processes:
            await asyncio.to_thread(p.join, 120)
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in processes] == [0, 0, 0]
    store = await Store.open(db_url)
    try:
        assert sorted(u.username for u in await store.list_users()) == ["user0", "user1", "user2"]
    finally:
        await store.close()
