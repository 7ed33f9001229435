"""det_hub.data: record files, the per-host cache, sharded resumable batches, S3 datasets."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
from pathlib import Path

import pytest

from det_hub.data import (
    FileSource,
    HostCache,
    RecordDataset,
    RecordFile,
    RecordFormatError,
    RecordWriter,
    batches,
    source_for,
    write_records,
)
from det_hub.data._sources import Fetched
from det_hub.testing_s3 import SeaweedS3


def _records(n: int) -> list[bytes]:
    # Different lengths, empty ones included, so offsets are exercised.
    return [bytes([i % 251]) * (i % 7) + str(i).encode() * (i % 3) for i in range(n)]


class CountingSource(FileSource):
    """A file source that notes every download in a log file (shared between processes)."""

    def __init__(self, path: Path, log: Path) -> None:
        super().__init__(path)
        self.log = log

    def download(self, dst: Path, fetched: Fetched | None = None) -> None:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")
        super().download(dst, fetched)


class ShortSource(FileSource):
    """Delivers one byte less than the file has: a broken transfer."""

    def download(self, dst: Path, fetched: Fetched | None = None) -> None:
        dst.write_bytes(self.path.read_bytes()[:-1])


# -- record files ----------------------------------------------------------------------------


def test_records_round_trip_with_random_access(tmp_path: Path) -> None:
    records = _records(1000)
    assert write_records(tmp_path / "a.rec", records) == 1000
    f = RecordFile(tmp_path / "a.rec")
    assert len(f) == 1000
    for i in (0, 1, 7, 999, 500, -1):
        assert f[i] == records[i]
    assert list(f) == records
    assert f.nbytes == sum(map(len, records))
    assert f.span(2) == (8 + len(records[0]) + len(records[1]), 8 + sum(map(len, records[:3])))
    with pytest.raises(IndexError, match="record 1000 of 1000"):
        f[1000]
    # DataLoader workers get a pickled dataset and map the file themselves.
    again = pickle.loads(pickle.dumps(f))
    assert again[123] == records[123]
    f.close()

    write_records(tmp_path / "empty.rec", [])
    assert len(RecordFile(tmp_path / "empty.rec")) == 0


def test_a_failed_write_leaves_nothing_and_bad_files_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "b.rec"
    with pytest.raises(RuntimeError), RecordWriter(target) as writer:
        writer.write(b"first")
        raise RuntimeError("the producer failed")
    assert not target.exists() and not list(tmp_path.iterdir())

    write_records(target, _records(50))
    whole = target.read_bytes()
    (tmp_path / "cut.rec").write_bytes(whole[:-3])
    with pytest.raises(RecordFormatError, match="cut.rec: not a record file"):
        RecordFile(tmp_path / "cut.rec")
    (tmp_path / "tiny.rec").write_bytes(b"xy")
    with pytest.raises(RecordFormatError, match="too short"):
        RecordFile(tmp_path / "tiny.rec")
    (tmp_path / "other.bin").write_bytes(os.urandom(200))
    with pytest.raises(RecordFormatError, match="not a record file"):
        RecordFile(tmp_path / "other.bin")


# -- the host cache --------------------------------------------------------------------------


def test_the_cache_fetches_once_and_again_for_a_new_version(tmp_path: Path) -> None:
    remote = tmp_path / "shared" / "train.rec"
    remote.parent.mkdir()
    write_records(remote, _records(100))
    log = tmp_path / "downloads.log"
    cache = HostCache(tmp_path / "cache")
    seen: list[tuple[int, int]] = []

    first = RecordDataset(CountingSource(remote, log), cache=cache,
                          progress=lambda done, total: seen.append((done, total)))
    second = RecordDataset(CountingSource(remote, log), cache=cache)
    assert first.local_path == second.local_path and first.local_path.parent.parent == cache.root
    assert len(log.read_text().splitlines()) == 1
    assert seen and seen[-1] == (remote.stat().st_size, remote.stat().st_size)
    assert second[5] == _records(100)[5] and len(second) == 100

    write_records(remote, _records(120))  # the dataset is rewritten: a new version
    third = RecordDataset(CountingSource(remote, log), cache=cache)
    assert len(third) == 120 and third.local_path != first.local_path
    assert len(log.read_text().splitlines()) == 2
    assert cache.clear() == 2 and not list(cache.root.iterdir())


def _fetch_in_process(remote: str, log: str, cache: str, out: mp.Queue) -> None:
    dataset = RecordDataset(CountingSource(Path(remote), Path(log)), cache=HostCache(cache))
    out.put((str(dataset.local_path), dataset[3]))


def test_ranks_on_one_host_share_one_download(tmp_path: Path) -> None:
    remote = tmp_path / "train.rec"
    write_records(remote, [os.urandom(4096) for _ in range(2000)])  # 8 MB: fetches overlap
    log = tmp_path / "downloads.log"
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_fetch_in_process,
                         args=(str(remote), str(log), str(tmp_path / "cache"), out))
             for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert len({path for path, _ in results}) == 1
    assert {record for _, record in results} == {RecordFile(remote)[3]}
    assert len(log.read_text().splitlines()) == 1


def test_a_short_download_is_never_trusted(tmp_path: Path) -> None:
    remote = tmp_path / "train.rec"
    write_records(remote, _records(10))
    cache = HostCache(tmp_path / "cache")
    with pytest.raises(OSError, match=r"fetched \d+ bytes, the source has \d+"):
        cache.fetch(ShortSource(remote))
    assert [p.name for p in cache.root.rglob("*") if p.is_file()] == [".lock"]
    assert RecordDataset(remote, cache=cache)[9] == _records(10)[9]


def test_locations(tmp_path: Path) -> None:
    assert isinstance(source_for(tmp_path / "x.rec"), FileSource)
    assert source_for(f"file://{tmp_path}/x.rec").url == (tmp_path / "x.rec").as_uri()
    with pytest.raises(ValueError, match="s3://BUCKET/KEY"):
        source_for("s3://bucket-only")
    with pytest.raises(ValueError, match="not gs://"):
        source_for("gs://bucket/key")
    with pytest.raises(FileNotFoundError):
        RecordDataset(tmp_path / "missing.rec", cache=HostCache(tmp_path / "cache"))


# -- batches ---------------------------------------------------------------------------------


def test_ranks_split_every_batch_and_resume_exactly(tmp_path: Path) -> None:
    write_records(tmp_path / "n.rec", [str(i).encode() for i in range(103)])
    data = RecordDataset(tmp_path / "n.rec", lambda b: int(b), cache=HostCache(tmp_path / "c"))

    global_batches = list(batches(data, 8, seed=5))
    assert len(global_batches) == 13
    assert sorted(i for b in global_batches for i in b) == list(range(103))
    ranks = [list(batches(data, 4, rank=r, num_replicas=2, seed=5)) for r in range(2)]
    # Two ranks of batch 4 see the same global batches as one rank of batch 8.
    for i, global_batch in enumerate(global_batches[:-1]):
        assert ranks[0][i] + ranks[1][i] == global_batch

    # Resume after 5 global batches of epoch 1: the same batches as an uninterrupted run.
    uninterrupted = batches(data, 8, seed=5, repeat=True)
    expected = [next(uninterrupted) for _ in range(30)]
    resumed = batches(data, 8, seed=5, repeat=True, skip=13 + 5)
    assert [next(resumed) for _ in range(12)] == expected[18:30]
    # Each epoch is shuffled differently.
    assert expected[:13] != expected[13:26]


# -- from S3 ---------------------------------------------------------------------------------


def test_a_dataset_in_s3_is_fetched_once_and_read_locally(
    tmp_path: Path, s3_server: SeaweedS3, s3_bucket: str
) -> None:
    records = [pickle.dumps({"x": list(range(i % 50)), "y": i}) for i in range(5000)]
    local = tmp_path / "train.rec"
    write_records(local, records)
    s3_server.client().upload_file(str(local), s3_bucket, "datasets/train.rec")
    settings = {"endpoint_url": s3_server.endpoint_url, "access_key": s3_server.access_key,
                "secret_key": s3_server.secret_key}
    cache = HostCache(tmp_path / "cache")

    seen: list[int] = []
    data = RecordDataset(f"s3://{s3_bucket}/datasets/train.rec", pickle.loads, s3=settings,
                         cache=cache, progress=lambda done, total: seen.append(done))
    assert len(data) == 5000 and data[4321] == {"x": list(range(4321 % 50)), "y": 4321}
    assert seen[-1] == local.stat().st_size
    assert data.local_path.read_bytes() == local.read_bytes()

    # A second reader on the host reads the cache: no transfer, even with the server gone
    # from the picture for reads (only the size and ETag are asked).
    again = RecordDataset(f"s3://{s3_bucket}/datasets/train.rec", pickle.loads, s3=settings,
                          cache=cache, progress=lambda done, total: seen.append(-1))
    assert again.local_path == data.local_path and -1 not in seen

    with pytest.raises(FileNotFoundError, match="no such object"):
        RecordDataset(f"s3://{s3_bucket}/datasets/missing.rec", s3=settings, cache=cache)
