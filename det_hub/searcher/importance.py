"""Hyperparameter importance: how much of the variance of a search's metric each
hyperparameter explains, by optuna's fANOVA evaluator (a random forest from scikit-learn,
decomposed per parameter) over the search's trials.

What the experiment page and ``GET /api/v1/experiments/<id>/hyperparameter-importance`` show.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from det_hub.searcher.samplers.optuna_space import OptunaSpace, import_optuna

#: Trees of the evaluator's forest: optuna's default. 16 trials take ~0.1 s, 256 ~2 s.
TREES = 64


class ImportanceUnavailable(RuntimeError):
    """Importance needs a package that the master lacks."""


INSTALL = "pip install 'det_hub[importance]' (optuna and scikit-learn)"


def parameter_importance(space: Mapping[str, Any],
                         results: Sequence[tuple[Mapping[str, Any], float]],
                         smaller_is_better: bool) -> dict[str, float]:
    """Each non-constant hyperparameter's share of the metric's variance (dotted names, the
    shares summing to 1, largest first), from ``results``: ``(hyperparameters, metric)`` per
    trial. Results whose hyperparameters are not from ``space`` or whose metric is not finite
    are left out; ``{}`` unless two of those left differ in their metric and one
    hyperparameter varies among them.

    Raises:
        ImportanceUnavailable: optuna or scikit-learn is not installed.
    """
    optuna = import_optuna(ImportanceUnavailable(
        f"hyperparameter importance needs optuna on the master: {INSTALL}"))
    try:
        import sklearn  # noqa: F401  (what optuna's fANOVA evaluator fits its forest with)
    except ImportError:
        raise ImportanceUnavailable(
            f"hyperparameter importance needs scikit-learn on the master: {INSTALL}") from None
    dims = OptunaSpace(optuna, space)
    trials = []
    for hparams, metric in results:
        params = dims.params(hparams)
        if params is None or not math.isfinite(metric):
            continue
        trials.append(optuna.trial.create_trial(
            params=params, distributions=dims.distributions, value=float(metric)))
    varying = [name for name in dims.distributions
               if len({repr(t.params[name]) for t in trials}) > 1]
    # With one metric value for every trial there is no variance to share out (and optuna's
    # evaluator refuses to fit).
    if not varying or len({t.value for t in trials}) < 2:
        return {}
    study = optuna.create_study(direction="minimize" if smaller_is_better else "maximize")
    study.add_trials(trials)
    evaluator = optuna.importance.FanovaImportanceEvaluator(n_trees=TREES, seed=0)
    with warnings.catch_warnings():
        # Warnings of optuna's experimental features are not for the master's log.
        warnings.simplefilter("ignore")
        shares = optuna.importance.get_param_importances(
            study, evaluator=evaluator, params=varying, normalize=True)
    return {name: float(share) for name, share in shares.items()}
