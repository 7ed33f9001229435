"""`det-hub preview-search`: a search simulated before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.config import parse_experiment_config
from det_hub.searcher.preview import preview_search

SPACE = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 4},
         "act": {"type": "categorical", "vals": ["relu", "tanh"]}}


def preview(searcher: dict[str, Any], seed: int = 0, space: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    config = parse_experiment_config({"entrypoint": "m:T", "hyperparameters": space or SPACE,
                                      "searcher": {"metric": "loss", **searcher}})
    return preview_search(config, seed)


def test_random_grid_and_single_train_every_trial_to_the_end() -> None:
    length = {"max_length": {"batches": 300}}
    got = preview({"name": "random", "max_trials": 7, **length})
    assert (got.trials, got.lengths, got.total, got.rungs) == (7, {300: 7}, 2100, None)
    got = preview({"name": "grid", **length})
    assert (got.trials, got.lengths, got.unit) == (8, {300: 8}, "batches")
    got = preview({"name": "single", **length})
    assert (got.trials, got.total, got.full_total) == (1, 300, 300)


@pytest.mark.parametrize("stop_once", [True, False])
def test_asha_trials_end_at_rungs_and_the_top_rung_is_reached(stop_once: bool) -> None:
    got = preview({"name": "adaptive_asha", "max_trials": 100, "time_metric": "batches",
                   "max_time": 1000, "stop_once": stop_once})
    assert got.trials == 100
    assert got.rungs is not None
    rung_lengths = {r["length"] for b in got.rungs["brackets"] for r in b["rungs"]}
    assert set(got.lengths) <= rung_lengths and 1000 in got.lengths
    assert sum(got.lengths.values()) == 100
    assert got.total == sum(n * length for length, n in got.lengths.items())
    assert got.total < got.full_total / 3  # early stopping saves most of the compute
    # The brackets are Determined's: 70/22/8 trials of 4/3/2 rungs.
    assert [b["max_trials"] for b in got.rungs["brackets"]] == [70, 22, 8]


def test_the_same_seed_gives_the_same_preview_and_another_may_not() -> None:
    searcher = {"name": "async_halving", "num_rungs": 3, "max_trials": 32,
                "max_length": {"batches": 160}, "divisor": 2}
    assert preview(searcher, seed=5) == preview(searcher, seed=5)
    outcomes = {tuple(preview(searcher, seed=s).lengths.items()) for s in range(6)}
    assert len(outcomes) > 1  # the stops depend on the (random) metrics


def test_a_search_whose_training_code_decides_the_length() -> None:
    got = preview({"name": "random", "max_trials": 3})
    assert (got.trials, got.max_length, got.total) == (3, None, 0)


def test_the_preview_uses_the_real_method() -> None:
    # Rung lengths come from the method itself: async_halving of 3 rungs, divisor 2, length
    # 160 has rungs at 40, 80 and 160.
    got = preview({"name": "async_halving", "num_rungs": 3, "max_trials": 8,
                   "max_length": {"batches": 160}, "divisor": 2})
    assert [r["length"] for r in got.rungs["brackets"][0]["rungs"]] == [40, 80, 160]
