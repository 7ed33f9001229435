"""``adaptive_asha``: several ASHA brackets side by side, from aggressive to cautious.

The brackets and their shares follow Determined's ``adaptive_asha.go``:

* Rungs of the most aggressive bracket: ``max_rungs``, lowered so that the bottom rung still
  trains at least one unit and at least one trial can reach the top:
  ``min(max_rungs, int(log(max_length) / log(divisor)) + 1,
  int(log(max_trials) / log(divisor)) + 1)``.
* Brackets by ``mode`` for ``R`` such rungs: ``aggressive`` one bracket of ``R``;
  ``standard`` brackets of ``(R - 1) // 2 + 1`` up to ``R`` rungs; ``conservative`` brackets of
  1 up to ``R`` rungs. ``bracket_rungs``, when given, replaces all of this. Brackets are ordered
  from most rungs to fewest.
* ``max_trials`` is shared so that each bracket gets about the same total training: bracket
  ``b`` with ``r_b`` rungs weighs ``divisor ** (r_b - 1) / r_b``, gets
  ``max(int(weight / total_weight * max_trials), 1)`` trials, and the first bracket also gets
  what rounding left over.
* ``max_concurrent_trials`` is split evenly (at least one per bracket), the remainder going to
  the first brackets; when it is 0, each bracket trains ``max(trials of the last bracket,
  divisor)`` at once.

Each bracket then runs as :class:`~det_hub.searcher.asha.AshaBracket`, creating its own trials
(Determined's ``tournament.go``: a trial's events go to the bracket that created it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from det_hub.config import SearcherConfig
from det_hub.searcher.asha import AshaBracket, AsyncHalvingSearch, initial_concurrency


def max_rungs_for(max_rungs: int, max_length: int, max_trials: int, divisor: float) -> int:
    """The rungs of the most aggressive bracket (see the module docstring)."""
    by_length = int(math.log(max_length) / math.log(divisor)) + 1
    by_trials = int(math.log(max_trials) / math.log(divisor)) + 1
    return min(max_rungs, by_length, by_trials)


def bracket_rungs_for_mode(mode: str, max_rungs: int) -> list[int]:
    """The rungs of each bracket for an ``adaptive_asha`` mode, fewest first."""
    if mode == "aggressive":
        return [max_rungs]
    if mode == "standard":
        return list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    if mode == "conservative":
        return list(range(1, max_rungs + 1))
    raise ValueError(f"searcher.mode: {mode!r} is not one of aggressive, standard, conservative")


def bracket_max_trials(max_trials: int, divisor: float, brackets: Sequence[int]) -> list[int]:
    """Each bracket's ``max_trials`` (see the module docstring).

    Every bracket gets at least one trial, so with more brackets than ``max_trials`` the total
    exceeds ``max_trials``, as in Determined.
    """
    weights = [math.pow(divisor, rungs - 1) / rungs for rungs in brackets]
    # A plain loop, not sum(): Python 3.12's sum() compensates rounding, Determined's Go loop
    # does not, and the truncation below can tell the difference.
    total = 0.0
    for weight in weights:
        total += weight
    trials = [max(int(weight / total * max_trials), 1) for weight in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent_trials(
    max_concurrent_trials: int, divisor: float, bracket_trials: Sequence[int]
) -> list[int]:
    """Each bracket's ``max_concurrent_trials`` (see the module docstring)."""
    count = len(bracket_trials)
    if max_concurrent_trials == 0:
        return [max(bracket_trials[-1], int(divisor))] * count
    total = max(max_concurrent_trials, count)
    shares = [total // count] * count
    for i in range(total % count):
        shares[i] += 1
    return shares


def brackets_for(config: SearcherConfig, max_length: int) -> list[int]:
    """The rungs of each bracket of an ``adaptive_asha`` config, most rungs first."""
    if config.bracket_rungs:
        rungs = list(config.bracket_rungs)
    else:
        assert config.max_trials is not None
        top = max_rungs_for(config.max_rungs, max_length, config.max_trials, config.divisor)
        rungs = bracket_rungs_for_mode(config.mode, top)
    return sorted(rungs, reverse=True)


class AdaptiveAshaSearch(AsyncHalvingSearch):
    """Determined's ``adaptive_asha``: brackets of ASHA with different numbers of rungs, from
    the most aggressive early stopping to the least (see the module docstring)."""

    name = "adaptive_asha"

    def _make_brackets(self, config: SearcherConfig) -> list[AshaBracket]:
        assert self.max_length is not None and config.max_trials is not None
        rungs = brackets_for(config, self.max_length)
        trials = bracket_max_trials(config.max_trials, config.divisor, rungs)
        concurrent = bracket_max_concurrent_trials(
            config.max_concurrent_trials, config.divisor, trials
        )
        return [
            AshaBracket(
                index,
                rungs[index],
                trials[index],
                initial_concurrency(concurrent[index], config.divisor, rungs[index], trials[index]),
                config.divisor,
                self.max_length,
                config.stop_once,
                config.smaller_is_better,
            )
            for index in range(len(rungs))
        ]


__all__ = [
    "AdaptiveAshaSearch",
    "bracket_max_concurrent_trials",
    "bracket_max_trials",
    "bracket_rungs_for_mode",
    "brackets_for",
    "max_rungs_for",
]
