"""Bracket and rung arithmetic of async_halving and adaptive_asha, against Determined's formulas.

Determined (master/pkg/searcher/adaptive_asha.go, asha.go, asha_stopping.go):

* max rungs R = min(max_rungs, int(log(max_length)/log(d)) + 1, int(log(max_trials)/log(d)) + 1)
* brackets: aggressive [R]; standard (R-1)//2+1 .. R; conservative 1 .. R; most rungs first
* bracket trials: weight d**(r-1)/r, int(weight/total*max_trials) at least 1, remainder to the
  first bracket
* bracket concurrency: max_concurrent_trials split evenly (at least 1 each), remainder to the
  first; 0 gives max(last bracket's trials, d) to each
* rung i of r: max(int(max_length / d**(r-1-i)), 1)
* a bracket starts min(concurrency, max_trials) trials, or with concurrency 0
  clamp(d**(r-1), 1, max_trials)
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub.searcher import Create, build_search_method
from det_hub.searcher.adaptive_asha import (
    bracket_max_concurrent_trials,
    bracket_max_trials,
    bracket_rungs_for_mode,
    max_rungs_for,
)
from det_hub.searcher.asha import initial_concurrency, rung_lengths

SPACE = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}


def adaptive(**searcher: Any) -> dict[str, Any]:
    table = build_search_method(
        {"name": "adaptive_asha", "metric": "loss", **searcher}, SPACE, 0
    ).rung_table()  # type: ignore[attr-defined]
    return table  # type: ignore[no-any-return]


def summary(table: dict[str, Any]) -> list[tuple[int, int, int, list[int]]]:
    return [
        (
            b["num_rungs"],
            b["max_trials"],
            b["max_concurrent_trials"],
            [r["length"] for r in b["rungs"]],
        )
        for b in table["brackets"]
    ]


@pytest.mark.parametrize(
    ("searcher", "expected"),
    [
        # The worked example. R = min(5, int(4.98)+1, int(3.32)+1) = 4; standard: 2..4 rungs;
        # weights 64/4=16, 16/3, 4/2=2 -> int(68.57)=68, int(22.86)=22, int(8.57)=8, and the 2
        # left over go to the first bracket. 16 concurrent: 6, 5, 5. Rungs 1000/64 = 15.6 -> 15,
        # 1000/16 = 62.5 -> 62, 250, 1000.
        (
            {"max_trials": 100, "max_time": 1000, "time_metric": "batches"},
            [(4, 70, 6, [15, 62, 250, 1000]), (3, 22, 5, [62, 250, 1000]), (2, 8, 5, [250, 1000])],
        ),
        (
            {"max_trials": 100, "max_length": {"batches": 1000}},
            [(4, 70, 6, [15, 62, 250, 1000]), (3, 22, 5, [62, 250, 1000]), (2, 8, 5, [250, 1000])],
        ),
        # Conservative, same budget: 1..4 rungs, weights 16, 5.33, 2, 1 of 24.33 -> 65, 21, 8, 4
        # plus the remainder 2 -> 67. 16 concurrent over 4 brackets: 4 each.
        (
            {"max_trials": 100, "max_length": {"batches": 1000}, "mode": "conservative"},
            [
                (4, 67, 4, [15, 62, 250, 1000]),
                (3, 21, 4, [62, 250, 1000]),
                (2, 8, 4, [250, 1000]),
                (1, 4, 4, [1000]),
            ],
        ),
        # Aggressive: one bracket with every trial.
        (
            {"max_trials": 100, "max_length": {"batches": 1000}, "mode": "aggressive"},
            [(4, 100, 16, [15, 62, 250, 1000])],
        ),
        # max_concurrent_trials 0: each bracket max(last bracket's 8 trials, divisor 4) = 8.
        (
            {"max_trials": 100, "max_length": {"batches": 1000}, "max_concurrent_trials": 0},
            [(4, 70, 8, [15, 62, 250, 1000]), (3, 22, 8, [62, 250, 1000]), (2, 8, 8, [250, 1000])],
        ),
        # Fewer concurrent trials than brackets: raised to one per bracket.
        (
            {"max_trials": 100, "max_length": {"batches": 1000}, "max_concurrent_trials": 2},
            [(4, 70, 1, [15, 62, 250, 1000]), (3, 22, 1, [62, 250, 1000]), (2, 8, 1, [250, 1000])],
        ),
        # Determined's adaptive_asha_test.go: 900 batches, 5 trials, standard, max_rungs 2,
        # divisor 3, 5 concurrent -> R = min(2, 7, 2) = 2, brackets [2, 1], weights 1.5 and 1
        # -> 3 and 2 trials, concurrency 3 and 2, rungs [300, 900] and [900].
        (
            {
                "max_trials": 5,
                "max_length": {"batches": 900},
                "max_rungs": 2,
                "divisor": 3,
                "max_concurrent_trials": 5,
            },
            [(2, 3, 3, [300, 900]), (1, 2, 2, [900])],
        ),
        # Determined's reproducibility test: 6400 batches, 128 trials, aggressive, max_rungs 3,
        # divisor 4 -> R = min(3, 7, 4) = 3; rungs 6400/16, 6400/4, 6400.
        (
            {
                "max_trials": 128,
                "max_length": {"batches": 6400},
                "mode": "aggressive",
                "max_rungs": 3,
            },
            [(3, 128, 16, [400, 1600, 6400])],
        ),
        # Few trials cap the rungs: int(log 3 / log 4) + 1 = 1 rung, a single plain bracket.
        (
            {"max_trials": 3, "max_length": {"batches": 1000}},
            [(1, 3, 3, [1000])],
        ),
        # A short max_length caps them too: int(log 10 / log 4) + 1 = 2; standard then has
        # brackets of 2 and 1 rungs, weights 2 and 1 -> 66 + 1 left over, and 33.
        (
            {"max_trials": 100, "max_length": {"batches": 10}},
            [(2, 67, 8, [2, 10]), (1, 33, 8, [10])],
        ),
        # bracket_rungs replaces the mode; brackets are sorted, most rungs first. Every bracket
        # gets at least one trial even if that exceeds max_trials (weights 5.33, 2, 1 of 8.33
        # give 1.28, 0.48, 0.24 trials of 2).
        (
            {"max_trials": 2, "max_length": {"batches": 64}, "bracket_rungs": [1, 3, 2]},
            [(3, 1, 1, [4, 16, 64]), (2, 1, 1, [16, 64]), (1, 1, 1, [64])],
        ),
    ],
)
def test_brackets_match_determined(searcher: dict[str, Any], expected: list[Any]) -> None:
    assert summary(adaptive(**searcher)) == expected


@pytest.mark.parametrize(
    ("num_rungs", "max_length", "divisor", "expected"),
    [
        # Determined's asha_stopping_test.go TestMakeRungs.
        (3, 9, 3, [1, 3, 9]),
        (4, 10, 2, [1, 2, 5, 10]),
        (1, 9, 3, [9]),
        (3, 900, 3, [100, 300, 900]),
        # Truncation and the floor of 1.
        (5, 1000, 4, [3, 15, 62, 250, 1000]),
        (3, 2, 4, [1, 1, 2]),
    ],
)
def test_rung_lengths(num_rungs: int, max_length: int, divisor: int, expected: list[int]) -> None:
    assert rung_lengths(num_rungs, divisor, max_length) == expected


@pytest.mark.parametrize(
    ("max_concurrent", "divisor", "num_rungs", "max_trials", "expected"),
    [
        (0, 4, 4, 100, 64),  # divisor ** (rungs - 1): enough for one trial to reach the top
        (0, 4, 4, 10, 10),  # ... but no more than max_trials
        (0, 3, 1, 5, 1),  # a single rung: 3 ** 0
        (3, 4, 4, 10, 3),
        (30, 4, 4, 10, 10),
    ],
)
def test_initial_concurrency(
    max_concurrent: int, divisor: int, num_rungs: int, max_trials: int, expected: int
) -> None:
    assert initial_concurrency(max_concurrent, divisor, num_rungs, max_trials) == expected


def test_async_halving_is_one_bracket_of_num_rungs() -> None:
    method = build_search_method(
        {
            "name": "async_halving",
            "metric": "loss",
            "max_trials": 10,
            "num_rungs": 3,
            "divisor": 3,
            "max_time": 900,
            "time_metric": "batches",
            "max_concurrent_trials": 3,
        },
        SPACE,
        0,
    )
    # Determined's asha_stopping_test.go TestASHAStopping: rungs 100, 300, 900; 3 initial runs.
    assert summary(method.rung_table()) == [(3, 10, 3, [100, 300, 900])]  # type: ignore[attr-defined]
    assert len(method.initial_actions()) == 3 * 2  # a Create and a ValidateAfter each


modes = st.sampled_from(["aggressive", "standard", "conservative"])


@settings(max_examples=300, deadline=None)
@given(
    max_trials=st.integers(1, 5000),
    max_length=st.integers(1, 10**7),
    divisor=st.integers(2, 10),
    max_rungs=st.integers(1, 10),
    mode=modes,
    max_concurrent=st.integers(0, 200),
)
def test_bracket_math_invariants(
    max_trials: int,
    max_length: int,
    divisor: int,
    max_rungs: int,
    mode: str,
    max_concurrent: int,
) -> None:
    top = max_rungs_for(max_rungs, max_length, max_trials, divisor)
    assert 1 <= top <= max_rungs
    brackets = sorted(bracket_rungs_for_mode(mode, top), reverse=True)
    assert brackets[0] == top and all(1 <= r <= top for r in brackets)
    trials = bracket_max_trials(max_trials, divisor, brackets)
    assert sum(trials) == max_trials
    assert all(t >= 1 for t in trials)
    concurrent = bracket_max_concurrent_trials(max_concurrent, divisor, trials)
    assert all(c >= 1 for c in concurrent)
    if max_concurrent:
        assert sum(concurrent) == max(max_concurrent, len(brackets))
        assert max(concurrent) - min(concurrent) <= 1
    for rungs in brackets:
        lengths = rung_lengths(rungs, divisor, max_length)
        assert lengths[-1] == max_length
        assert all(a < b for a, b in zip(lengths, lengths[1:], strict=False))
        assert lengths[0] >= 1


@settings(max_examples=100, deadline=None)
@given(
    max_trials=st.integers(1, 300),
    max_length=st.integers(1, 10**5),
    divisor=st.integers(2, 6),
    mode=modes,
    max_concurrent=st.integers(0, 40),
)
def test_the_search_starts_what_the_brackets_allow(
    max_trials: int, max_length: int, divisor: int, mode: str, max_concurrent: int
) -> None:
    method = build_search_method(
        {
            "name": "adaptive_asha",
            "metric": "loss",
            "max_trials": max_trials,
            "max_length": {"batches": max_length},
            "divisor": divisor,
            "mode": mode,
            "max_concurrent_trials": max_concurrent,
        },
        SPACE,
        1,
    )
    creates = [a for a in method.initial_actions() if isinstance(a, Create)]
    table = method.rung_table()  # type: ignore[attr-defined]
    assert len(creates) == sum(b["max_concurrent_trials"] for b in table["brackets"])
    assert sum(b["max_trials"] for b in table["brackets"]) == max_trials
    for bracket in table["brackets"]:
        assert bracket["max_concurrent_trials"] <= bracket["max_trials"]
        assert bracket["trials_created"] == bracket["max_concurrent_trials"]
