"""What a master's event loop waits on, for a master slow to stop (det_hub.service.pending)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from det_hub.service.pending import describe_tasks, log_tasks


async def _inner(event: asyncio.Event) -> None:
    await event.wait()


async def _outer(event: asyncio.Event) -> None:
    await _inner(event)


async def test_each_waiting_task_is_named_with_its_chain_of_awaits(
        caplog: pytest.LogCaptureFixture) -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(_outer(event), name="waiter")
    finished = asyncio.create_task(asyncio.sleep(0), name="finished")
    await asyncio.sleep(0.01)
    lines = describe_tasks()
    [line] = [x for x in lines if x.startswith("waiter:")]
    # Outermost first, down to where it is suspended, each with its file and line.
    assert line.startswith("waiter: _outer (test_pending_tasks.py:")
    assert "-> _inner (test_pending_tasks.py:" in line
    assert line.index("_outer") < line.index("_inner") < line.index("wait (locks.py:")
    assert not any(x.startswith("finished:") for x in lines)  # done tasks are left out
    assert finished.done()
    log = logging.getLogger("det_hub.test_pending")
    with caplog.at_level(logging.WARNING, logger="det_hub.test_pending"):
        log_tasks(log, "still stopping after 15 s")
    [record] = caplog.records
    assert record.getMessage().startswith("still stopping after 15 s; its event loop waits in")
    assert "  waiter: _outer" in record.getMessage()
    event.set()
    await waiting
    assert not any(x.startswith("waiter:") for x in describe_tasks())
