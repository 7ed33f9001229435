"""The checkpoint GC policy, over generated experiments."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub.storage import CheckpointRecord, checkpoints_to_delete

COUNT = st.integers(min_value=0, max_value=4)


@st.composite
def experiments(draw: st.DrawFn) -> list[CheckpointRecord]:
    n = draw(st.integers(min_value=0, max_value=25))
    records = []
    for i in range(n):
        records.append(
            CheckpointRecord(
                uuid=f"c{i:03d}",
                trial_id=draw(st.integers(min_value=1, max_value=4)),
                # Few distinct values on purpose: ties must be handled deterministically.
                steps_completed=draw(st.integers(min_value=0, max_value=6)) * 100,
                searcher_metric=draw(st.none() | st.sampled_from([0.1, 0.2, 0.3, 0.5, 1.0, -2.0])),
                state=draw(st.sampled_from(["COMPLETED"] * 4 + ["ACTIVE", "DELETED"])),
            )
        )
    return records


def _policy(records, n, m, k, smaller):
    return checkpoints_to_delete(
        records,
        save_experiment_best=n,
        save_trial_best=m,
        save_trial_latest=k,
        smaller_is_better=smaller,
    )


def _kth_threshold(values: list[float], k: int) -> float | None:
    """The k-th best value (values sorted best first), or None when k is 0."""
    if k <= 0 or not values:
        return None
    return values[min(k, len(values)) - 1]


@settings(max_examples=400, deadline=None)
@given(experiments(), COUNT, COUNT, COUNT, st.booleans())
def test_invariants(records, n, m, k, smaller) -> None:
    deleted = _policy(records, n, m, k, smaller)
    completed = [r for r in records if r.state == "COMPLETED"]
    kept = [r for r in completed if r.uuid not in deleted]
    kept_ids = {r.uuid for r in kept}

    # Only COMPLETED input checkpoints are ever deleted.
    assert deleted <= {r.uuid for r in completed}

    sign = 1 if smaller else -1

    def covered(group: list[CheckpointRecord], count: int, key) -> None:
        """The ``count`` best of ``group`` by ``key`` (smaller key is better) survive: all
        strictly better than the count-th, and at least ``count`` at or above it."""
        ranked = sorted(key(r) for r in group)
        cut = _kth_threshold(ranked, count)
        if cut is None:
            return
        assert all(r.uuid in kept_ids for r in group if key(r) < cut)
        assert sum(1 for r in group if key(r) <= cut and r.uuid in kept_ids) >= min(
            count, len(group)
        )

    scored = [r for r in completed if r.searcher_metric is not None]
    covered(scored, n, lambda r: sign * r.searcher_metric)
    by_trial = defaultdict(list)
    for r in completed:
        by_trial[r.trial_id].append(r)
    for trial in by_trial.values():
        covered(
            [r for r in trial if r.searcher_metric is not None],
            m,
            lambda r: sign * r.searcher_metric,
        )
        covered(trial, k, lambda r: -r.steps_completed)

    # Nothing is kept without a reason: at most N + (M + K) per trial survive.
    assert len(kept) <= n + (m + k) * len(by_trial)


@settings(max_examples=200, deadline=None)
@given(experiments(), COUNT, COUNT, COUNT, st.booleans(), st.randoms(use_true_random=False))
def test_deterministic_and_order_free(records, n, m, k, smaller, rnd: random.Random) -> None:
    first = _policy(records, n, m, k, smaller)
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert _policy(shuffled, n, m, k, smaller) == first
    assert _policy(iter(records), n, m, k, smaller) == first


@settings(max_examples=200, deadline=None)
@given(experiments(), COUNT, COUNT, COUNT, st.booleans())
def test_idempotent(records, n, m, k, smaller) -> None:
    deleted = _policy(records, n, m, k, smaller)
    survivors = [r for r in records if r.uuid not in deleted]
    assert _policy(survivors, n, m, k, smaller) == set()


@given(experiments(), st.booleans())
def test_keep_nothing_deletes_every_completed(records, smaller) -> None:
    assert _policy(records, 0, 0, 0, smaller) == {r.uuid for r in records if r.state == "COMPLETED"}


def test_worked_example() -> None:
    recs = [
        CheckpointRecord("a", 1, 100, 0.9),
        CheckpointRecord("b", 1, 200, 0.5),
        CheckpointRecord("c", 1, 300, 0.7),
        CheckpointRecord("d", 1, 400, None),
        CheckpointRecord("e", 2, 100, 0.4),
        CheckpointRecord("f", 2, 200, 0.6),
        CheckpointRecord("g", 2, 300, 0.8, state="ACTIVE"),
    ]
    # Experiment best 1: e (0.4). Trial best 1: b (trial 1), e (trial 2). Latest 1: d, f.
    assert _policy(recs, 1, 1, 1, True) == {"a", "c"}
    # Larger is better: experiment best a (0.9); trial bests a and f; latest d and f.
    assert _policy(recs, 1, 1, 1, False) == {"b", "c", "e"}
    assert _policy(recs, 0, 0, 2, True) == {"a", "b"}  # trial 1 keeps c, d; trial 2 keeps e, f
    with pytest.raises(ValueError, match="save_trial_latest: must be >= 0"):
        _policy(recs, 1, 1, -1, True)
