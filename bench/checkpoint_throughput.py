"""Checkpoint save and restore throughput of det_hub against plain torch.save / torch.load.

The state is a ~537 MB model and optimizer: four 4096x4096 linear layers (67M float32
parameters) and SGD momentum buffers of the same size. Both sides write to directories on
the same disk (``--dir``, default the system temp directory):

* plain: ``torch.save({"model": ..., "optimizer": ...}, file)``; restore is ``torch.load``
  and ``load_state_dict`` into the model and the optimizer.
* det_hub: what the ``Trainer`` does outside a cluster: ``det_hub.pytorch.init`` with local
  checkpoint storage, the Trainer's ``build_state`` (which adds RNG states and the trainer's
  position) written by ``save_state`` inside ``core.checkpoint.store_path`` (which also
  measures the files and writes ``metadata.json``); restore is ``restore_path``,
  ``load_state`` and ``apply_state``.

Saves are timed until the data is on disk: the benchmark fsyncs every file written and its
directory on both sides (det_hub's storage itself does not fsync). Before each restore the
file's pages are dropped from the page cache (``posix_fadvise(DONTNEED)``), so restores read
from the disk; ``--warm`` skips that. Throughput is the state's tensor bytes (MB = 10^6
bytes) over seconds. After one untimed round, the side that goes first alternates; medians
are reported.

    python bench/checkpoint_throughput.py [--runs 3] [--dir DIR] [--warm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from det_hub import pytorch
from det_hub.pytorch._checkpoint_state import (
    apply_state,
    build_state,
    capture_rng_state,
    load_state,
    save_state,
)

WIDTH, LAYERS = 4096, 4


def make_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model and an optimizer whose momentum buffers exist (one step taken)."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(2, WIDTH)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def tensor_bytes(obj: Any) -> int:
    """Bytes of all tensors in a nest of dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def fsync_all(files: Iterable[Path], directory: Path) -> None:
    """Put ``files`` and ``directory``'s entries on disk, as a durable save needs."""
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cached(files: Iterable[Path]) -> None:
    """Drop the files' (already written back) pages from the page cache."""
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def plain_run(root: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
              cold: bool) -> tuple[float, float]:
    """One plain save and restore; returns their seconds."""
    directory = root / "plain"
    directory.mkdir()
    file = directory / "checkpoint.pt"

    def save() -> None:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, file)
        fsync_all([file], directory)

    def restore() -> None:
        state = torch.load(file, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    save_s = timed(save)
    if cold:
        drop_cached([file])
    restore_s = timed(restore)
    shutil.rmtree(directory)
    return save_s, restore_s


def det_hub_run(context: pytorch.PyTorchTrialContext, cold: bool) -> tuple[float, float]:
    """One save and restore through the Core API and the Trainer's state helpers."""
    checkpoint = context.core.checkpoint
    storage_id = ""
    saved: list[Path] = []

    def save() -> None:
        nonlocal storage_id
        state = build_state(context, {}, [capture_rng_state()], {"batches_trained": 0})
        with checkpoint.store_path({"steps_completed": 0}) as (path, storage_id):
            save_state(path, state)
        saved.extend(files_under(path))
        fsync_all(saved, path)
        fsync_all([], path.parent)  # the new checkpoint directory's own entry

    def restore() -> None:
        with checkpoint.restore_path(storage_id) as path:
            state = load_state(path)
        apply_state(context, {}, state)

    save_s = timed(save)
    if cold:
        drop_cached(saved)
    restore_s = timed(restore)
    checkpoint.storage.delete(storage_id)
    return save_s, restore_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where both sides write (default: the system temp directory)")
    parser.add_argument("--warm", action="store_true",
                        help="restore from the page cache instead of the disk")
    args = parser.parse_args()
    cold = not args.warm
    # Other disk and CPU load skews one side or the other; printed so that a reader can judge.
    load_before = os.getloadavg()[0]

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        with pytorch.init(hparams={}, checkpoint_storage=root / "det_hub") as context:
            model, optimizer = make_model()
            context.wrap_model(model)
            context.wrap_optimizer(optimizer)
            size_mb = tensor_bytes(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict()}) / 1e6
            plain: list[tuple[float, float]] = []
            ours: list[tuple[float, float]] = []
            # One untimed round first: the first write of a process pays for page-cache and
            # allocator growth that later ones do not.
            plain_run(root, model, optimizer, cold)
            det_hub_run(context, cold)
            for run in range(args.runs):
                # Which side goes first alternates, so neither always follows the other's
                # write-back.
                if run % 2 == 0:
                    plain.append(plain_run(root, model, optimizer, cold))
                    ours.append(det_hub_run(context, cold))
                else:
                    ours.append(det_hub_run(context, cold))
                    plain.append(plain_run(root, model, optimizer, cold))
                print(f"run {run + 1}/{args.runs}: plain save {plain[-1][0]:.2f} s restore "
                      f"{plain[-1][1]:.2f} s; det_hub save {ours[-1][0]:.2f} s restore "
                      f"{ours[-1][1]:.2f} s", flush=True)

    print(f"state {size_mb:.0f} MB, median of {args.runs} runs, fsync on save, "
          f"{'cold' if cold else 'warm'} page cache on restore, under "
          f"{args.dir or tempfile.gettempdir()}; 1-min load average {load_before:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    for i, what in enumerate(("save", "restore")):
        plain_mbs = size_mb / statistics.median(p[i] for p in plain)
        ours_mbs = size_mb / statistics.median(o[i] for o in ours)
        print(f"{what:8s} plain {plain_mbs:7.0f} MB/s   det_hub {ours_mbs:7.0f} MB/s   "
              f"ratio {ours_mbs / plain_mbs * 100:5.1f} % (aim: 90 %)")


if __name__ == "__main__":
    main()
