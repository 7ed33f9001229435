"""``tpe``: optuna's Tree-structured Parzen Estimator, used as a library inside the master.

Which results the model learns from, BOHB-style: every result is recorded with the length it
was reported at (for ASHA, each rung result; for random, each trial's final result). A new
sample is modelled on the results at a single length: the largest length that has at least
``dimensions + 1`` finite results, or else the length with the most results (the larger on a
tie). Longer training ranks configurations more reliably, so the longest length with enough
data wins.

Determinism: each draw builds a fresh ``optuna.samplers.TPESampler`` seeded from the search
method's ``rng`` and asks a study that holds exactly the recorded results at the chosen
length. A restored sampler replays its recorded history into fresh studies, so its next draws
are the ones an uninterrupted run would have made.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Mapping
from typing import Any

from det_hub.searcher.samplers._base import Sampler
from det_hub.searcher.samplers.optuna_space import OptunaSpace, import_optuna


class SamplerUnavailable(RuntimeError):
    """The sampler needs a package that is not installed."""


class TPESampler(Sampler):
    """Hyperparameters from optuna's TPE, fed the search's results.

    The space maps onto optuna distributions as :class:`OptunaSpace` says; const
    hyperparameters stay fixed.

    Raises:
        SamplerUnavailable: When optuna is not installed.
    """

    name = "tpe"

    def __init__(self, space: Mapping[str, Any], smaller_is_better: bool) -> None:
        super().__init__(space, smaller_is_better)
        self._optuna = import_optuna(SamplerUnavailable(
            "searcher.sampler: 'tpe' needs the optuna package on the master; install it with "
            "pip install 'det_hub[tpe]' (or pip install 'optuna>=3.4')"))
        try:
            self._space = OptunaSpace(self._optuna, space)
        except ValueError as e:
            raise ValueError(f"{e}; rename one to use the tpe sampler") from None
        self._distributions = self._space.distributions
        #: Every result told, in order: [flat params, length, metric].
        self._history: list[tuple[dict[str, Any], int, float]] = []
        #: How many results the history has at each length (what _budget weighs).
        self._counts: dict[int, int] = {}
        # Studies by length, built from the history on first use (not part of the state), and
        # for each the search space optuna infers from its trials, cached across draws.
        self._studies: dict[int, Any] = {}
        self._spaces: dict[int, Any] = {}

    # --- Sampler ------------------------------------------------------------------------
    def sample(self, rng: random.Random) -> dict[str, Any]:
        seed = rng.getrandbits(31)
        if not self._distributions:
            return self._space.hparams({})
        length = self._budget()
        study = self._study(length)
        optuna = self._optuna
        with warnings.catch_warnings():
            # multivariate TPE is marked experimental in some optuna versions.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, constant_liar=False
            )
            # A fresh sampler would work out the search space again from every trial of the
            # study, about half the cost of a draw with thousands of results; the study's own
            # IntersectionSearchSpace picks up where the last draw left off and gives the same
            # space (a private attribute of optuna's: when it is not there, nothing is cached).
            space = self._spaces.get(length)
            space_type = _intersection_type(optuna)
            if space_type is not None and isinstance(getattr(sampler, "_search_space", None),
                                                     space_type):
                if space is None:
                    space = self._spaces[length] = sampler._search_space
                sampler._search_space = space
            study.sampler = sampler
            trial = study.ask(self._distributions)
            # Ended as FAIL, which TPE ignores as it ignores a running trial (without
            # constant_liar), so a study rebuilt from the history (which has neither) samples
            # the same; a finished trial also lets the cached search space move past it.
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return self._space.hparams(trial.params)

    def tell(self, hparams: Mapping[str, Any], length: int, metric: float) -> None:
        if not math.isfinite(metric):
            return
        params = self._space.params(hparams)
        if params is None:
            return
        entry = (params, int(length), float(metric))
        self._history.append(entry)
        self._counts[entry[1]] = self._counts.get(entry[1], 0) + 1
        study = self._studies.get(entry[1])
        if study is not None:
            self._add(study, entry)

    def snapshot(self) -> dict[str, Any]:
        return {"history": [[params, length, metric] for params, length, metric in self._history]}

    def restore(self, state: Mapping[str, Any]) -> None:
        self._history = [
            (dict(params), int(length), float(metric))
            for params, length, metric in state.get("history", [])
        ]
        self._counts = {}
        for _, length, _ in self._history:
            self._counts[length] = self._counts.get(length, 0) + 1
        self._studies = {}
        self._spaces = {}

    # --- internals ----------------------------------------------------------------------
    def _budget(self) -> int:
        counts = self._counts
        if not counts:
            return -1
        enough = [length for length, n in counts.items() if n >= len(self._distributions) + 1]
        if enough:
            return max(enough)
        return max(counts, key=lambda length: (counts[length], length))

    def _study(self, length: int) -> Any:
        study = self._studies.get(length)
        if study is None:
            optuna = self._optuna
            study = optuna.create_study(
                storage=None,
                sampler=optuna.samplers.RandomSampler(seed=0),
                direction="minimize" if self.smaller_is_better else "maximize",
            )
            for entry in self._history:
                if entry[1] == length:
                    self._add(study, entry)
            self._studies[length] = study
        return study

    def _add(self, study: Any, entry: tuple[dict[str, Any], int, float]) -> None:
        params, _, metric = entry
        study.add_trial(
            self._optuna.trial.create_trial(
                params=params, distributions=self._distributions, value=metric
            )
        )


def _intersection_type(optuna: Any) -> type | None:
    """optuna's IntersectionSearchSpace, where this optuna has it."""
    return getattr(getattr(optuna, "search_space", None), "IntersectionSearchSpace", None)


__all__ = ["SamplerUnavailable", "TPESampler"]
