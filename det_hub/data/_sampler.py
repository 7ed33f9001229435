"""Batches that are sharded across ranks and resume at an exact batch.

torch's ``DistributedSampler`` shards, but cannot start in the middle of an epoch, and a
shuffled torch ``DataLoader`` draws from the global RNG. The sampler here makes each epoch's
order a function of (seed, epoch) alone, so training resumed from a checkpoint sees exactly
the batches an uninterrupted run would have seen. It needs numpy, not torch: the PyTorch
``DataLoader`` and the data layer's :func:`~det_hub.data.batches` both use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of one epoch's shuffle; distinct for every (seed, epoch) pair."""
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


class ShardedBatchSampler:
    """Yields the index lists of one rank's batches, epoch after epoch.

    Global batch ``i`` of an epoch holds positions ``[i * B * R, (i + 1) * B * R)`` of the
    epoch's order (``B`` the per-rank batch size, ``R`` the number of ranks); rank ``r`` gets
    the ``r``-th slice of ``B``. Every sample is therefore seen once per epoch across ranks, and
    R ranks of batch B see the same global batches as one rank of batch ``B * R``. A short last
    batch (when not dropped) is padded from the epoch's start so that every rank gets the same
    number of samples, as collective training needs.

    Args:
        num_samples: Length of the dataset.
        batch_size: Per-rank batch size.
        shuffle: Shuffle each epoch with a seeded permutation.
        drop_last: Drop the last global batch when it is short.
        seed: The seed of the shuffles.
        num_replicas: Number of ranks.
        rank: This rank.
        repeat: Go on to the next epoch forever instead of stopping after one.
        skip: Global batches to skip from the start (resume point).
        sampler: A user sampler giving each epoch's order instead of the built-in one; its
            ``set_epoch`` is called when it has one.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        repeat: bool = False,
        skip: int = 0,
        sampler: Any = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        if skip < 0:
            raise ValueError(f"skip must be >= 0, not {skip}")
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.repeat = repeat
        self.skip = skip
        self.sampler = sampler
        global_batch = batch_size * num_replicas
        if drop_last:
            self.batches_per_epoch = num_samples // global_batch
        else:
            self.batches_per_epoch = math.ceil(num_samples / global_batch)
        if self.batches_per_epoch < 1:
            raise ValueError(
                f"the dataset of {num_samples} samples makes no batch of "
                f"{batch_size} x {num_replicas} ranks"
            )

    def epoch_order(self, epoch: int) -> list[int]:
        """The order of the dataset's indices in ``epoch``."""
        if self.sampler is not None:
            set_epoch = getattr(self.sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
            return [int(i) for i in self.sampler]
        if self.shuffle:
            rng = np.random.default_rng(epoch_seed(self.seed, epoch))
            return [int(i) for i in rng.permutation(self.num_samples)]
        return list(range(self.num_samples))

    def _shard(self, order: list[int], index: int) -> list[int]:
        global_batch = self.batch_size * self.num_replicas
        chunk = order[index * global_batch : (index + 1) * global_batch]
        if len(chunk) == global_batch:
            return chunk[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        per_rank = math.ceil(len(chunk) / self.num_replicas)
        missing = per_rank * self.num_replicas - len(chunk)
        padded = chunk + [order[i % len(order)] for i in range(missing)]
        return padded[self.rank * per_rank : (self.rank + 1) * per_rank]

    def __iter__(self) -> Iterator[list[int]]:
        batch = self.skip
        while True:
            epoch, offset = divmod(batch, self.batches_per_epoch)
            if not self.repeat and epoch >= 1:
                return
            order = self.epoch_order(epoch)
            for index in range(offset, self.batches_per_epoch):
                yield self._shard(order, index)
            batch = (epoch + 1) * self.batches_per_epoch

    def __len__(self) -> int:
        if self.repeat:
            return self.batches_per_epoch
        return max(self.batches_per_epoch - self.skip, 0)


__all__ = ["ShardedBatchSampler", "epoch_seed"]
