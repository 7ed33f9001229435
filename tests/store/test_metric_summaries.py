"""Block summaries of metric curves: the pure part, and the store keeping them current."""

from __future__ import annotations

import asyncio
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from det_hub.store import Experiment, Store, Trial, metric_writes
from det_hub.store.models import MetricSummary
from det_hub.store.packing import Pack
from det_hub.store.summaries import (
    LEVELS,
    MAX_BLOCKS_PER_POINT,
    RAW_ROWS_PER_POINT,
    ROLLUP_SPAN,
    Block,
    candidates,
    choose_level,
    coarsen,
    drawable,
    is_summarised_eagerly,
    roll_up,
    rollup_mark,
    summarize,
)


def _points(values: list[float | None], steps: list[int] | None = None) -> list[tuple]:
    steps = steps if steps is not None else list(range(len(values)))
    return [(i + 1, s, {"loss": v}) for i, (s, v) in enumerate(zip(steps, values, strict=True))]


def _as_dict(blocks: dict) -> dict:
    return {key: b.row() for key, b in blocks.items()}


# -- pure ------------------------------------------------------------------------------------


def test_drawable_takes_finite_numbers_only() -> None:
    assert drawable(3) == 3.0 and drawable(2.5) == 2.5
    for value in (True, False, None, "1.0", float("nan"), float("inf"), {"a": 1}, [1]):
        assert drawable(value) is None


def test_a_block_holds_count_ends_and_extremes() -> None:
    rows = _points([5.0, 1.0, 9.0, 1.0, 3.0], steps=[16, 17, 18, 19, 31])
    rows.append((99, 20, {"loss": True, "acc": 0.5}))
    blocks = summarize(rows, levels=(4,))
    loss = blocks[("loss", 4, 1)]
    assert loss.count == 5
    assert loss.first == (16, 1, 5.0) and loss.last == (31, 5, 3.0)
    # On equal lows the row held first stays.
    assert loss.low == (17, 2, 1.0) and loss.high == (18, 3, 9.0)
    assert blocks[("acc", 4, 1)].count == 1
    assert Block.from_row(loss.row()) == loss


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.floats(-1e6, 1e6)), min_size=1, max_size=300))
def test_coarsening_finer_blocks_equals_summarising_the_rows(pairs: list) -> None:
    rows = [(i + 1, step, {"m": v}) for i, (step, v) in enumerate(pairs)]
    fine = summarize(rows, levels=(4,))
    for level in (7, 10):
        coarse = coarsen(fine.values(), level)
        direct = summarize(rows, levels=(level,))
        assert coarse.keys() == direct.keys()
        for key, block in direct.items():
            got = coarse[key]
            assert (got.count, got.first, got.last) == (block.count, block.first, block.last)
            # Extremes may be different rows of equal value.
            assert got.low[2] == block.low[2] and got.high[2] == block.high[2]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=400),
    st.integers(1, 40),
    st.sampled_from([0, 2, 4]),
)
def test_candidates_are_the_exact_extremes_of_buckets_of_whole_blocks(
    values: list[float], max_points: int, level: int
) -> None:
    rows = _points(values)
    blocks = list(summarize(rows, levels=(level,)).values())
    got = candidates(blocks, max_points)
    ids = [p[1] for p in got]
    assert len(ids) == len(set(ids)) and got == sorted(got, key=lambda p: p[:2])
    assert len(got) <= 2 * max_points + 2
    # The first and last rows, and the overall extremes, are always there.
    assert got[0][:2] == (0, 1) and got[-1][:2] == (len(values) - 1, len(values))
    assert min(p[2] for p in got) == min(values) and max(p[2] for p in got) == max(values)
    # Each bucket of whole blocks contributes its own lowest and highest value.
    ordered = sorted(blocks, key=lambda b: b.block)
    per_bucket = math.ceil(len(ordered) / max_points)
    values_by_step = dict(enumerate(values))
    kept = {p[0]: p[2] for p in got}
    for start in range(0, len(ordered), per_bucket):
        bucket = ordered[start : start + per_bucket]
        lo, hi = bucket[0].block << level, ((bucket[-1].block + 1) << level) - 1
        inside = [values_by_step[s] for s in range(lo, hi + 1) if s in values_by_step]
        chosen = [v for s, v in kept.items() if lo <= s <= hi]
        assert min(inside) in chosen and max(inside) in chosen


def test_choose_level_prefers_the_finest_level_under_the_cap() -> None:
    assert choose_level({}, 100) is None
    assert choose_level({4: 10**6, 7: 125_000, 10: 15_000, 13: 2_000}, 1000) == 10
    assert choose_level({4: 1_000, 7: 125}, 1000) == 4
    # No level is coarse enough: the coarsest there is.
    assert choose_level({4: 10**9, 19: 10**7}, 10) == 19
    assert choose_level({4: MAX_BLOCKS_PER_POINT * 10, 7: 1}, 10) == 4


# -- in the store ----------------------------------------------------------------------------


async def _mark(store: Store, trial_id: int) -> int:
    async with store._engine.connect() as conn:
        return int(await conn.scalar(
            select(Trial.summaries_below).where(Trial.id == trial_id)))


async def _stored(store: Store, trial_id: int) -> dict:
    """The trial's summaries as a read takes them: the stored blocks, and the coarse ones of
    the finest blocks from the trial's mark on, of which none may be stored."""
    async with store._engine.connect() as conn:
        rows = (await conn.execute(
            select(MetricSummary.__table__).where(MetricSummary.trial_id == trial_id)
        )).mappings().all()
    mark = await _mark(store, trial_id)
    blocks = {(r["group_name"], r["name"], r["level"], r["block"]): Block.from_row(r)
              for r in rows}
    assert [key for key, b in blocks.items() if b.level > LEVELS[0]
            and not is_summarised_eagerly(b, mark)] == [], f"coarse blocks past mark {mark}"
    tails: dict = {}
    for (group, *_), b in blocks.items():
        if b.level == LEVELS[0] and b.block << b.level >= mark:
            tails.setdefault(group, []).append(b)
    made = {(group, b.name, b.level, b.block): b
            for group, tail in tails.items() for b in roll_up(tail)}
    return {key: b.row() for key, b in {**blocks, **made}.items()}


async def _expected(store: Store, trial_id: int) -> dict:
    want = {}
    for group in ("training", "validation"):
        rows = await store.get_metrics(trial_id, group=group)
        blocks = summarize((r.id, r.steps_completed, r.metrics) for r in rows)
        want.update({(group, *key): b.row() for key, b in blocks.items()})
    return want


async def test_summaries_follow_inserts_in_any_order_and_cuts(store: Store, trial: Trial) -> None:
    rng = random.Random(7)
    steps = list(range(0, 3000))
    rng.shuffle(steps)
    for start in range(0, len(steps), 250):
        batch = [{"steps_completed": s, "metrics": {"loss": rng.gauss(0, 1), "flag": True,
                                                    "acc": rng.random() if s % 3 else "n/a"}}
                 for s in steps[start : start + 250]]
        await store.add_metrics(trial.id, "training", batch)
    await store.add_metrics(trial.id, "validation", [
        {"steps_completed": s, "metrics": {"loss": 1.0 / (s + 1)}} for s in range(0, 3000, 50)])
    assert await _stored(store, trial.id) == await _expected(store, trial.id)

    # A resumed trial rolls back rows past its checkpoint; blocks cut in two are rebuilt.
    for cut in (2345, 1024, 1023, 17):
        await store.start_trial_run(trial.id, cut)
        assert await _stored(store, trial.id) == await _expected(store, trial.id), cut
    await store.start_trial_run(trial.id, -1)
    assert await _stored(store, trial.id) == {}


def test_a_mark_moves_to_the_span_before_the_newest() -> None:
    assert rollup_mark(0) == rollup_mark(2 * ROLLUP_SPAN - 1) == 0
    assert rollup_mark(2 * ROLLUP_SPAN) == ROLLUP_SPAN
    assert rollup_mark(7 * ROLLUP_SPAN + 5) == 6 * ROLLUP_SPAN
    fine = Block("loss", LEVELS[0], 3, 1, (200, 1, 0.5), (200, 1, 0.5), (200, 1, 0.5),
                 (200, 1, 0.5))
    assert is_summarised_eagerly(fine, 0)
    [coarse, *_] = roll_up([fine])
    assert (coarse.level, coarse.block) == (LEVELS[1], 0)
    assert not is_summarised_eagerly(coarse, 0) and is_summarised_eagerly(coarse, ROLLUP_SPAN)


@pytest.mark.parametrize("chunk_rows", [None, 100])
async def test_coarse_summaries_roll_up_in_spans_in_any_order_and_cuts(
    store: Store, trial: Trial, monkeypatch: pytest.MonkeyPatch, chunk_rows: int | None
) -> None:
    """Rows spread over several spans, stored out of order (some below the mark by then), in
    batches of one chunk or several: every block as a read takes it is that of the rows, and
    the coarse ones below the mark are stored; cuts bring the mark down."""
    if chunk_rows is not None:
        monkeypatch.setattr(metric_writes, "MAX_CHUNK_ROWS", chunk_rows)
    rng = random.Random(11)
    steps = [s * 331 for s in range(5_000)]  # past 6 spans
    batches = [steps[i : i + 250] for i in range(0, len(steps), 250)]
    rng.shuffle(batches)
    for batch in batches:
        await store.add_metrics(trial.id, "training", [
            {"steps_completed": s, "metrics": {"loss": rng.gauss(0, 1), "acc": rng.random()}}
            for s in batch])
    await store.add_metrics(trial.id, "validation", [
        {"steps_completed": s, "metrics": {"loss": 1.0 / (s + 1)}} for s in steps[::40]])
    assert await _mark(store, trial.id) == rollup_mark(steps[-1]) > 0
    assert await _stored(store, trial.id) == await _expected(store, trial.id)

    for cut in (steps[-1] - 5, 3 * ROLLUP_SPAN + 17, ROLLUP_SPAN - 1, 17):
        await store.start_trial_run(trial.id, cut)
        assert await _mark(store, trial.id) <= cut
        assert await _stored(store, trial.id) == await _expected(store, trial.id), cut
    # Rows past the mark again, with the mark low: the next batch rolls them up.
    await store.add_metrics(trial.id, "training", [
        {"steps_completed": s, "metrics": {"loss": 0.5}} for s in range(0, 3 * ROLLUP_SPAN, 997)])
    assert await _mark(store, trial.id) == rollup_mark(3 * ROLLUP_SPAN - 1)
    assert await _stored(store, trial.id) == await _expected(store, trial.id)


async def test_batches_stored_together_are_each_summarised_once(
    store: Store, trial: Trial
) -> None:
    """Batches of one trial stored at once (PostgreSQL takes them on connections of their
    own) while its mark moves: no row is left out of a coarse block, none is in one twice."""
    rng = random.Random(5)
    steps = [s * 1_777 for s in range(6_000)]  # 40 spans: the mark moves often
    batches = [steps[i : i + 50] for i in range(0, len(steps), 50)]
    # Mostly ascending, as a trial reports, with some batches late.
    batches.sort(key=lambda b: b[0] + rng.randrange(4 * ROLLUP_SPAN))
    for start in range(0, len(batches), 8):
        await asyncio.gather(*(store.add_metrics(trial.id, "training", [
            {"steps_completed": s, "metrics": {"loss": rng.random()}} for s in batch])
            for batch in batches[start : start + 8]))
    assert await _mark(store, trial.id) == rollup_mark(steps[-1]) > 0
    assert await _stored(store, trial.id) == await _expected(store, trial.id)


async def test_a_late_batch_gets_its_coarse_blocks_where_the_mark_seen_last_is_stale(
    store: Store, trial: Trial
) -> None:
    """A batch is first sent with its finest blocks alone where the trial's mark, as this
    store last saw it, lies below its rows. Stored by another writer meanwhile, the mark has
    passed them: the statement stores nothing, the batch goes again with its coarse blocks,
    its key is taken once, and its steps are raised once it is stored."""
    pack = Pack.of_columns(list(range(4 * ROLLUP_SPAN, 4 * ROLLUP_SPAN + 10)),
                           {"loss": [0.25] * 10})
    await store.insert_pack(trial.id, "training", pack, key="new")
    assert await _mark(store, trial.id) == 3 * ROLLUP_SPAN
    # As a store that stored nothing of this trial yet (another ingest worker's) knows it.
    store._summary_marks.clear()
    late = Pack.of_columns([5, 700, ROLLUP_SPAN + 3], {"loss": [0.5, 0.75, 0.125]})
    stored = await store.insert_pack(trial.id, "training", late, key="late",
                                     steps_completed=ROLLUP_SPAN + 3)
    assert not isinstance(stored, int) and len(stored) == 3
    assert await store.insert_pack(trial.id, "training", late, key="late") == 3
    assert await _stored(store, trial.id) == await _expected(store, trial.id)
    assert {level for _, _, level, _ in await _stored(store, trial.id)} == set(LEVELS)
    assert (await store.get_trial(trial.id)).steps_completed == ROLLUP_SPAN + 3


async def test_a_curve_past_its_mark_is_drawn_as_one_summarised_eagerly(
    store: Store, experiment: Experiment
) -> None:
    """A chart of a coarse level draws the same points whether the trial's coarse blocks
    were all written as the rows came (a trial from before marks) or partly made at the read
    from its finest ones."""
    lazy, eager = [await store.create_trial(experiment_id=experiment.id, request_id=f"r{i}",
                                            hparams={}, seed=i, state="ACTIVE")
                   for i in range(2)]
    await store.update_trial(eager.id, summaries_below=1 << 62)
    rng = random.Random(9)
    steps = [s * 97 for s in range(12_000)]  # 4.4 spans
    values = [math.sin(s / 50_000) + rng.gauss(0, 0.05) for s in steps]
    values[7_000] = 40.0
    for t in (lazy, eager):
        for start in range(0, len(steps), 500):
            await store.add_metrics(t.id, "training", [
                {"steps_completed": s, "metrics": {"loss": v}}
                for s, v in zip(steps[start : start + 500], values[start : start + 500],
                                strict=True)])
    assert 0 < await _mark(store, lazy.id) < steps[-1] and await _mark(store, eager.id) == 1 << 62
    for max_points, after in ((100, None), (50, None), (100, 300_000), (10, 700_000)):
        drawn = [[(r.steps_completed, r.metrics["loss"]) for r in await store.get_metrics(
            t.id, group="training", max_points=max_points, metric="loss", after=after)]
            for t in (lazy, eager)]
        assert drawn[0] == drawn[1] and len(drawn[0]) == max_points, (max_points, after)
        if after is None or after < steps[7_000]:
            assert (steps[7_000], 40.0) in drawn[0]


async def test_a_long_curve_is_drawn_from_summaries(store: Store, trial: Trial) -> None:
    """Above RAW_ROWS_PER_POINT rows per point the blocks are read, not the rows: spikes,
    dips and both ends survive, and ``after`` still cuts exactly."""
    n, max_points = 40_000, 100
    rng = random.Random(3)
    values = [math.sin(s / 2000) + rng.gauss(0, 0.01) for s in range(n)]
    values[12_345], values[30_001] = 50.0, -50.0
    rows = [{"steps_completed": s, "metrics": {"loss": v, "acc": 1.0}}
            for s, v in enumerate(values)]
    rows[500]["metrics"]["loss"] = True  # not a number: never drawn
    for start in range(0, n, 5_000):
        await store.add_metrics(trial.id, "training", rows[start : start + 5_000])

    got = await store.get_metrics(trial.id, group="training", max_points=max_points,
                                  metric="loss")
    steps = [r.steps_completed for r in got]
    assert len(got) == max_points and steps == sorted(steps)
    assert steps[0] == 0 and steps[-1] == n - 1
    assert {12_345, 30_001} <= set(steps) and 500 not in steps

    tail = await store.get_metrics(trial.id, group="training", max_points=max_points,
                                   metric="loss", after=20_000)
    tail_steps = [r.steps_completed for r in tail]
    assert len(tail) == max_points and tail_steps[0] == 20_001 and tail_steps[-1] == n - 1
    assert 30_001 in tail_steps and 12_345 not in tail_steps


@pytest.mark.parametrize("after", [None, 7])
@pytest.mark.parametrize("rows", [RAW_ROWS_PER_POINT * 50, RAW_ROWS_PER_POINT * 200])
async def test_a_group_without_the_metric_is_thinned(
    store: Store, trial: Trial, after: int | None, rows: int
) -> None:
    """Whether the rows or the summaries are read (below and above RAW_ROWS_PER_POINT rows
    per point), a group without a number for the metric is thinned as without one."""
    await store.add_metrics(trial.id, "training", [
        {"steps_completed": s, "metrics": {"acc": 0.5, "loss": "n/a"}} for s in range(rows)])
    got = await store.get_metrics(trial.id, group="training", max_points=100, metric="loss",
                                  after=after)
    assert 90 <= len(got) <= 101 and got[-1].steps_completed == rows - 1


async def test_nan_and_infinities_are_stored_and_left_out_of_summaries(
    store: Store, trial: Trial
) -> None:
    nan, inf = float("nan"), float("inf")
    await store.add_metrics(trial.id, "validation", [
        {"steps_completed": s, "metrics": {"loss": [0.5, nan, inf, -inf, 0.25][s], "acc": 0.1 * s}}
        for s in range(5)])
    rows = await store.get_metrics(trial.id, group="validation")
    # Kept as Determined's strings, the same on both databases.
    assert [r.metrics["loss"] for r in rows] == [0.5, "NaN", "Infinity", "-Infinity", 0.25]
    async with store._engine.connect() as conn:
        raw = await conn.execute(
            select(MetricSummary.__table__).where(MetricSummary.trial_id == trial.id,
                                                  MetricSummary.name == "loss",
                                                  MetricSummary.level == 6))
        (block,) = raw.mappings().all()
    # The other points are summarised as if the non-finite ones were not there.
    assert (block["count"], block["min_value"], block["max_value"]) == (2, 0.25, 0.5)
    assert (block["first_step"], block["last_step"]) == (0, 4)
    assert await _stored(store, trial.id) == await _expected(store, trial.id)
    # A chart of the curve draws the finite points only.
    drawn = await store.get_metrics(trial.id, group="validation", max_points=2, metric="loss")
    assert all(r.metrics["loss"] in (0.5, 0.25) for r in drawn if r.steps_completed in (0, 4))
    # A NaN in a trial's own validation fields survives too.
    await store.update_trial(trial.id, latest_validation={"steps_completed": 1,
                                                          "metrics": {"loss": nan}})
    again = await store.get_trial(trial.id)
    assert again is not None and again.latest_validation == {
        "steps_completed": 1, "metrics": {"loss": "NaN"}}
