"""What a master's event loop is waiting on: for a master that is slow to stop.

A thread dump (``kill -USR1``) of a master that does not stop shows its main thread idle in
the event loop's ``select``: the work it waits for is a coroutine suspended on a future, which
no thread's stack shows. :func:`describe_tasks` walks each unfinished task's chain of awaits
down to where it is suspended.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any


def await_chain(coro: Any) -> list[str]:
    """Where ``coro`` is suspended: each coroutine (or generator) it awaits, outermost first,
    as ``name (file:line)``."""
    chain: list[str] = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        name = os.path.basename(frame.f_code.co_filename)
        chain.append(f"{frame.f_code.co_name} ({name}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


def describe_tasks(loop: asyncio.AbstractEventLoop | None = None) -> list[str]:
    """One line per unfinished task of ``loop`` (the running one by default), but the task
    asking: its name and its chain of awaits."""
    current = asyncio.current_task(loop)
    lines = []
    for task in asyncio.all_tasks(loop):
        if task is current or task.done():
            continue
        chain = await_chain(task.get_coro())
        lines.append(f"{task.get_name()}: {' -> '.join(chain) or '(no coroutine frame)'}")
    return sorted(lines)


def log_tasks(log: logging.Logger | logging.LoggerAdapter[Any], what: str) -> None:
    """Log, as a warning, that ``what`` is still going on and every task it may wait for."""
    lines = describe_tasks()
    log.warning("%s; its event loop waits in %d tasks:\n%s", what, len(lines),
                "\n".join(f"  {line}" for line in lines) or "  (none)")
