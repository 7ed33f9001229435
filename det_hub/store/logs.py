"""Log lines of trials and tasks: queries of the ``task_logs`` table.

:class:`LogQueries` is mixed into :class:`det_hub.store.Store`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select

from ._common import Queries, plain
from .columns import utcnow
from .models import TaskLog


class LogQueries(Queries):
    """Queries of the ``task_logs`` table (see :class:`Store`)."""

    async def add_logs(self, rows: list[dict[str, Any]]) -> int:
        """Add log lines in one statement.

        Args:
            rows: ``{"trial_id" or "task_id", "allocation_id", "timestamp", "rank", "stdtype",
                "message"}``; ``timestamp`` defaults to now, the others to ``None``.

        Returns:
            The number of lines added.
        """
        if not rows:
            return 0
        now = utcnow()
        params = [
            {
                "trial_id": row.get("trial_id"),
                "task_id": row.get("task_id"),
                "allocation_id": row.get("allocation_id"),
                "timestamp": plain(row.get("timestamp") or now),
                "rank": row.get("rank"),
                "stdtype": row["stdtype"],
                "message": row["message"],
            }
            for row in rows
        ]
        # Into the table itself: the ORM's bulk insert of the same rows costs twice the time.
        table: Any = TaskLog.__table__  # a Table; typed as any FromClause
        await self._write(lambda session: session.execute(insert(table), params))
        return len(params)

    async def get_logs(
        self, trial_id: int, *, after_id: int = 0, limit: int = 1000
    ) -> list[TaskLog]:
        """A trial's log lines with id greater than ``after_id``, ascending, at most ``limit``."""
        stmt = (
            select(TaskLog)
            .where(TaskLog.trial_id == trial_id, TaskLog.id > after_id)
            .order_by(TaskLog.id)
            .limit(limit)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def get_task_logs(
        self, task_id: int, *, after_id: int = 0, limit: int = 1000
    ) -> list[TaskLog]:
        """A task's log lines with id greater than ``after_id``, ascending, at most ``limit``."""
        stmt = (
            select(TaskLog)
            .where(TaskLog.task_id == task_id, TaskLog.id > after_id)
            .order_by(TaskLog.id)
            .limit(limit)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))


__all__ = ["LogQueries"]
