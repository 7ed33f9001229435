"""Trial source infos: which trials used which checkpoint or model version, and what they
reported.

:class:`TrialSourceQueries` is mixed into :class:`det_hub.store.Store`, as the model
registry's queries are. A batch-inference trial links itself to the checkpoint (or model
version) it evaluates; the metrics it reports are then read back from that checkpoint or
version (Determined's ``Checkpoint.get_metrics`` and ``ModelVersion.get_metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from ._common import Queries
from .columns import utcnow
from .errors import NotFound, StoreConflict
from .models import Checkpoint, ModelVersion, Trial, TrialSourceInfo
from .packing import MetricRow


class TrialSourceQueries(Queries):
    """Queries of the ``trial_source_infos`` table (see :class:`Store`)."""

    if TYPE_CHECKING:
        async def get_metrics(self, trial_id: int, *,
                              group: str | None = None) -> list[MetricRow]: ...

    async def add_trial_source(
        self,
        *,
        trial_id: int,
        checkpoint_uuid: str,
        model_version_id: int | None = None,
    ) -> TrialSourceInfo:
        """Link a trial to a checkpoint it used, and to the model version naming that
        checkpoint when ``model_version_id`` is given (the plain link to the checkpoint is
        added too, so that it outlives the version). Adding a link that exists already
        changes nothing: its row is answered as it is.

        The trial's row is locked first, so that two reports of the same link never add
        two rows.

        Raises:
            NotFound: no such trial, checkpoint or model version.
            StoreConflict: the model version names another checkpoint.
        """
        def add(session: Session) -> TrialSourceInfo:
            trial = session.scalar(
                select(Trial.id).where(Trial.id == trial_id).with_for_update())
            if trial is None:
                raise NotFound(f"trial {trial_id} does not exist")
            if session.get(Checkpoint, checkpoint_uuid) is None:
                raise NotFound(f"checkpoint {checkpoint_uuid} does not exist")
            wanted: list[int | None] = [None]
            if model_version_id is not None:
                version = session.get(ModelVersion, model_version_id)
                if version is None:
                    raise NotFound(f"model version {model_version_id} does not exist")
                if version.checkpoint_uuid != checkpoint_uuid:
                    raise StoreConflict(
                        f"model version {model_version_id} names checkpoint "
                        f"{version.checkpoint_uuid}, not {checkpoint_uuid}")
                wanted.append(model_version_id)
            link: TrialSourceInfo | None = None
            for version_id in wanted:
                same = (TrialSourceInfo.model_version_id.is_(None) if version_id is None
                        else TrialSourceInfo.model_version_id == version_id)
                link = session.scalar(select(TrialSourceInfo).where(
                    TrialSourceInfo.trial_id == trial_id,
                    TrialSourceInfo.checkpoint_uuid == checkpoint_uuid, same))
                if link is None:
                    link = TrialSourceInfo(trial_id=trial_id, checkpoint_uuid=checkpoint_uuid,
                                           model_version_id=version_id, created_at=utcnow())
                    session.add(link)
            assert link is not None
            return link

        return await self._write(add)

    async def list_trial_sources(self, trial_id: int) -> list[TrialSourceInfo]:
        """The links of one trial, oldest first."""
        stmt = (select(TrialSourceInfo).where(TrialSourceInfo.trial_id == trial_id)
                .order_by(TrialSourceInfo.id))
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def trials_using_checkpoint(self, checkpoint_uuid: str) -> list[int]:
        """The ids of the trials linked to this checkpoint (directly or through a model
        version), ascending."""
        stmt = (select(TrialSourceInfo.trial_id)
                .where(TrialSourceInfo.checkpoint_uuid == checkpoint_uuid)
                .distinct().order_by(TrialSourceInfo.trial_id))
        async with self._reading() as session:
            return [int(t) for t in await session.scalars(stmt)]

    async def trials_using_model_version(self, model_version_id: int) -> list[int]:
        """The ids of the trials linked to this model version (by the version's row id),
        ascending."""
        stmt = (select(TrialSourceInfo.trial_id)
                .where(TrialSourceInfo.model_version_id == model_version_id)
                .distinct().order_by(TrialSourceInfo.trial_id))
        async with self._reading() as session:
            return [int(t) for t in await session.scalars(stmt)]

    async def metrics_of_trials(self, trial_ids: Iterable[int], *,
                                group: str | None = None) -> list[MetricRow]:
        """The metric rows of these trials (of one group, or all), trial by trial in the
        order given, each trial's ascending as :meth:`Store.get_metrics` answers them."""
        rows: list[MetricRow] = []
        for trial_id in trial_ids:
            rows.extend(await self.get_metrics(trial_id, group=group))
        return rows

    async def checkpoint_metrics(self, checkpoint_uuid: str, *,
                                 group: str | None = None) -> list[MetricRow]:
        """The metrics of every trial that reported using this checkpoint."""
        return await self.metrics_of_trials(
            await self.trials_using_checkpoint(checkpoint_uuid), group=group)

    async def model_version_metrics(self, model_version_id: int, *,
                                    group: str | None = None) -> list[MetricRow]:
        """The metrics of every trial that reported using this model version."""
        return await self.metrics_of_trials(
            await self.trials_using_model_version(model_version_id), group=group)


__all__ = ["TrialSourceQueries"]
