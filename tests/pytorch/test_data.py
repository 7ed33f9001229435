"""The sharded, resumable sampler behind det_hub.pytorch.DataLoader."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub import pytorch
from det_hub.pytorch import ShardedBatchSampler


def _take(sampler: ShardedBatchSampler, n: int) -> list[list[int]]:
    out = []
    for batch in sampler:
        out.append(batch)
        if len(out) == n:
            break
    return out


def test_seeded_shuffle_is_a_permutation_per_epoch_and_differs_between_epochs() -> None:
    s = ShardedBatchSampler(10, 5, shuffle=True, seed=3, repeat=True)
    first, second = s.epoch_order(0), s.epoch_order(1)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second
    assert ShardedBatchSampler(10, 5, shuffle=True, seed=3).epoch_order(0) == first
    assert ShardedBatchSampler(10, 5, shuffle=True, seed=4).epoch_order(0) != first


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60),
    batch=st.integers(1, 7),
    replicas=st.integers(1, 4),
    drop_last=st.booleans(),
    skip=st.integers(0, 30),
)
def test_ranks_split_each_global_batch_and_skip_resumes_exactly(
    n: int, batch: int, replicas: int, drop_last: bool, skip: int
) -> None:
    if drop_last and n < batch * replicas:
        with pytest.raises(ValueError, match="makes no batch"):
            ShardedBatchSampler(n, batch, drop_last=drop_last, num_replicas=replicas)
        return
    kw = {"shuffle": True, "seed": 11, "drop_last": drop_last, "repeat": True}
    one = ShardedBatchSampler(n, batch * replicas, **kw)  # type: ignore[arg-type]
    ranks = [
        ShardedBatchSampler(n, batch, num_replicas=replicas, rank=r, **kw)  # type: ignore[arg-type]
        for r in range(replicas)
    ]
    per_epoch = one.batches_per_epoch
    assert all(r.batches_per_epoch == per_epoch for r in ranks)
    total = 2 * per_epoch
    single = _take(one, total)
    sharded = [_take(r, total) for r in ranks]
    for i in range(total):
        parts = [sharded[r][i] for r in range(replicas)]
        assert len({len(p) for p in parts}) == 1  # every rank the same number of samples
        joined = [x for p in parts for x in p]
        # The ranks together see the one-rank global batch (padded when short).
        assert joined[: len(single[i])] == single[i]
    for epoch in range(2):
        seen = [x for i in range(epoch * per_epoch, (epoch + 1) * per_epoch) for x in single[i]]
        expected = n - n % (batch * replicas) if drop_last else n
        assert sorted(seen) == sorted(one.epoch_order(epoch)[:expected])
        assert len(set(seen)) == expected  # each sample once per epoch
    for r in range(replicas):
        resumed = ShardedBatchSampler(n, batch, num_replicas=replicas, rank=r, skip=skip, **kw)  # type: ignore[arg-type]
        assert _take(resumed, 3) == _take(ranks[r], skip + 3)[skip:]


def test_without_repeat_one_epoch_then_stop() -> None:
    s = ShardedBatchSampler(7, 3)
    assert list(s) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(s) == 3
    assert list(ShardedBatchSampler(7, 3, skip=2)) == [[6]]
    # Two ranks, a last global batch of 3: padded from the epoch's start to 2 each.
    assert list(ShardedBatchSampler(7, 2, num_replicas=2, rank=0)) == [[0, 1], [4, 5]]
    assert list(ShardedBatchSampler(7, 2, num_replicas=2, rank=1)) == [[2, 3], [6, 0]]


def test_data_loader_builds_torch_loader_that_leaves_global_rng_alone() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(10).float())
    loader = pytorch.DataLoader(data, batch_size=4, shuffle=True)
    assert len(loader) == 3
    torch.manual_seed(0)
    before = torch.get_rng_state()
    got = [b[0].tolist() for b in loader.get_data_loader(seed=5)]
    assert torch.equal(torch.get_rng_state(), before)
    again = [b[0].tolist() for b in loader.get_data_loader(seed=5)]
    assert got == again
    assert sorted(x for b in got for x in b) == [float(i) for i in range(10)]
    resumed = [b[0].tolist() for b in loader.get_data_loader(skip=1, seed=5)]
    assert resumed == got[1:]
    with pytest.raises(ValueError, match="batch_sampler"):
        pytorch.DataLoader(data, batch_sampler=[[0]])
