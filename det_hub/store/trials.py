"""Trials: queries of the ``trials`` table, and the experiments' trial summaries.

:class:`TrialQueries` is mixed into :class:`det_hub.store.Store`. Adding a trial, or changing
what an experiment's summary shows of it, tells the store's ``experiment_listeners``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import func, select

from ._common import Queries, plain
from .columns import utcnow
from .models import Trial

#: Trial columns that change what an experiment's summary shows (its best searcher metric):
#: setting one tells the store's experiment listeners.
SUMMARY_TRIAL_FIELDS = frozenset({"searcher_metric_value", "state", "run_state"})


class TrialSummary(NamedTuple):
    """An experiment's trials in brief: how many, and the lowest and highest searcher-metric
    value any of them reported (None before any did)."""

    trials: int
    lowest: float | None
    highest: float | None


class TrialQueries(Queries):
    """Queries of the ``trials`` table (see :class:`Store`)."""

    async def create_trial(
        self, *, experiment_id: int, request_id: str, hparams: dict[str, Any], seed: int,
        state: str, run_state: str | None = None, run_id: int = 0
    ) -> Trial:
        """Add a trial to an experiment (``run_id``: 1 when its first run starts with it).

        Raises:
            NotFound: no such experiment.
        """
        trial = Trial(
            experiment_id=experiment_id,
            request_id=request_id,
            state=plain(state),
            run_state=run_state,
            run_id=run_id,
            hparams=hparams,
            seed=seed,
            restarts=0,
            created_at=utcnow(),
            ended_at=None,
            steps_completed=0,
            progress=None,
            latest_checkpoint=None,
            best_validation=None,
            latest_validation=None,
            searcher_metric_value=None,
            runner_state=None,
        )
        await self._write(lambda session: session.add(trial))
        self._experiment_changed(experiment_id)
        return trial

    async def get_trial(self, trial_id: int) -> Trial | None:
        """The trial with this id."""
        async with self._reading() as session:
            return await session.get(Trial, trial_id)

    async def list_trials(self, experiment_id: int) -> list[Trial]:
        """An experiment's trials, by id."""
        stmt = select(Trial).where(Trial.experiment_id == experiment_id).order_by(Trial.id)
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_trial(self, trial_id: int, **fields: Any) -> Trial:
        """Set columns of a trial.

        Raises:
            NotFound: no such trial.
            ValueError: a name that is not a column, or the primary key.
        """
        trial = await self._update(Trial, trial_id, fields)
        if SUMMARY_TRIAL_FIELDS.intersection(fields):
            self._experiment_changed(trial.experiment_id)
        return trial

    async def count_trials(self, experiment_ids: list[int]) -> dict[int, int]:
        """How many trials each experiment has (0 for ids without any)."""
        summaries = await self.trial_summaries(experiment_ids)
        return {i: summary.trials for i, summary in summaries.items()}

    async def trial_summaries(self, experiment_ids: list[int]) -> dict[int, TrialSummary]:
        """Each experiment's :class:`TrialSummary` (no trials: ``(0, None, None)``), in one
        query."""
        summaries = {i: TrialSummary(0, None, None) for i in experiment_ids}
        if not experiment_ids:
            return summaries
        stmt = (
            select(
                Trial.experiment_id,
                func.count(),
                func.min(Trial.searcher_metric_value),
                func.max(Trial.searcher_metric_value),
            )
            .where(Trial.experiment_id.in_(experiment_ids))
            .group_by(Trial.experiment_id)
        )
        async with self._reading() as session:
            for experiment_id, count, lowest, highest in await session.execute(stmt):
                summaries[experiment_id] = TrialSummary(
                    int(count),
                    None if lowest is None else float(lowest),
                    None if highest is None else float(highest),
                )
        return summaries


__all__ = ["TrialQueries", "TrialSummary"]
