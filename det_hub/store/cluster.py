"""The cluster: which agents an admin enabled or disabled (the ``agent_settings`` table), and
how many slot-hours each user's allocations held (``allocations`` joined to ``trials``,
``experiments``, ``tasks`` and ``users``).

:class:`ClusterQueries` is mixed into :class:`det_hub.store.Store`.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from ._common import Queries, plain
from .columns import utcnow
from .models import AgentSetting, Allocation, Experiment, Task, Trial, User


class ClusterQueries(Queries):
    """Queries of the ``agent_settings`` table, and of the slot-hours allocations held (see
    :class:`Store`)."""

    # -- agents -----------------------------------------------------------------------------

    async def agent_settings(self) -> dict[str, bool]:
        """Whether each agent an admin has enabled or disabled is enabled, by agent id."""
        async with self._reading() as session:
            return {row.id: row.enabled for row in await session.scalars(select(AgentSetting))}

    async def set_agent_enabled(self, agent_id: str, enabled: bool) -> None:
        """Remember that an admin enabled or disabled an agent."""
        def remember(session: Session) -> None:
            row = session.get(AgentSetting, agent_id)
            if row is None:
                session.add(AgentSetting(id=agent_id, enabled=enabled, updated_at=utcnow()))
            else:
                row.enabled, row.updated_at = enabled, utcnow()

        await self._write(remember)

    # -- usage ------------------------------------------------------------------------------

    async def slot_hours_by_user(self, now: dt.datetime) -> dict[str, float]:
        """How many slot-hours each user's trials and tasks have held: the sum, over every
        allocation that started, of ``slots × ((ended_at, or now while it runs) − started_at)``.

        Args:
            now: where allocations still running are counted up to.

        Returns:
            ``{username: slot-hours}`` for the users with any usage.
        """
        columns = (User.username, Allocation.slots, Allocation.started_at, Allocation.ended_at)
        of_trials = (
            select(*columns)
            .select_from(Allocation)
            .join(Trial, Allocation.trial_id == Trial.id)
            .join(Experiment, Trial.experiment_id == Experiment.id)
            .join(User, Experiment.owner_id == User.id)
        )
        of_tasks = (
            select(*columns)
            .select_from(Allocation)
            .join(Task, Allocation.task_id == Task.id)
            .join(User, Task.owner_id == User.id)
        )
        now = plain(now)
        hours: dict[str, float] = {}
        # Summed here rather than in SQL: SQLite and PostgreSQL subtract timestamps in ways
        # that have no common expression.
        async with self._reading() as session:
            for stmt in (of_trials, of_tasks):
                for username, slots, started, ended in await session.execute(stmt):
                    if started is None:  # never started: it held nothing
                        continue
                    held = max(((ended or now) - started).total_seconds(), 0.0)
                    hours[username] = hours.get(username, 0.0) + slots * held / 3600.0
        return hours


__all__ = ["ClusterQueries"]
