"""Fetching checkpoints with DownloadMode and ``selector``: every rank on its own
(NoSharedDownload), or the local workers of a node sharing one fetch of the union of what
their selectors accept (LocalWorkersShareDownload), over threads playing ranks and over a real
two-rank torch.distributed (gloo) job."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TOKEN, TRIAL_ID, FakeMaster
from download_worker import CountingStorage

import det_hub.core as core
from det_hub.core._checkpoint import CheckpointContext, DownloadMode
from det_hub.core._http import MasterSession
from det_hub.storage import CheckpointIntegrityError, SharedFSStorage

REPO = Path(__file__).resolve().parents[2]
FILES = {"a.bin": 3, "c.txt": 2, "sub/b.bin": 5}
SHARED = DownloadMode.LocalWorkersShareDownload


def is_bin(name: str) -> bool:
    return name.endswith(".bin")


def files_under(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size
            for p in sorted(root.rglob("*")) if p.is_file()}


def write_files(path: Path) -> None:
    for name, size in FILES.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(name[0].encode() * size)


def save(storage: SharedFSStorage) -> str:
    sid = str(uuid.uuid4())
    with storage.store_path(sid) as path:
        write_files(path)
    return sid


class ThreadCollectives:
    """The object collectives of one of several ranks played by threads of this process. A
    rank left waiting breaks the barrier after a few seconds instead of hanging the test."""

    def __init__(self, rank: int, slots: list[Any], barrier: threading.Barrier) -> None:
        self.rank, self._slots, self._barrier = rank, slots, barrier

    def allgather(self, obj: Any) -> list[Any]:
        self._slots[self.rank] = obj
        self._barrier.wait()
        out = list(self._slots)
        self._barrier.wait()
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        out = self.allgather(obj)
        return out if self.rank == 0 else None

    def broadcast(self, obj: Any) -> Any:
        return self.allgather(obj)[0]


class NoCollectives:
    """Collectives that must not be used."""

    def allgather(self, obj: Any) -> list[Any]:
        raise AssertionError("a collective was used")

    gather = broadcast = allgather


def one_node(size: int = 2) -> list[core.DistributedContext]:
    """The distributed contexts of ``size`` local ranks of one node, played by threads."""
    slots: list[Any] = [None] * size
    barrier = threading.Barrier(size, timeout=10)
    contexts = []
    for rank in range(size):
        coll = ThreadCollectives(rank, slots, barrier)
        contexts.append(core.DistributedContext(
            rank=rank, size=size, local_rank=rank, local_size=size, _global=coll, _local=coll))
    return contexts


def on_ranks(work: Callable[[int, core.DistributedContext], Any], size: int = 2) -> list[Any]:
    """Run ``work(rank, distributed)`` on every rank at once; each rank's answer, or what it
    raised."""
    results: list[Any] = [None] * size

    def run(rank: int, dist: core.DistributedContext) -> None:
        try:
            results[rank] = work(rank, dist)
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(r, d)) for r, d in enumerate(one_node(size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hangs"
    return results


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory temporary directories are made in, for this test."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


# --- one rank at a time --------------------------------------------------------------------


def test_no_shared_download_with_a_selector_needs_no_other_rank(
        tmp_path: Path, temp_root: Path) -> None:
    calls: list[tuple[int, str]] = []
    storage = CountingStorage(tmp_path / "store", calls, rank=1)
    sid = save(storage)
    # Rank 1 of two on this node fetches alone: any collective would fail.
    dist = core.DistributedContext(rank=1, size=2, local_rank=1, local_size=2,
                                   _global=NoCollectives(), _local=NoCollectives())
    ckpt = CheckpointContext(distributed=dist, storage=storage)
    with ckpt.restore_path(sid, DownloadMode.NoSharedDownload, selector=is_bin) as path:
        assert path.parent == temp_root
        assert files_under(path) == {"a.bin": 3, "sub/b.bin": 5}
    assert not path.exists()
    ckpt.download(sid, tmp_path / "dl", "NO_SHARED_DOWNLOAD", selector=lambda n: n == "c.txt")
    assert files_under(tmp_path / "dl") == {"c.txt": 2}
    with ckpt.restore_path(sid, download_mode="NO_SHARED_DOWNLOAD") as whole:
        assert whole == tmp_path / "store" / sid  # no selector: the stored directory itself
    assert calls == [(1, "restore_path"), (1, "download"), (1, "restore_path")]


def test_a_bad_download_mode_is_refused_by_name(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    sid = save(storage)
    ckpt = CheckpointContext(distributed=core.DistributedContext(), storage=storage)
    with pytest.raises(ValueError, match="download_mode 'SHARED' is not one of "
                                         "DownloadMode.LocalWorkersShareDownload"):
        ckpt.download(sid, tmp_path / "dl", "SHARED")
    with pytest.raises(ValueError, match="download_mode 3 is not one of"), \
            ckpt.restore_path(sid, 3):  # type: ignore[arg-type]
        pass
    assert DownloadMode("LOCAL_WORKERS_SHARE_DOWNLOAD") is SHARED
    assert [m.value for m in DownloadMode] == ["LOCAL_WORKERS_SHARE_DOWNLOAD",
                                              "NO_SHARED_DOWNLOAD"]


def test_only_the_selected_files_are_checked_against_the_masters_record(
        in_trial: FakeMaster, tmp_path: Path) -> None:
    with core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, sid):
            write_files(path)
        (path / "c.txt").write_bytes(b"changed behind the master's back")
        with ctx.checkpoint.restore_path(sid, selector=is_bin) as restored:
            assert files_under(restored) == {"a.bin": 3, "sub/b.bin": 5}
        ctx.checkpoint.download(sid, tmp_path / "dl", selector=lambda n: n == "metadata.json")
        assert list(files_under(tmp_path / "dl")) == ["metadata.json"]
        with pytest.raises(CheckpointIntegrityError,
                           match="c.txt is 32 bytes, but was saved with 2 bytes"):
            ctx.checkpoint.download(sid, tmp_path / "bad", selector=lambda n: n == "c.txt")
        with pytest.raises(CheckpointIntegrityError, match="c.txt"), \
                ctx.checkpoint.restore_path(sid):
            pass


# --- local workers sharing one fetch (threads as ranks) -------------------------------------


def test_local_workers_share_one_restore_of_the_union_of_their_selections(
        tmp_path: Path, temp_root: Path) -> None:
    calls: list[tuple[int, str]] = []
    sid = save(SharedFSStorage(tmp_path / "store"))
    wanted = {0: "a.bin", 1: "sub/b.bin"}

    def work(rank: int, dist: core.DistributedContext) -> Any:
        ckpt = CheckpointContext(distributed=dist,
                                 storage=CountingStorage(tmp_path / "store", calls, rank))
        with ckpt.restore_path(sid, selector=lambda n: n == wanted[rank]) as path:
            if rank == 1:
                time.sleep(0.5)  # rank 0's body is over by now; the directory must stay
            return path, files_under(path), len(list(temp_root.iterdir()))

    (p0, files0, dirs0), (p1, files1, dirs1) = on_ranks(work)
    assert p0 == p1 and p0.parent == temp_root
    assert files0 == files1 == {"a.bin": 3, "sub/b.bin": 5}
    assert dirs0 == dirs1 == 1
    assert not p0.exists()
    # One listing (no master record here) and one restore, both on the local chief.
    assert sorted(calls) == [(0, "resources"), (0, "restore_path")]


def test_local_workers_share_one_download(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sid = save(SharedFSStorage(tmp_path / "store"))
    target = tmp_path / "dl"
    selectors: dict[int, Callable[[str], bool]] = {0: lambda n: n == "c.txt", 1: is_bin}

    def work(rank: int, dist: core.DistributedContext) -> Any:
        ckpt = CheckpointContext(distributed=dist,
                                 storage=CountingStorage(tmp_path / "store", calls, rank))
        ckpt.download(sid, target, selector=selectors[rank])
        return files_under(target)  # written in full by the time any rank returns

    assert on_ranks(work) == [FILES, FILES]
    assert sorted(calls) == [(0, "download"), (0, "resources")]


def test_a_worker_without_a_selector_gets_every_file_in_place(tmp_path: Path) -> None:
    calls: list[tuple[int, str]] = []
    sid = save(SharedFSStorage(tmp_path / "store"))

    def work(rank: int, dist: core.DistributedContext) -> Any:
        ckpt = CheckpointContext(distributed=dist,
                                 storage=CountingStorage(tmp_path / "store", calls, rank))
        with ckpt.restore_path(sid, selector=is_bin if rank == 0 else None) as path:
            return path, files_under(path)

    assert on_ranks(work) == [(tmp_path / "store" / sid, FILES)] * 2
    assert sorted(calls) == [(0, "resources"), (0, "restore_path")]


def test_the_masters_record_names_the_files_to_choose_from(
        in_trial: FakeMaster, tmp_path: Path) -> None:
    with core.init() as ctx, ctx.checkpoint.store_path({"steps_completed": 1}) as (path, sid):
        write_files(path)
    calls: list[tuple[int, str]] = []

    def work(rank: int, dist: core.DistributedContext) -> Any:
        session = MasterSession(in_trial.url, TOKEN)
        ckpt = CheckpointContext(distributed=dist, session=session, trial_id=TRIAL_ID,
                                 storage=CountingStorage(tmp_path / "storage", calls, rank))
        try:
            with ckpt.restore_path(sid, selector=lambda n: n.startswith(("a", "m"))) as path:
                return files_under(path)
        finally:
            session.close()

    meta_size = (path / "metadata.json").stat().st_size
    assert on_ranks(work) == [{"a.bin": 3, "metadata.json": meta_size}] * 2
    assert sorted(calls) == [(0, "restore_path")]  # listed from the record, not from storage


@pytest.mark.parametrize("what", ["download", "restore_path"])
def test_a_failed_fetch_on_the_local_chief_fails_every_local_worker(
        tmp_path: Path, temp_root: Path, what: str) -> None:
    calls: list[tuple[int, str]] = []
    sid = save(SharedFSStorage(tmp_path / "store"))
    failure: list[Exception] = []

    def work(rank: int, dist: core.DistributedContext) -> Any:
        ckpt = CheckpointContext(distributed=dist, storage=CountingStorage(
            tmp_path / "store", calls, rank, fail=failure[0] if rank == 0 else None))
        if what == "download":
            ckpt.download(sid, tmp_path / "dl", selector=is_bin)
        else:
            with ckpt.restore_path(sid, selector=is_bin):
                pass
        return "no error"

    done = "downloaded" if what == "download" else "restored"
    failure[:] = [OSError("the disk is full")]
    chief, worker = on_ranks(work)
    assert chief is failure[0]
    assert type(worker) is OSError and str(worker) == (
        f"checkpoint {sid} could not be {done} by the local chief for the workers of "
        "this node: OSError: the disk is full")
    failure[:] = [KeyError("odd")]
    chief, worker = on_ranks(work)
    assert chief is failure[0]
    assert type(worker) is RuntimeError and "KeyError: 'odd'" in str(worker)
    assert {rank for rank, _call in calls} == {0}
    assert list(temp_root.iterdir()) == []


def test_a_missing_checkpoint_raises_file_not_found_on_every_local_worker(
        tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    missing = str(uuid.uuid4())

    def work(rank: int, dist: core.DistributedContext) -> Any:
        ckpt = CheckpointContext(distributed=dist, storage=storage)
        with ckpt.restore_path(missing, selector=is_bin if rank == 0 else None):
            pass

    for result in on_ranks(work):
        assert isinstance(result, FileNotFoundError)
        assert f"checkpoint {missing} was not fetched for the workers of this node" in str(result)
        assert f"its files could not be listed: FileNotFoundError: checkpoint {missing} " \
               "not found" in str(result)


def test_local_workers_that_disagree_all_raise(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    sid, other = save(storage), save(storage)

    def broken_selector(name: str) -> bool:
        raise KeyError(name)

    def restore(ids: list[str], selectors: list[Any]) -> list[Any]:
        def work(rank: int, dist: core.DistributedContext) -> Any:
            ckpt = CheckpointContext(distributed=dist, storage=storage)
            with ckpt.restore_path(ids[rank], selector=selectors[rank]) as path:
                return files_under(path)
        return on_ranks(work)

    for result in restore([sid, other], [None, None]):
        assert isinstance(result, ValueError)
        assert f"rank 1: ValueError: it asked for checkpoint {other}, the local chief for " \
               f"{sid}" in str(result)
    for result in restore([sid, sid], [is_bin, broken_selector]):
        assert isinstance(result, RuntimeError) and "rank 1: KeyError: 'a.bin'" in str(result)
    for result in restore([sid, "../etc"], [None, None]):
        assert isinstance(result, ValueError) and "'../etc' is not a plain uuid" in str(result)

    def download(rank: int, dist: core.DistributedContext) -> Any:
        CheckpointContext(distributed=dist, storage=storage).download(
            sid, tmp_path / f"dl{rank}")

    for result in on_ranks(download):
        assert isinstance(result, ValueError) and "must give the same ckpt_dir" in str(result)
    assert not (tmp_path / "dl0").exists() and not (tmp_path / "dl1").exists()


# --- two local ranks of a real torch.distributed job ----------------------------------------


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_local_ranks_over_torch_distributed(tmp_path: Path) -> None:
    storage = SharedFSStorage(tmp_path / "store")
    sid = save(storage)
    temp = tmp_path / "tmp"
    temp.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    base.update({
        "PYTHONPATH": str(REPO), "TMPDIR": str(temp), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_port()), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
        "CKPT_STORAGE": str(tmp_path / "store"), "CKPT_ID": sid,
        "CKPT_DOWNLOAD_DIR": str(tmp_path / "dl"),
    })
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("download_worker.py"))],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )
        for rank in range(2)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
            results.append(json.loads(line[len("RESULT "):]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    r0, r1 = results
    assert (r0["rank"], r1["rank"], r0["local_size"]) == (0, 1, 2)
    # One temporary directory, made by the chief, holding the union; gone after both bodies.
    assert r0["restore_path"] == r1["restore_path"]
    assert r0["restore_dirs"] == r1["restore_dirs"] == [r0["restore_path"]]
    assert Path(r0["restore_path"]).parent == temp
    assert r0["restored"] == r1["restored"] == ["a.bin", "sub/b.bin"]
    assert not r0["restore_path_exists_after"]
    assert r0["downloaded"] == r1["downloaded"] == ["a.bin", "sub/b.bin"]
    # The chief's fetches fail: it raises its own error, the other rank one naming it.
    assert r0["failed_restore_path"] == ["OSError", "the disk is full"]
    assert r0["failed_download"] == ["OSError", "the disk is full"]
    for what, done in (("restore_path", "restored"), ("download", "downloaded")):
        assert r1[f"failed_{what}"] == [
            "OSError", f"checkpoint {sid} could not be {done} by the local chief for the "
                       "workers of this node: OSError: the disk is full"]
    assert r0["missing"][0] == r1["missing"][0] == "FileNotFoundError"
    assert r1["missing"][1].startswith("checkpoint 00000000-0000-4000-8000-000000000000 could "
                                       "not be restored by the local chief")
    assert "FileNotFoundError: checkpoint 00000000-0000-4000-8000-000000000000 not found" \
        in r1["missing"][1]
    # Every listing and fetch went through the chief's storage, once each.
    assert r0["calls"] == ["resources", "restore_path", "resources", "download",
                           "restore_path", "download", "restore_path"]
    assert r1["calls"] == []
    assert list(temp.glob("det_hub_restore_*")) == []
