"""Checkpoints: queries of the ``checkpoints`` table.

:class:`CheckpointQueries` is mixed into :class:`det_hub.store.Store`. What the model registry
does with checkpoints (protecting registered ones, claiming others for deletion) is in
:mod:`.registry`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import ColumnElement, select

from ._common import Queries, plain
from .columns import utcnow
from .models import Checkpoint


class CheckpointQueries(Queries):
    """Queries of the ``checkpoints`` table (see :class:`Store`)."""

    async def add_checkpoint(
        self,
        *,
        uuid: str,
        trial_id: int,
        experiment_id: int,
        allocation_id: str | None,
        state: str,
        steps_completed: int,
        resources: dict[str, int],
        metadata: dict[str, Any],
        storage: dict[str, Any],
        report_time: dt.datetime | None = None,
    ) -> Checkpoint:
        """Record a checkpoint; its size is the sum of its resources' sizes.

        Raises:
            StoreConflict: the uuid is taken.
            NotFound: no such trial or experiment.
        """
        checkpoint = Checkpoint(
            uuid=uuid,
            trial_id=trial_id,
            experiment_id=experiment_id,
            allocation_id=allocation_id,
            state=plain(state),
            steps_completed=steps_completed,
            report_time=plain(report_time or utcnow()),
            resources=resources,
            meta=metadata,
            size=sum(int(v) for v in resources.values()),
            storage=storage,
        )
        await self._write(lambda session: session.add(checkpoint))
        return checkpoint

    async def get_checkpoint(self, uuid: str) -> Checkpoint | None:
        """The checkpoint with this uuid."""
        async with self._reading() as session:
            return await session.get(Checkpoint, uuid)

    async def list_checkpoints(
        self,
        *,
        experiment_id: int | None = None,
        trial_id: int | None = None,
        states: list[str] | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints matching every filter given, newest first."""
        where: list[ColumnElement[bool]] = []
        if experiment_id is not None:
            where.append(Checkpoint.experiment_id == experiment_id)
        if trial_id is not None:
            where.append(Checkpoint.trial_id == trial_id)
        if states is not None:
            where.append(Checkpoint.state.in_([plain(s) for s in states]))
        stmt = (
            select(Checkpoint)
            .where(*where)
            .order_by(
                Checkpoint.report_time.desc(), Checkpoint.steps_completed.desc(), Checkpoint.uuid
            )
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_checkpoint(self, uuid: str, **fields: Any) -> Checkpoint:
        """Set columns of a checkpoint (``state``, ``meta``, ...).

        Raises:
            NotFound: no such checkpoint.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(Checkpoint, uuid, fields)


__all__ = ["CheckpointQueries"]
