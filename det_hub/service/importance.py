"""Hyperparameter importance of experiments, as the experiment page and
``GET /api/v1/experiments/<id>/hyperparameter-importance`` show it: optuna's fANOVA
(:mod:`det_hub.searcher.importance`) over each trial's best searcher metric, computed in a
thread so that the master's loop goes on, and kept until a trial's metric changes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from det_hub.searcher.importance import ImportanceUnavailable, parameter_importance
from det_hub.service.errors import Unavailable

if TYPE_CHECKING:
    from det_hub.service.experiments import ExperimentManager

#: Experiments whose importance is kept computed, the most recently asked for.
KEPT = 64


class HyperparameterImportance:
    """Each experiment's hyperparameter importance, computed when first asked for and again
    when a trial's metric has changed since."""

    def __init__(self, experiments: ExperimentManager) -> None:
        self.experiments = experiments
        #: By experiment: the trials' (id, metric) it was computed from, and the shares.
        self._kept: dict[int, tuple[tuple[Any, ...], dict[str, float]]] = {}

    async def of(self, experiment_id: int) -> dict[str, Any]:
        """``{"metric", "trials", "importance": [{"name", "importance"}]}``: each
        hyperparameter's share of the variance of the searcher metric, largest first, over
        the ``trials`` that have a metric.

        Raises:
            NotFound: no such experiment.
            Unavailable: optuna or scikit-learn is not installed on the master.
        """
        row = await self.experiments.get(experiment_id)
        trials = await self.experiments.trials(experiment_id)
        searcher = row.config["searcher"]
        results = [(t.hparams or {}, t.searcher_metric_value) for t in trials
                   if t.searcher_metric_value is not None]
        key = tuple((t.id, t.searcher_metric_value) for t in trials)
        kept = self._kept.pop(experiment_id, None)
        if kept is None or kept[0] != key:
            try:
                shares = await asyncio.to_thread(
                    parameter_importance, row.config.get("hyperparameters") or {}, results,
                    bool(searcher.get("smaller_is_better", True)))
            except ImportanceUnavailable as e:
                raise Unavailable(str(e)) from None
            kept = (key, shares)
        # Re-inserted: the least recently asked for is the first to go.
        self._kept[experiment_id] = kept
        while len(self._kept) > KEPT:
            del self._kept[next(iter(self._kept))]
        return {"metric": searcher["metric"], "trials": len(results),
                "importance": [{"name": name, "importance": share}
                               for name, share in kept[1].items()]}
