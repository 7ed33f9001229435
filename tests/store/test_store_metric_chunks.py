"""Metric chunks: a batch stored as one row of packed columns, read back as rows or columns."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import pytest

from det_hub import nonfinite
from det_hub.store import NotFound, Store, Trial
from det_hub.store import metric_writes as store_metrics
from det_hub.store.metric_writes import IngestTarget, StoredNotice
from det_hub.store.packing import ROW_BITS, Pack, by_step, chunk_rows, thin, thin_chunks
from det_hub.store.summaries import summarize


async def test_columns_and_rows_store_the_same_rows(store: Store, trial: Trial) -> None:
    """A batch of columns reads back as the rows it holds: values as given (NaN and
    infinities as Determined's strings, nested values whole), each row with an id of its
    own, and the report times given."""
    when = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    pack = Pack.of_columns([1, 2, 3], {"loss": [0.5, math.nan, math.inf],
                                       "conf": [{"a": [1]}, None, True]})
    pack.times = [int(when.timestamp() * 1e6) + i for i in range(3)]
    stored = await store.insert_pack(trial.id, "training", pack)
    assert not isinstance(stored, int) and len(stored) == 3
    rows = await store.get_metrics(trial.id)
    assert [r.metrics for r in rows] == [
        {"loss": 0.5, "conf": {"a": [1]}}, {"loss": "NaN", "conf": None},
        {"loss": "Infinity", "conf": True}]
    assert [r.id for r in rows] == [r.id for r in stored.rows()]
    assert len({r.id for r in rows}) == 3 and rows[0].id >> ROW_BITS == rows[2].id >> ROW_BITS
    assert rows[2].report_time == when + dt.timedelta(microseconds=2)

    # Rows whose metrics differ are kept row by row, and read back the same way.
    await store.add_metrics(trial.id, "training", [
        {"steps_completed": 4, "metrics": {"loss": 0.25}},
        {"steps_completed": 5, "metrics": {"acc": 0.75}}])
    later = await store.get_metrics(trial.id, after=3)
    assert [(r.steps_completed, r.metrics) for r in later] == [
        (4, {"loss": 0.25}), (5, {"acc": 0.75})]
    assert min(r.id for r in later) > max(r.id for r in rows)


async def test_whole_numbers_past_64_bits_are_kept(store: Store, trial: Trial) -> None:
    """JSON has no bound on a whole number; orjson writes only 64 bits, so such a batch is
    written and read through json instead, and kept exactly."""
    huge = 2 ** 70 + 1
    await store.insert_pack(trial.id, "training", Pack.of_columns([1], {"n": [huge]}))
    [row] = await store.get_metrics(trial.id)
    assert row.metrics == {"n": huge}
    columns = await store.get_metric_columns(trial.id)
    assert columns["training"].metrics == {"n": [huge]}


async def test_columns_read_every_row_in_order(store: Store, trial: Trial) -> None:
    """The bulk read joins chunks in step order (even when they arrive out of order or
    overlap), leaves a missing metric as None, and keeps to ``after`` and ``names``."""
    await store.insert_pack(trial.id, "training", Pack.of_columns(
        [10, 11, 12], {"loss": [1.0, 1.1, 1.2]}))
    await store.insert_pack(trial.id, "training", Pack.of_columns(
        [0, 1, 2], {"loss": [0.0, 0.1, 0.2], "lr": [9, 9, 9]}))
    await store.insert_pack(trial.id, "training", Pack.of_columns(
        [2, 13], {"loss": [0.25, 1.3]}))
    await store.insert_pack(trial.id, "validation", Pack.of_columns([12], {"loss": [5.0]}))

    groups = await store.get_metric_columns(trial.id)
    training = groups["training"]
    assert training.steps == [0, 1, 2, 2, 10, 11, 12, 13]
    assert training.metrics["loss"] == [0.0, 0.1, 0.2, 0.25, 1.0, 1.1, 1.2, 1.3]
    assert training.metrics["lr"] == [9, 9, 9, None, None, None, None, None]
    rows = await store.get_metrics(trial.id, group="training")
    assert training.ids == [r.id for r in rows]
    assert groups["validation"].steps == [12]

    only = await store.get_metric_columns(trial.id, group="training", names=["lr"], after=1)
    assert list(only) == ["training"]
    assert only["training"].steps == [2, 2, 10, 11, 12, 13]
    assert only["training"].metrics == {"lr": [9, None, None, None, None, None]}
    assert await store.get_metric_columns(trial.id, group="testing") == {}


async def test_a_large_batch_is_stored_as_several_chunks(
        store: Store, trial: Trial, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_metrics, "MAX_CHUNK_ROWS", 4)
    pack = Pack.of_columns(list(range(10)), {"loss": [float(i) for i in range(10)]})
    stored = await store.insert_pack(trial.id, "training", pack, key="big")
    assert not isinstance(stored, int) and [len(p) for _, p in stored.chunks] == [4, 4, 2]
    # A second copy under the same key stores nothing and is told the first copy's rows.
    assert await store.insert_pack(trial.id, "training", pack, key="big") == 10
    rows = await store.get_metrics(trial.id)
    assert [r.steps_completed for r in rows] == list(range(10))
    assert len({r.id for r in rows}) == 10


async def test_summaries_of_columns_match_the_rows(store: Store, trial: Trial) -> None:
    """Block summaries written for a batch of columns are those of its rows, so a
    downsampled read of a long curve draws from them."""
    steps = list(range(5_000))
    await store.insert_pack(trial.id, "training", Pack.of_columns(
        steps, {"loss": [math.sin(s / 50) for s in steps], "flag": [True] * 5_000}))
    rows = await store.get_metrics(trial.id)
    want = summarize((r.id, r.steps_completed, r.metrics) for r in rows)
    got = await store.get_metrics(trial.id, max_points=10, metric="loss")
    assert len(got) == 10 and got[0].steps_completed == 0 and got[-1].steps_completed == 4_999
    assert {k[0] for k in want} == {"loss"}
    # 5,000 rows over 10 points reads the rows themselves (RAW_ROWS_PER_POINT = 64): LTTB
    # keeps the curve's extremes.
    assert min(r.metrics["loss"] for r in got) < -0.99 and max(
        r.metrics["loss"] for r in got) > 0.99


async def test_a_rollback_cuts_a_chunk_and_keeps_its_earlier_rows_ids(
        store: Store, trial: Trial) -> None:
    await store.start_trial_run(trial.id, 0)
    await store.insert_pack(trial.id, "training", Pack.of_columns(
        [1, 2, 3, 4], {"loss": [1.0, 2.0, 3.0, 4.0]}))
    before = await store.get_metrics(trial.id)
    assert await store.start_trial_run(trial.id, 2) == (2, 2)
    after = await store.get_metrics(trial.id)
    assert [(r.id, r.steps_completed, r.trial_run) for r in after] == [
        (r.id, r.steps_completed, 1) for r in before[:2]]
    assert [r.id for r in await store.rolled_back_metrics(trial.id)] == [
        r.id for r in before[2:]]
    columns = (await store.get_metric_columns(trial.id))["training"]
    assert columns.ids == [r.id for r in before[:2]]
    # The run after it numbers its rows above every id given.
    stored = await store.insert_pack(trial.id, "training", Pack.of_columns([3], {"loss": [0.0]}))
    assert not isinstance(stored, int) and stored.rows()[0].id > before[-1].id
    assert [r.id for r in await store.experiment_metrics_after(trial.experiment_id, 0, 10)] \
        == [*columns.ids, stored.rows()[0].id]


@dataclasses.dataclass
class _Chunk:
    id: int
    payload: bytes
    trial_id: int = 1
    group: str = "training"
    trial_run: int = 0
    report_time: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _chunks_of(spans: list[list[int]], ids: list[list[int]] | None = None) -> list[_Chunk]:
    """Chunks 1, 2, ... holding rows at these steps (their own ids, or the ids given)."""
    return [_Chunk(n + 1, Pack.of_columns(steps, {"loss": [s / 7 for s in steps]}).encode()
                   if ids is None else Pack(steps, columns={"loss": [s / 7 for s in steps]},
                                            ids=ids[n]).encode())
            for n, steps in enumerate(spans)]


@pytest.mark.parametrize("spans", [
    [list(range(0, 500)), list(range(500, 1300)), list(range(1300, 1301))],  # in order
    [list(range(500, 1300)), list(range(0, 500))],  # stored out of order, still disjoint
    [list(range(0, 600)), list(range(400, 1000))],  # overlapping: every row is sorted
    [[5, 3, 9, 1] * 50, list(range(10, 300))],  # a chunk whose steps do not ascend
    [list(range(0, 300)), list(range(299, 700))],  # one step in both chunks
])
@pytest.mark.parametrize("after", [None, -1, 250, 699, 5000])
@pytest.mark.parametrize("max_points", [1, 7, 100, 10_000])
def test_thinning_chunks_keeps_what_thinning_every_row_keeps(
        spans: list[list[int]], after: int | None, max_points: int) -> None:
    chunks = _chunks_of(spans)
    every = by_step([r for c in chunks for r in chunk_rows(
        c, None if after is None else lambda step: step > after)])
    assert [(r.id, r.steps_completed, r.metrics) for r in thin_chunks(chunks, max_points, after)
            ] == [(r.id, r.steps_completed, r.metrics) for r in thin(every, max_points)]


def test_thinning_chunks_that_list_their_rows_ids() -> None:
    chunks = _chunks_of([list(range(0, 50)), list(range(50, 90))],
                        ids=[list(range(100, 150)), [7, *range(200, 239)]])
    every = by_step([r for c in chunks for r in chunk_rows(c)])
    for max_points in (3, 20, 100):
        assert [r.id for r in thin_chunks(chunks, max_points)] == [
            r.id for r in thin(every, max_points)]
    assert [r.id for r in chunk_rows(chunks[1], ids={7, 205, 999})] == [7, 205]
    assert [r.id for r in chunk_rows(chunks[0], lambda s: s > 47, ids={100, 148, 149})] == [
        148, 149]

def test_fast_loads_reads_what_json_reads() -> None:
    """orjson where it reads JSON as json does; json for whole numbers past 64 bits (which
    orjson would make floats) and for Python's bare NaN, which orjson refuses."""
    assert nonfinite.fast_loads(b'{"a": [1, 2.5, "x", null]}') == {"a": [1, 2.5, "x", None]}
    assert nonfinite.fast_loads(b"[18446744073709551616, -9223372036854775809]") == [
        2 ** 64, -(2 ** 63) - 1]
    assert nonfinite.fast_loads(b"[18446744073709551615]") == [2 ** 64 - 1]
    assert math.isnan(nonfinite.fast_loads(b"[NaN]")[0])
    with pytest.raises(ValueError):
        nonfinite.fast_loads(b"{not json")


async def test_a_token_guarded_batch_is_stored_only_for_a_running_trial(
        store: Store, trial: Trial) -> None:
    pack = Pack.of_columns([1, 2], {"loss": [1.0, 0.5]})
    with pytest.raises(NotFound):
        await store.insert_pack(trial.id, "training", pack, key="k", token_hash="no-such")
    await store.create_allocation(id=f"{trial.id}.0", trial_id=trial.id, token_hash="open",
                                  slots=1, state="RUNNING")
    stored = await store.insert_pack(trial.id, "training", pack, key="k", token_hash="open",
                                     steps_completed=2)
    assert not isinstance(stored, int) and len(stored) == 2
    # The refused attempt claimed no key: the batch went in once, and a copy is a repeat.
    assert await store.insert_pack(trial.id, "training", pack, key="k",
                                   token_hash="open") == 2
    assert (await store.get_trial(trial.id)).steps_completed == 2
    assert await store.ingest_target("open") == IngestTarget(trial.id, trial.experiment_id,
                                                             "ACTIVE")
    await store.update_trial(trial.id, state="COMPLETED")
    with pytest.raises(NotFound):
        await store.insert_pack(trial.id, "training", Pack.of_columns([3], {"loss": [0.1]}),
                                token_hash="open")
    await store.update_allocation(f"{trial.id}.0", ended_at=dt.datetime.now(dt.UTC))
    assert await store.ingest_target("open") is None
    assert [r.steps_completed for r in await store.get_metrics(trial.id)] == [1, 2]


@pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres)],
                         indirect=True)
async def test_postgresql_announces_each_stored_chunk_at_commit(
        store: Store, trial: Trial, monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    from det_hub.service.ingest import libpq_url

    listener = await psycopg.AsyncConnection.connect(libpq_url(store.url), autocommit=True)
    try:
        await listener.execute("LISTEN test_channel")
        monkeypatch.setattr(store_metrics, "MAX_CHUNK_ROWS", 2)
        stored = await store.insert_pack(trial.id, "my group", Pack.of_columns(
            [5, 6, 7], {"loss": [1.0, 2.0, 3.0]}), key="k", notify="test_channel")
        assert not isinstance(stored, int)
        # A repeat stores and announces nothing.
        assert await store.insert_pack(trial.id, "my group", Pack.of_columns(
            [5], {"loss": [1.0]}), key="k", notify="test_channel") == 3
        heard = [StoredNotice.parse(n.payload) async for n in listener.notifies(timeout=1.0)]
    finally:
        await listener.close()
    assert heard == [StoredNotice(trial.id, stored.chunks[0][0], "my group", 6),
                     StoredNotice(trial.id, stored.chunks[1][0], "my group", 7)]
    rows = await store.chunk_rows([n.chunk_id for n in heard])
    assert [r.steps_completed for r in rows] == [5, 6, 7]
