"""One of two local ranks (one node) of a torch.distributed (gloo) job fetching a checkpoint
with LocalWorkersShareDownload; see test_checkpoint_download.

Reads ``CKPT_STORAGE`` (a shared_fs directory), ``CKPT_ID`` (a checkpoint in it),
``CKPT_DOWNLOAD_DIR``, and prints ``RESULT <json>``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import det_hub.core as core
from det_hub.core._checkpoint import CheckpointContext
from det_hub.storage import SharedFSStorage

#: A checkpoint id that no checkpoint has (the same on every rank).
MISSING = "00000000-0000-4000-8000-000000000000"


class CountingStorage(SharedFSStorage):
    """shared_fs that records the calls made on it (shared by the ranks of a test), and can be
    told to fail fetches."""

    def __init__(self, path: Path, calls: list[tuple[int, str]], rank: int,
                 fail: Exception | None = None) -> None:
        super().__init__(path)
        self.calls, self.rank, self.fail = calls, rank, fail
        self.restoring = False

    def download(self, storage_id: str, dst_dir: str | os.PathLike[str], *,
                 resources: Mapping[str, int] | None = None,
                 selector: Callable[[str], bool] | None = None) -> None:
        if not self.restoring:  # not shared_fs's own copy for a selective restore
            self.calls.append((self.rank, "download"))
        if self.fail is not None:
            raise self.fail
        super().download(storage_id, dst_dir, resources=resources, selector=selector)

    @contextlib.contextmanager
    def restore_path(self, storage_id: str, *, resources: Mapping[str, int] | None = None,
                     selector: Callable[[str], bool] | None = None) -> Iterator[Path]:
        self.calls.append((self.rank, "restore_path"))
        if self.fail is not None:
            raise self.fail
        self.restoring = True
        try:
            with super().restore_path(storage_id, resources=resources,
                                      selector=selector) as path:
                yield path
        finally:
            self.restoring = False

    def resources(self, storage_id: str) -> dict[str, int]:
        self.calls.append((self.rank, "resources"))
        return super().resources(storage_id)


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def restore_dirs() -> list[str]:
    """The temporary restore directories that exist now (``TMPDIR`` is the test's own)."""
    return sorted(str(p) for p in Path(tempfile.gettempdir()).glob("det_hub_restore_*"))


def main() -> None:
    with core.DistributedContext.from_torch_distributed() as dist:
        run(dist)


def run(dist: core.DistributedContext) -> None:
    rank = dist.get_local_rank()
    calls: list[tuple[int, str]] = []
    storage = CountingStorage(Path(os.environ["CKPT_STORAGE"]), calls, rank)
    ckpt = CheckpointContext(distributed=dist, storage=storage)
    sid = os.environ["CKPT_ID"]
    out: dict[str, Any] = {"rank": rank, "local_size": dist.get_local_size()}
    # Rank 0 wants a.bin, rank 1 wants sub/b.bin: both get both.
    wanted = "a.bin" if rank == 0 else "sub/b.bin"
    with ckpt.restore_path(sid, selector=lambda name: name == wanted) as path:
        out["restore_path"] = str(path)
        out["restore_dirs"] = restore_dirs()
        if rank == 1:
            time.sleep(0.5)  # the chief's body has long ended: the directory must still be there
        out["restored"] = files_under(path)
    # The chief leaves the directory last, so only it can tell that it is gone.
    out["restore_path_exists_after"] = Path(out["restore_path"]).exists()

    target = os.environ["CKPT_DOWNLOAD_DIR"]
    ckpt.download(sid, target, selector=lambda name: name == wanted)
    # Every rank returns only once the chief has written the directory.
    out["downloaded"] = files_under(Path(target))

    storage.fail = OSError("the disk is full") if rank == 0 else None
    for what in ("restore_path", "download"):
        try:
            if what == "restore_path":
                with ckpt.restore_path(sid, "LOCAL_WORKERS_SHARE_DOWNLOAD"):
                    pass
            else:
                ckpt.download(sid, Path(target) / "again")
            out[f"failed_{what}"] = None
        except Exception as exc:
            out[f"failed_{what}"] = [type(exc).__name__, str(exc)]
    storage.fail = None
    try:
        with ckpt.restore_path(MISSING):
            pass
        out["missing"] = None
    except Exception as exc:
        out["missing"] = [type(exc).__name__, str(exc)]
    out["calls"] = [call for _rank, call in calls]
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
