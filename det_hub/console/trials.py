"""An experiment's trials as the CLI's ``describe`` and the notebook's views show them."""

from __future__ import annotations

from typing import Any

from det_hub.client import Experiment, Trial
from det_hub.console import render as r


def trial_rows(trials: list[Trial]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of a trials table (shared by ``describe`` and ``list-trials``)."""
    headers = ["ID", "State", "Run state", "Steps", "Progress", "Restarts", "Metric", "Hyperparameters", "Checkpoint"]
    rows = [
        [
            t.id, t.state, r.or_none(t.run_state), t.steps_completed, r.fmt_percent(t.progress),
            t.restarts, r.fmt_value(t.searcher_metric_value), r.fmt_mapping(t.hparams),
            t.latest_checkpoint or r.NONE,
        ]
        for t in sorted(trials, key=lambda t: t.id)
    ]
    return headers, rows


def best_trial(experiment: Experiment, trials: list[Trial]) -> Trial | None:
    """The trial with the best searcher metric, honouring ``smaller_is_better``."""
    scored = [t for t in trials if t.searcher_metric_value is not None]
    if not scored:
        return None
    pick = min if experiment.smaller_is_better else max
    return pick(scored, key=lambda t: float(t.searcher_metric_value or 0.0))


__all__ = ["best_trial", "trial_rows"]
