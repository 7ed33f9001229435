"""Metrics: batch inserts, ordering, filters and downsampling in the database."""

from __future__ import annotations

import asyncio
import datetime as dt
import math

import pytest

from det_hub.store import NotFound, Store, Trial
from det_hub.store.packing import Pack


def _rows(steps: range, **extra: float) -> list[dict]:
    return [{"steps_completed": s, "metrics": {"loss": 1.0 / (s + 1), **extra}} for s in steps]


def _expected_downsample(steps: list[int], max_points: int) -> list[int]:
    """What downsampling keeps of one group's ordered steps: every k-th row and the last."""
    n = len(steps)
    if n <= max_points:
        return steps
    k = math.ceil(n / max_points)
    return [s for i, s in enumerate(steps) if i % k == 0 or i == n - 1]


async def test_insert_ten_thousand_and_downsample(store: Store, trial: Trial) -> None:
    assert await store.add_metrics(trial.id, "training", _rows(range(10_000))) == 10_000

    every = await store.get_metrics(trial.id)
    assert len(every) == 10_000
    assert [m.steps_completed for m in every] == list(range(10_000))
    assert every[5].metrics == {"loss": 1.0 / 6}
    assert (every[5].group, every[5].trial_id) == ("training", trial.id)
    assert every[5].report_time.utcoffset() == dt.timedelta(0)

    sampled = await store.get_metrics(trial.id, max_points=100)
    steps = [m.steps_completed for m in sampled]
    # k = 100: rows 0, 100, ..., 9900, and the last row kept as well.
    assert len(sampled) == 101
    assert steps == [*range(0, 10_000, 100), 9_999]
    assert steps[0] == 0 and steps[-1] == 9_999
    assert steps == sorted(steps)
    assert sampled[-1].metrics == {"loss": 1.0 / 10_000}

    after = await store.get_metrics(trial.id, after=9_000)
    assert [m.steps_completed for m in after] == list(range(9_001, 10_000))
    after_sampled = await store.get_metrics(trial.id, after=9_000, max_points=10)
    assert [m.steps_completed for m in after_sampled] == _expected_downsample(
        list(range(9_001, 10_000)), 10
    )


@pytest.mark.parametrize(
    "n,max_points", [(1, 1), (5, 1), (10, 3), (99, 10), (100, 10), (101, 10), (7, 100)]
)
async def test_downsample_matches_reference(
    store: Store, trial: Trial, n: int, max_points: int
) -> None:
    await store.add_metrics(trial.id, "training", _rows(range(n)))
    got = await store.get_metrics(trial.id, max_points=max_points)
    assert [m.steps_completed for m in got] == _expected_downsample(list(range(n)), max_points)
    assert len(got) <= max_points + 1


async def test_groups_are_downsampled_separately(store: Store, trial: Trial) -> None:
    await store.add_metrics(trial.id, "training", _rows(range(0, 1_000)))
    await store.add_metrics(trial.id, "validation", _rows(range(0, 1_000, 100)))

    both = await store.get_metrics(trial.id, max_points=50)
    training = [m.steps_completed for m in both if m.group == "training"]
    validation = [m.steps_completed for m in both if m.group == "validation"]
    assert training == _expected_downsample(list(range(1_000)), 50)
    assert validation == list(range(0, 1_000, 100))  # 10 rows: under the limit, all kept
    assert [(m.steps_completed, m.id) for m in both] == sorted(
        (m.steps_completed, m.id) for m in both
    )

    only_val = await store.get_metrics(trial.id, group="validation")
    assert [m.steps_completed for m in only_val] == list(range(0, 1_000, 100))
    assert {m.group for m in only_val} == {"validation"}
    assert await store.get_metrics(trial.id, group="nope", max_points=5) == []
    with pytest.raises(ValueError):
        await store.get_metrics(trial.id, max_points=0)


async def test_ties_keep_insertion_order_and_latest(store: Store, trial: Trial) -> None:
    when = dt.datetime(2026, 5, 1, 8, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    await store.add_metrics(
        trial.id,
        "validation",
        [
            {"steps_completed": 10, "metrics": {"v": 1}, "report_time": when},
            {"steps_completed": 5, "metrics": {"v": 2}},
            {"steps_completed": 10, "metrics": {"v": 3}},
        ],
    )
    got = await store.get_metrics(trial.id, group="validation")
    assert [m.metrics["v"] for m in got] == [2, 1, 3]
    assert got[1].report_time == when
    assert got[1].report_time.utcoffset() == dt.timedelta(0)
    latest = await store.latest_metrics(trial.id, "validation")
    assert latest is not None and latest.metrics == {"v": 3}
    assert await store.latest_metrics(trial.id, "training") is None


async def test_add_metrics_edge_cases(store: Store, trial: Trial) -> None:
    assert await store.add_metrics(trial.id, "training", []) == 0
    with pytest.raises(NotFound):
        await store.add_metrics(9999, "training", _rows(range(3)))
    assert await store.get_metrics(trial.id) == []


async def _fill_million(store: Store, trial_id: int, n: int) -> None:
    """A million rows as a trial reports them: batches of 10,000, packed."""
    for start in range(1, n + 1, 10_000):
        steps = list(range(start, min(start + 10_000, n + 1)))
        await store.insert_pack(trial_id, "training",
                                Pack.of_columns(steps, {"loss": [1.0 / s for s in steps]}))


@pytest.mark.slow
async def test_million_points_downsample_to_a_thousand(store: Store, trial: Trial) -> None:
    n = 1_000_000
    await _fill_million(store, trial.id, n)
    await store.add_metrics(trial.id, "validation", _rows(range(0, n, 10_000)))

    got = await store.get_metrics(trial.id, group="training", max_points=1_000)
    steps = [m.steps_completed for m in got]
    assert len(got) == 1_001  # k = 1000: 1000 evenly spaced rows and the last
    assert steps[0] == 1 and steps[-1] == n
    assert steps[:3] == [1, 1_001, 2_001]
    assert steps == sorted(steps)
    assert got[-1].metrics["loss"] == pytest.approx(1.0 / n)
    assert got[-1].report_time.tzinfo is not None

    latest = await store.latest_metrics(trial.id, "training")
    assert latest is not None and latest.steps_completed == n
    tail = await store.get_metrics(trial.id, group="training", after=n - 5)
    assert [m.steps_completed for m in tail] == list(range(n - 4, n + 1))


async def test_a_new_run_rolls_back_rows_past_its_start_in_every_group(
        store: Store, trial: Trial) -> None:
    """Rows an earlier run reported past the step a new run starts from leave every read and
    are kept apart, with the run that reported them and the run that rolled them back."""
    assert await store.start_trial_run(trial.id, 0) == (1, 0)
    for group in ("training", "validation"):
        await store.add_metrics(trial.id, group, [
            {"steps_completed": s, "metrics": {"loss": 1.0 / s}} for s in (10, 20, 30)])
    assert await store.start_trial_run(trial.id, 20) == (2, 2)
    for group in ("training", "validation"):
        rows = await store.get_metrics(trial.id, group=group)
        assert [(r.steps_completed, r.trial_run) for r in rows] == [(10, 1), (20, 1)]
        assert [r.steps_completed for r in await store.get_metrics(
            trial.id, group=group, max_points=2)] == [10, 20]
    assert await store.latest_metrics(trial.id, "training") is not None
    assert (await store.latest_metrics(trial.id, "training")).steps_completed == 20
    [gone_t, gone_v] = sorted(await store.rolled_back_metrics(trial.id), key=lambda r: r.group)
    assert (gone_t.group, gone_t.steps_completed, gone_t.trial_run,
            gone_t.rolled_back_by_run) == ("training", 30, 1, 2)
    assert gone_v.metrics == {"loss": 1.0 / 30} and gone_v.report_time.tzinfo is not None

    # Run 2 reports step 30 again: one row of it counts.
    await store.add_metrics(trial.id, "training", [{"steps_completed": 30, "metrics": {}}])
    rows = await store.get_metrics(trial.id, group="training")
    assert [(r.steps_completed, r.trial_run) for r in rows] == [(10, 1), (20, 1), (30, 2)]
    assert await store.start_trial_run(trial.id, 30) == (3, 0)
    with pytest.raises(NotFound):
        await store.start_trial_run(trial.id + 1000, 0)


async def test_ids_are_never_given_twice_and_a_step_may_be_rolled_back_again(
        store: Store, trial: Trial) -> None:
    """A live stream resumes after the last id it sent: a row stored after a rollback gets
    an id above every id ever given, on SQLite too; and the same steps can be rolled back by
    run after run (a trial that fails twice past the same checkpoint)."""
    await store.start_trial_run(trial.id, 0)
    first = await store.insert_metrics(trial.id, "training", _rows(range(1, 6)))
    assert isinstance(first, list)
    highest = max(r["id"] for r in first)
    for run in (2, 3):
        assert await store.start_trial_run(trial.id, 2) == (run, 3)
        again = await store.insert_metrics(trial.id, "training", _rows(range(3, 6)))
        assert isinstance(again, list) and min(r["id"] for r in again) > highest
        highest = max(r["id"] for r in again)
    gone = await store.rolled_back_metrics(trial.id)
    assert [(r.steps_completed, r.trial_run, r.rolled_back_by_run) for r in gone] == [
        (3, 1, 2), (4, 1, 2), (5, 1, 2), (3, 2, 3), (4, 2, 3), (5, 2, 3)]
    assert [r.steps_completed for r in await store.get_metrics(trial.id)] == [1, 2, 3, 4, 5]


async def test_a_batch_stored_again_under_its_key_stores_nothing(
    store: Store, trial: Trial
) -> None:
    first = await store.insert_metrics(trial.id, "training", _rows(range(3)), key="run:1")
    assert isinstance(first, list) and len(first) == 3
    # The same batch again answers how many rows its first copy stored, and writes none.
    assert await store.insert_metrics(trial.id, "training", _rows(range(3)), key="run:1") == 3
    second = await store.insert_metrics(trial.id, "training", _rows(range(3, 5)), key="run:2")
    assert isinstance(second, list) and len(second) == 2
    steps = [m.steps_completed for m in await store.get_metrics(trial.id)]
    assert steps == [0, 1, 2, 3, 4]


async def test_copies_of_a_batch_arriving_together_are_stored_once(
    store: Store, trial: Trial
) -> None:
    copies = await asyncio.gather(*[
        store.insert_metrics(trial.id, "training", _rows(range(50)), key="run:7")
        for _ in range(6)])
    assert sorted(isinstance(c, list) for c in copies) == [False] * 5 + [True]
    assert [c for c in copies if isinstance(c, int)] == [50] * 5
    assert len(await store.get_metrics(trial.id)) == 50
    # A key is the trial's own: another trial may use it.
    other = await store.create_trial(experiment_id=trial.experiment_id, request_id="req-1",
                                     hparams={}, seed=1, state=trial.state)
    assert isinstance(await store.insert_metrics(other.id, "training", _rows(range(2)),
                                                 key="run:7"), list)
