"""Tasks and allocations: queries of the ``tasks``, ``task_contexts`` and ``allocations``
tables.

:class:`TaskQueries` is mixed into :class:`det_hub.store.Store`. A task (a notebook, shell,
command or TensorBoard) keeps its context archive in ``task_contexts``; an allocation is one
attempt at running a trial or a task.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL

from ._common import Queries, plain
from .columns import utcnow
from .models import Allocation, Task, TaskContext


class TaskQueries(Queries):
    """Queries of the ``allocations``, ``tasks`` and ``task_contexts`` tables (see
    :class:`Store`)."""

    # -- allocations ------------------------------------------------------------------------

    async def create_allocation(
        self,
        *,
        id: str,
        token_hash: str,
        slots: int,
        state: str,
        trial_id: int | None = None,
        task_id: int | None = None,
    ) -> Allocation:
        """Add an allocation (one attempt at running a trial, or a task).

        Raises:
            StoreConflict: the id or token hash is taken.
            NotFound: no such trial or task.
            ValueError: not exactly one of ``trial_id`` and ``task_id`` given.
        """
        if (trial_id is None) == (task_id is None):
            raise ValueError("an allocation belongs to a trial or a task: give exactly one")
        allocation = Allocation(
            id=id,
            trial_id=trial_id,
            task_id=task_id,
            token_hash=token_hash,
            state=plain(state),
            slots=slots,
            agent_id=None,
            slot_ids=None,
            pid=None,
            workdir=None,
            log_offset=0,
            preempt=False,
            created_at=utcnow(),
            started_at=None,
            ended_at=None,
            exit_code=None,
            exit_reason=None,
        )
        await self._write(lambda session: session.add(allocation))
        return allocation

    async def get_allocation(self, allocation_id: str) -> Allocation | None:
        """The allocation with this id."""
        async with self._reading() as session:
            return await session.get(Allocation, allocation_id)

    async def allocation_for_token(self, token_hash: str) -> Allocation | None:
        """The allocation whose token has this hash, ended or not."""
        stmt = select(Allocation).where(Allocation.token_hash == token_hash)
        async with self._reading() as session:
            return await session.scalar(stmt)

    async def update_allocation(self, allocation_id: str, **fields: Any) -> Allocation:
        """Set columns of an allocation.

        Raises:
            NotFound: no such allocation.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Allocation, allocation_id, fields)

    async def list_open_allocations(self) -> list[Allocation]:
        """Allocations that have not ended, oldest first."""
        stmt = (
            select(Allocation)
            .where(Allocation.ended_at.is_(None))
            .order_by(Allocation.created_at, Allocation.id)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    # -- tasks ------------------------------------------------------------------------------

    async def create_task(
        self,
        *,
        type: str,
        owner_id: int,
        state: str,
        config: dict[str, Any],
        context: bytes | None = None,
        description: str = "",
        resource_pool: str = DEFAULT_RESOURCE_POOL,
        priority: int = DEFAULT_PRIORITY,
        details: dict[str, Any] | None = None,
        secret: str | None = None,
    ) -> Task:
        """Add a task, with its context archive when given.

        Raises:
            NotFound: no such owner.
        """
        task = Task(
            type=plain(type),
            owner_id=owner_id,
            state=plain(state),
            description=description,
            config=config,
            resource_pool=resource_pool,
            priority=priority,
            queue_position=None,
            created_at=utcnow(),
            ended_at=None,
            exit_code=None,
            exit_reason=None,
            details=details,
            secret=secret,
            proxy_address=None,
        )
        def add(session: Session) -> None:
            session.add(task)
            session.flush()
            if context is not None:
                session.add(TaskContext(task_id=task.id, archive=context))

        await self._write(add)
        return task

    async def get_task(self, task_id: int) -> Task | None:
        """The task with this id (without its context archive)."""
        async with self._reading() as session:
            return await session.get(Task, task_id)

    async def list_tasks(
        self,
        *,
        type: str | None = None,
        states: list[str] | None = None,
        owner_id: int | None = None,
        limit: int | None = None,
    ) -> list[Task]:
        """Tasks matching every filter given, by id (oldest first); ``limit`` keeps the newest."""
        where: list[ColumnElement[bool]] = []
        if type is not None:
            where.append(Task.type == plain(type))
        if states is not None:
            where.append(Task.state.in_([plain(s) for s in states]))
        if owner_id is not None:
            where.append(Task.owner_id == owner_id)
        stmt = select(Task).where(*where).order_by(Task.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        async with self._reading() as session:
            return list(reversed(list(await session.scalars(stmt))))

    async def update_task(self, task_id: int, **fields: Any) -> Task:
        """Set columns of a task (``state``, ``exit_code``, ...).

        Raises:
            NotFound: no such task.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Task, task_id, fields)

    async def get_task_context(self, task_id: int) -> bytes | None:
        """The task's context archive, or ``None`` when it has none."""
        stmt = select(TaskContext.archive).where(TaskContext.task_id == task_id)
        async with self._reading() as session:
            return await session.scalar(stmt)


__all__ = ["TaskQueries"]
