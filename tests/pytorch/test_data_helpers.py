"""Determined's batch helpers in det_hub.pytorch: to_device, data_length, adapt_batch_sampler
and the samplers module."""

from __future__ import annotations

import collections
import itertools
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub import pytorch
from det_hub.compat import SITE_DIR
from det_hub.pytorch import samplers

REPO = Path(__file__).resolve().parents[2]
META = torch.device("meta")


def _take(iterable: Iterable[Any], n: int) -> list[Any]:
    return list(itertools.islice(iterable, n))


def _batches(n: int, size: int, drop_last: bool = False) -> torch.utils.data.BatchSampler:
    return torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(range(n)), size, drop_last
    )


# --- to_device ---------------------------------------------------------------------------


class Pair(NamedTuple):
    x: torch.Tensor
    label: str


class Movable:
    """Not a tensor, but with a ``to`` of its own."""

    def __init__(self) -> None:
        self.moved_to: list[Any] = []

    def to(self, device: Any) -> Movable:
        self.moved_to.append(device)
        return self


class Batch(list):  # type: ignore[type-arg]
    """A list subclass that can be rebuilt from its items."""


class Fixed(tuple):  # type: ignore[type-arg]
    """A tuple subclass whose constructor takes two arguments: it cannot be rebuilt."""

    def __new__(cls, a: Any, b: Any) -> Fixed:
        return super().__new__(cls, (a, b))


def test_to_device_moves_every_tensor_and_keeps_the_structure() -> None:
    movable = Movable()
    ordered = collections.OrderedDict(a=torch.ones(2))
    batch = {
        "x": torch.zeros(3, 2),
        "pair": Pair(torch.ones(1), "tag"),
        "list": [torch.arange(3), (torch.ones(2), 7)],
        "array": np.arange(4, dtype=np.float32),
        "ordered": ordered,
        "own_to": movable,
        "sub_list": Batch([torch.ones(1)]),
        "sub_tuple": Fixed(torch.ones(1), 2),
    }
    moved = pytorch.to_device(batch, META)
    assert type(moved) is dict and list(moved) == list(batch)
    assert moved["x"].device == META and moved["x"].shape == (3, 2)
    assert isinstance(moved["pair"], Pair)
    assert moved["pair"].x.device == META and moved["pair"].label == "tag"
    assert type(moved["list"]) is list and type(moved["list"][1]) is tuple
    assert moved["list"][0].device == META and moved["list"][1][0].device == META
    assert moved["list"][1][1] == 7
    # A numeric numpy array becomes a tensor on the device.
    assert isinstance(moved["array"], torch.Tensor) and moved["array"].device == META
    assert type(moved["ordered"]) is collections.OrderedDict
    assert moved["ordered"]["a"].device == META
    assert moved["own_to"] is movable and movable.moved_to == [META]
    # A subclass of list or tuple is rebuilt where its constructor takes the items, else it
    # becomes the plain type.
    assert type(moved["sub_list"]) is Batch and moved["sub_list"][0].device == META
    assert type(moved["sub_tuple"]) is tuple and moved["sub_tuple"][0].device == META
    assert moved["sub_tuple"][1] == 2
    # The input is left as it was.
    assert batch["x"].device.type == "cpu" and ordered["a"].device.type == "cpu"


def test_to_device_takes_a_device_string_and_a_mapping_it_cannot_rebuild() -> None:
    counts: collections.defaultdict[str, Any] = collections.defaultdict(int)
    counts["x"] = torch.ones(1)
    moved = pytorch.to_device(counts, "meta")
    assert moved["x"].device == META


def test_to_device_logs_each_unmovable_type_once(caplog: pytest.LogCaptureFixture) -> None:
    batch = ["a", "b", 3, 4, None, np.array(["text"]), torch.ones(1)]
    with caplog.at_level(logging.WARNING, logger="det_hub.pytorch"):
        moved = pytorch.to_device(batch, META)
    assert moved[:5] == ["a", "b", 3, 4, None]
    assert moved[5] is batch[5]  # an array of strings cannot be a tensor
    warned = [r.getMessage() for r in caplog.records if "cannot move" in r.getMessage()]
    assert sorted(m.split()[5] for m in warned) == ["NoneType", "int", "ndarray", "str"]
    caplog.clear()
    seen: set[type] = set()
    with caplog.at_level(logging.WARNING, logger="det_hub.pytorch"):
        pytorch.to_device(["a"], META, seen)
        pytorch.to_device(["b", 1], META, seen)
    assert [r.getMessage().split()[5] for r in caplog.records] == ["str", "int"]
    assert seen == {str, int}


def test_context_to_device_logs_an_unmovable_type_once_per_context(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytorch.init(hparams={}, checkpoint_storage=tmp_path) as context, caplog.at_level(
        logging.WARNING, logger="det_hub.pytorch"
    ):
        for _ in range(3):
            out = context.to_device({"x": np.ones(2), "id": "a"})
            assert isinstance(out["x"], torch.Tensor) and out["x"].device == context.device
    assert len([r for r in caplog.records if "cannot move" in r.getMessage()]) == 1


# --- data_length ---------------------------------------------------------------------------


def test_data_length_counts_the_records_of_a_batch() -> None:
    x = torch.zeros(5, 3)
    assert pytorch.data_length(x) == 5
    assert pytorch.data_length(np.zeros((4, 2))) == 4
    assert pytorch.data_length({"x": x, "y": torch.zeros(5)}) == 5
    assert pytorch.data_length([x, torch.zeros(5)]) == 5
    assert pytorch.data_length((torch.zeros(2, 9), x)) == 2
    assert pytorch.data_length({"inputs": [torch.zeros(6, 1)], "y": torch.zeros(6)}) == 6
    assert pytorch.data_length(["a", "b", "c"]) == 3  # a list of records


def test_data_length_of_sized_objects_is_their_len() -> None:
    dataset = torch.utils.data.TensorDataset(torch.zeros(10, 2))
    assert pytorch.data_length(torch.utils.data.DataLoader(dataset, batch_size=4)) == 3
    assert pytorch.data_length(dataset) == 10


def test_data_length_errors() -> None:
    with pytest.raises(ValueError, match="empty dict"):
        pytorch.data_length({})
    with pytest.raises(ValueError, match="empty list"):
        pytorch.data_length([])
    with pytest.raises(TypeError, match="0-dimensional"):
        pytorch.data_length(torch.tensor(1.0))
    with pytest.raises(TypeError, match="first value is a str"):
        pytorch.data_length({"name": "x"})
    with pytest.raises(TypeError, match="generator"):
        pytorch.data_length(i for i in range(3))

    class Stream(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    with pytest.raises(TypeError):
        pytorch.data_length(torch.utils.data.DataLoader(Stream(), batch_size=2))


# --- samplers -------------------------------------------------------------------------------


def test_repeat_samplers_go_round_forever_and_report_one_pass() -> None:
    repeat = samplers.RepeatBatchSampler(_batches(5, 2))
    assert len(repeat) == 3
    assert _take(repeat, 7) == [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4], [0, 1]]
    assert isinstance(repeat, torch.utils.data.BatchSampler)
    indices = samplers.RepeatSampler(torch.utils.data.SequentialSampler(range(3)))
    assert len(indices) == 3
    assert _take(indices, 8) == [0, 1, 2, 0, 1, 2, 0, 1]
    assert list(samplers.RepeatBatchSampler([])) == []  # nothing to repeat: it ends


def test_skip_samplers_leave_out_the_first_items_and_keep_the_length() -> None:
    skip = samplers.SkipBatchSampler(_batches(7, 2), 2)
    assert len(skip) == 4
    assert list(skip) == [[4, 5], [6]]
    assert list(samplers.SkipBatchSampler(_batches(7, 2), 10)) == []
    skip_indices = samplers.SkipSampler(torch.utils.data.SequentialSampler(range(5)), 3)
    assert len(skip_indices) == 5 and list(skip_indices) == [3, 4]
    # Skip after repeat: the skip applies once, not every epoch.
    resumed = samplers.SkipBatchSampler(samplers.RepeatBatchSampler(_batches(4, 2)), 3)
    assert _take(resumed, 3) == [[2, 3], [0, 1], [2, 3]]
    with pytest.raises(ValueError, match="skip"):
        samplers.SkipBatchSampler(_batches(4, 2), -1)


def test_distributed_samplers_deal_round_robin_and_report_equal_lengths() -> None:
    shards = [samplers.DistributedBatchSampler(_batches(10, 2), 2, r) for r in range(2)]
    assert [list(s) for s in shards] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    assert [len(s) for s in shards] == [3, 3]
    three = [samplers.DistributedSampler(range(7), 3, r) for r in range(3)]
    assert [list(s) for s in three] == [[0, 3, 6], [1, 4], [2, 5]]
    assert {len(s) for s in three} == {3}
    assert list(samplers.DistributedBatchSampler(_batches(3, 1), 1, 0)) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="rank"):
        samplers.DistributedBatchSampler(_batches(4, 2), 2, 2)
    with pytest.raises(ValueError, match="num_workers"):
        samplers.DistributedSampler(range(4), 0, 0)


def test_reproducible_shuffles_follow_the_seed_epoch_after_epoch() -> None:
    first = samplers.ReproducibleShuffleSampler(torch.utils.data.SequentialSampler(range(20)), 5)
    epochs = [list(first) for _ in range(3)]
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    again = samplers.ReproducibleShuffleSampler(torch.utils.data.SequentialSampler(range(20)), 5)
    assert [list(again) for _ in range(3)] == epochs
    other = samplers.ReproducibleShuffleSampler(torch.utils.data.SequentialSampler(range(20)), 6)
    assert list(other) != epochs[0]
    assert len(first) == 20
    batches = samplers.ReproducibleShuffleBatchSampler(_batches(20, 4), 5)
    shuffled = list(batches)
    assert sorted(shuffled) == list(_batches(20, 4)) and shuffled != list(_batches(20, 4))
    assert len(batches) == 5


# --- adapt_batch_sampler -------------------------------------------------------------------


def test_adapt_batch_sampler_repeats_then_shards_then_skips() -> None:
    adapted = pytorch.adapt_batch_sampler(
        _batches(10, 2), repeat=True, skip=1, num_replicas=2, rank=1
    )
    # Rank 1 gets batches 1, 3, 5 (= batch 0 of the second pass), ...; it skips its first.
    assert _take(adapted, 4) == [[6, 7], [0, 1], [4, 5], [8, 9]]
    assert len(adapted) == 3
    once = pytorch.adapt_batch_sampler(_batches(10, 2))
    assert list(once) == list(_batches(10, 2))
    shard = pytorch.adapt_batch_sampler(_batches(10, 2), num_replicas=2, rank=0, skip=1)
    assert list(shard) == [[4, 5], [8, 9]]


def test_adapt_batch_sampler_feeds_a_torch_data_loader() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(12.0))
    seen: list[list[float]] = []
    for rank in range(3):
        sampler = pytorch.adapt_batch_sampler(_batches(12, 2), num_replicas=3, rank=rank, skip=1)
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
        seen.extend(batch[0].tolist() for batch in loader)
    # Each rank skipped its first batch: the first global batch (records 0-5) is left out.
    assert sorted(x for batch in seen for x in batch) == [float(x) for x in range(6, 12)]


def test_adapt_batch_sampler_rebuilds_det_hubs_sharded_sampler() -> None:
    base = pytorch.ShardedBatchSampler(12, 2, shuffle=True, seed=4)
    adapted = [
        pytorch.adapt_batch_sampler(base, repeat=True, skip=1, num_replicas=3, rank=r)
        for r in range(3)
    ]
    assert all(isinstance(a, pytorch.ShardedBatchSampler) for a in adapted)
    # The same batches, in the same places, as the generic chain over the same epoch order.
    generic = [
        pytorch.adapt_batch_sampler(
            samplers.RepeatBatchSampler(_ListBatches(base)), skip=1, num_replicas=3, rank=r
        )
        for r in range(3)
    ]
    for ours, theirs in zip(adapted, generic, strict=True):
        assert _take(ours, 1) == _take(theirs, 1)


class _ListBatches:
    """The first epoch of a ShardedBatchSampler, as a plain batch sampler."""

    def __init__(self, sampler: pytorch.ShardedBatchSampler) -> None:
        self._batches = list(sampler)

    def __iter__(self) -> Any:
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), size=st.integers(1, 5), replicas=st.integers(1, 4),
       skip=st.integers(0, 6))
def test_adapted_shards_cover_every_batch_once(
    n: int, size: int, replicas: int, skip: int
) -> None:
    everything = list(_batches(n, size))
    shards = [
        list(pytorch.adapt_batch_sampler(_batches(n, size), skip=skip, num_replicas=replicas,
                                          rank=r))
        for r in range(replicas)
    ]
    got = sorted(b for shard in shards for b in shard)
    assert got == sorted(everything[skip * replicas:])
    assert len({len(pytorch.adapt_batch_sampler(_batches(n, size), num_replicas=replicas,
                                                rank=r)) for r in range(replicas)}) == 1


def test_adapt_batch_sampler_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="skip"):
        pytorch.adapt_batch_sampler(_batches(4, 2), skip=-1)
    with pytest.raises(ValueError, match="num_replicas"):
        pytorch.adapt_batch_sampler(_batches(4, 2), num_replicas=0)
    with pytest.raises(ValueError, match="rank"):
        pytorch.adapt_batch_sampler(_batches(4, 2), num_replicas=2, rank=2)


# --- the names under ``import determined`` ----------------------------------------------------


def test_determined_pytorch_serves_the_new_names() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO)])
    code = """
        import det_hub.pytorch
        import determined.pytorch.samplers
        from determined import pytorch
        from determined.pytorch.samplers import RepeatBatchSampler, SkipBatchSampler
        print(determined.pytorch.samplers is det_hub.pytorch.samplers)
        print(pytorch.load_trial_from_checkpoint_path is
              det_hub.pytorch.load_trial_from_checkpoint_path)
        print(all(hasattr(pytorch, n) for n in (
            "CheckpointLoadContext", "to_device", "data_length", "adapt_batch_sampler")))
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]
