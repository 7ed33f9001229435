"""Largest-Triangle-Three-Buckets, alone and as the store's downsampling of one metric."""

from __future__ import annotations

import bisect
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from det_hub.lttb import lttb_indices
from det_hub.store import Store, Trial


def test_keeps_first_last_and_a_spike_at_exact_length() -> None:
    n = 10_000
    xs = list(range(n))
    ys = [math.sin(i / 500) for i in range(n)]
    ys[4_321] = 50.0  # one spike, which every-k-th thinning would almost surely miss
    kept = lttb_indices(xs, ys, 100)
    assert len(kept) == 100
    assert kept[0] == 0 and kept[-1] == n - 1
    assert 4_321 in kept
    assert kept == sorted(set(kept))


def test_a_straight_line_keeps_one_point_per_bucket() -> None:
    kept = lttb_indices(list(range(11)), [2.0 * x for x in range(11)], 4)
    # Buckets of (11 - 2) / 2 = 4.5 points: [1, 5) and [5, 10).
    assert len(kept) == 4 and kept[0] == 0 and kept[-1] == 10
    assert 1 <= kept[1] < 5 <= kept[2] < 10


def test_small_inputs_and_thresholds() -> None:
    assert lttb_indices([], [], 10) == []
    assert lttb_indices([1, 2, 3], [1, 2, 3], 3) == [0, 1, 2]
    assert lttb_indices([1, 2, 3], [1, 2, 3], 10) == [0, 1, 2]
    assert lttb_indices([1, 2, 3], [3, 2, 1], 1) == [0]
    assert lttb_indices([1, 2, 3], [3, 2, 1], 2) == [0, 2]
    with pytest.raises(ValueError, match="threshold"):
        lttb_indices([1], [1], 0)
    with pytest.raises(ValueError, match="differ in length"):
        lttb_indices([1, 2], [1], 5)


@given(st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=300), st.integers(1, 400))
def test_any_curve_gives_sorted_distinct_indices_of_the_right_count(
    ys: list[float], threshold: int
) -> None:
    xs = list(range(len(ys)))
    kept = lttb_indices(xs, ys, threshold)
    assert len(kept) == min(threshold, len(ys))
    assert kept == sorted(set(kept))
    assert all(0 <= i < len(ys) for i in kept)
    if len(ys) >= 2 and threshold >= 2:
        assert kept[0] == 0 and kept[-1] == len(ys) - 1


async def test_store_downsamples_one_metric_by_lttb(store: Store, trial: Trial) -> None:
    rows = [{"steps_completed": s, "metrics": {"loss": 1.0 / (s + 1), "acc": 0.5}}
            for s in range(5_000)]
    rows[2_222]["metrics"]["loss"] = 9.0
    await store.add_metrics(trial.id, "training", rows)
    await store.add_metrics(trial.id, "validation",
                            [{"steps_completed": s, "metrics": {"val": 1.0}}
                             for s in range(0, 5_000, 1_000)])

    sampled = await store.get_metrics(trial.id, max_points=200, metric="loss")
    training = [m for m in sampled if m.group == "training"]
    assert len(training) == 200
    steps = [m.steps_completed for m in training]
    assert steps[0] == 0 and steps[-1] == 4_999 and 2_222 in steps
    assert training[steps.index(2_222)].metrics == {"loss": 9.0, "acc": 0.5}
    # The small group comes whole; rows stay in step order across groups.
    assert [m.steps_completed for m in sampled if m.group == "validation"] == [
        0, 1_000, 2_000, 3_000, 4_000]
    ordered = [(m.steps_completed, m.id) for m in sampled]
    assert ordered == sorted(ordered)

    # Every-k-th thinning (no metric) misses the spike.
    thinned = await store.get_metrics(trial.id, group="training", max_points=200)
    assert 2_222 not in [m.steps_completed for m in thinned]
    # A metric no row of the group has: thinned every k-th, as without one.
    other = await store.get_metrics(trial.id, group="training", max_points=200,
                                    metric="nope")
    assert [m.id for m in other] == [m.id for m in thinned]
    # Few rows: all of them, whatever the metric.
    assert len(await store.get_metrics(trial.id, group="validation", max_points=200,
                                       metric="loss")) == 5


async def test_store_lttb_skips_rows_without_a_number(store: Store, trial: Trial) -> None:
    rows = [{"steps_completed": s, "metrics": {"loss": 1.0 * s} if s % 2 else {"loss": "n/a"}}
            for s in range(100)]
    await store.add_metrics(trial.id, "training", rows)
    sampled = await store.get_metrics(trial.id, max_points=10, metric="loss")
    assert len(sampled) == 10
    assert all(m.steps_completed % 2 == 1 for m in sampled)
    assert sampled[0].steps_completed == 1 and sampled[-1].steps_completed == 99


def _deviation(xs: list[int], ys: list[float], kept_xs: list[int], kept_ys: list[float]) -> float:
    """The largest vertical distance between a curve and the polyline through the kept points."""
    worst = 0.0
    for x, y in zip(xs, ys, strict=True):
        j = min(bisect.bisect_right(kept_xs, x) - 1, len(kept_xs) - 2)
        t = (x - kept_xs[j]) / (kept_xs[j + 1] - kept_xs[j])
        worst = max(worst, abs(y - (kept_ys[j] + t * (kept_ys[j + 1] - kept_ys[j]))))
    return worst


def _random_walk(seed: int, n: int) -> list[float]:
    rng = random.Random(seed)
    y, ys = 0.0, []
    for _ in range(n):
        y += rng.gauss(0.0, 1.0)
        ys.append(y)
    return ys


async def test_store_lttb_keeps_ends_spikes_and_dips(store: Store, trial: Trial) -> None:
    n, points = 20_000, 300
    ys = [math.sin(s / 700) for s in range(n)]
    ys[7_777], ys[13_001] = 40.0, -40.0  # one spike up and one down, each a single row
    # Steps with gaps and a repeated step, as after a restart from a checkpoint.
    steps = [s * 3 + (1 if s > 10_000 else 0) for s in range(n)]
    steps[5_000] = steps[4_999]
    await store.add_metrics(trial.id, "training", [
        {"steps_completed": x, "metrics": {"loss": y}} for x, y in zip(steps, ys, strict=True)])

    sampled = await store.get_metrics(trial.id, group="training", max_points=points,
                                      metric="loss")
    assert points - 5 <= len(sampled) <= points
    kept = [m.steps_completed for m in sampled]
    assert kept[0] == steps[0] and kept[-1] == steps[-1]
    assert steps[7_777] in kept and steps[13_001] in kept
    assert max(m.metrics["loss"] for m in sampled) == 40.0
    assert min(m.metrics["loss"] for m in sampled) == -40.0
    ordered = [(m.steps_completed, m.id) for m in sampled]
    assert ordered == sorted(set(ordered))


async def test_store_lttb_follows_random_walks_as_closely_as_pure_lttb(
    store: Store, trial: Trial
) -> None:
    n, points = 10_000, 200
    ratios = []
    for seed in range(4):
        ys = _random_walk(seed, n)
        group = f"walk{seed}"
        await store.add_metrics(trial.id, group, [
            {"steps_completed": s, "metrics": {"v": y}} for s, y in enumerate(ys)])
        sampled = await store.get_metrics(trial.id, group=group, max_points=points, metric="v")
        assert points - 5 <= len(sampled) <= points
        xs = list(range(n))
        pure = lttb_indices(xs, ys, points)
        pure_dev = _deviation(xs, ys, pure, [ys[i] for i in pure])
        store_dev = _deviation(xs, ys, [m.steps_completed for m in sampled],
                               [m.metrics["v"] for m in sampled])
        ratios.append(store_dev / pure_dev)
    # Bucket extremes then LTTB stay within a whisker of LTTB over every row, walk by walk.
    assert max(ratios) < 1.5
    assert sum(ratios) / len(ratios) < 1.2


async def test_store_lttb_leaves_out_booleans_and_strings(store: Store, trial: Trial) -> None:
    def value(s: int) -> object:
        return {0: "n/a", 1: True, 2: False}.get(s % 5, float(s % 7))

    await store.add_metrics(trial.id, "training", [
        {"steps_completed": s, "metrics": {"loss": value(s)}} for s in range(3_000)])
    sampled = await store.get_metrics(trial.id, max_points=100, metric="loss")
    assert 90 <= len(sampled) <= 100
    assert all(type(m.metrics["loss"]) is float for m in sampled)
    assert sampled[0].steps_completed == 3 and sampled[-1].steps_completed == 2_999


async def test_insert_metrics_answers_the_stored_rows(store: Store, trial: Trial) -> None:
    stored = await store.insert_metrics(trial.id, "training", [
        {"steps_completed": 3, "metrics": {"loss": 1.0}},
        {"steps_completed": 1, "metrics": {"loss": 2.0}}])
    assert [r["steps_completed"] for r in stored] == [3, 1]
    assert stored[0]["id"] < stored[1]["id"]
    read = {m.id: m for m in await store.get_metrics(trial.id)}
    for r in stored:
        assert read[r["id"]].steps_completed == r["steps_completed"]
        assert read[r["id"]].report_time == r["report_time"]
    after = await store.experiment_metrics_after(trial.experiment_id, stored[0]["id"], 10)
    assert [m.id for m in after] == [stored[1]["id"]]
