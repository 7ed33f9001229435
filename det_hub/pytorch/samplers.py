"""Samplers that chain onto other samplers: Determined's ``determined.pytorch.samplers``.

Each takes the sampler (of indices) or batch sampler (of index lists) it wraps and changes
how it is walked: repeated forever, started some way in, sharded across ranks, or shuffled from
a seed. They are building blocks for data that :class:`det_hub.pytorch.DataLoader` cannot
take (a custom ``batch_sampler``); :func:`det_hub.pytorch.adapt_batch_sampler` puts the usual
chain together. The order of a chain matters:

* shuffle first: a shuffle iterates its sampler to the end, so it must not wrap a repeat, and
  skipping before shuffling would change which records the shuffle sees;
* repeat before skip: a skip applied under a repeat would be applied again every epoch;
* shard before skip: a resumed rank skips the batches *it* has already trained.

det_hub's own :class:`~det_hub.data.ShardedBatchSampler` shuffles, repeats, skips and shards
in one object, with shards of equal length; prefer it (through
:class:`det_hub.pytorch.DataLoader`) where it fits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

import numpy as np
import torch.utils.data

from det_hub.data import epoch_seed

T = TypeVar("T")

_END: Any = object()


def _length(wrapped: Any, what: str) -> int:
    if not isinstance(wrapped, Sized):
        raise TypeError(f"the {what} wrapped ({type(wrapped).__name__}) has no len()")
    return len(wrapped)


def _check_shard(num_workers: int, rank: int) -> None:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an integer >= 1, not {num_workers!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_workers:
        raise ValueError(f"rank must be an integer in [0, {num_workers}), not {rank!r}")


def _check_skip(skip: int) -> None:
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip must be an integer >= 0, not {skip!r}")


def _repeat(wrapped: Iterable[T]) -> Iterator[T]:
    while True:
        empty = True
        for item in wrapped:
            empty = False
            yield item
        if empty:
            return  # nothing to repeat: stop rather than spin forever


def _skip(wrapped: Iterable[T], skip: int) -> Iterator[T]:
    iterator = iter(wrapped)
    for _ in range(skip):
        if next(iterator, _END) is _END:
            return
    yield from iterator


def _shard(wrapped: Iterable[T], num_workers: int, rank: int) -> Iterator[T]:
    for index, item in enumerate(wrapped):
        if index % num_workers == rank:
            yield item


def _shard_length(length: int, num_workers: int) -> int:
    # Every rank reports the longest shard's length, so that all ranks count the same epoch.
    return math.ceil(length / num_workers)


class RepeatSampler(torch.utils.data.Sampler[int]):
    """Yields the indices of ``sampler`` over and over, forever.

    ``len()`` is the length of one pass of ``sampler``. A sampler that yields nothing ends the
    iteration instead of looping.

    Args:
        sampler: The sampler to repeat.
    """

    def __init__(self, sampler: Iterable[int]) -> None:
        self._sampler = sampler

    def __len__(self) -> int:
        return _length(self._sampler, "sampler")

    def __iter__(self) -> Iterator[int]:
        return _repeat(self._sampler)


class RepeatBatchSampler(torch.utils.data.BatchSampler):
    """Yields the batches of ``batch_sampler`` over and over, forever: training data.

    ``len()`` is the number of batches in one pass of ``batch_sampler``. A batch sampler that
    yields nothing ends the iteration instead of looping.

    Args:
        batch_sampler: The batch sampler to repeat.
    """

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        # torch's BatchSampler.__init__ builds batches from a sampler; this one wraps batches.
        self.batch_sampler = batch_sampler

    def __len__(self) -> int:
        return _length(self.batch_sampler, "batch sampler")

    def __iter__(self) -> Iterator[list[int]]:
        return _repeat(self.batch_sampler)


class SkipSampler(torch.utils.data.Sampler[int]):
    """Leaves out the first ``skip`` indices of ``sampler`` and yields the rest.

    Wrap a repeated sampler (skip after repeat), or the skip is applied to every epoch.
    ``len()`` is the length of ``sampler``, whatever ``skip`` is. Resuming by records
    skipped is only exact when every batch has the same size; prefer
    :class:`SkipBatchSampler`.

    Args:
        sampler: The sampler to skip into.
        skip: How many indices to leave out.
    """

    def __init__(self, sampler: Iterable[int], skip: int) -> None:
        _check_skip(skip)
        self._sampler = sampler
        self._skip = skip

    def __len__(self) -> int:
        return _length(self._sampler, "sampler")

    def __iter__(self) -> Iterator[int]:
        return _skip(self._sampler, self._skip)


class SkipBatchSampler(torch.utils.data.BatchSampler):
    """Leaves out the first ``skip`` batches of ``batch_sampler`` and yields the rest: where a
    training run resumed from a checkpoint carries on.

    Wrap a repeated batch sampler (skip after repeat), or the skip is applied to every epoch;
    wrap a sharded one (skip after shard) with the batches this rank has already trained.
    ``len()`` is the length of ``batch_sampler``, whatever ``skip`` is.

    Args:
        batch_sampler: The batch sampler to skip into.
        skip: How many batches to leave out.
    """

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        _check_skip(skip)
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __len__(self) -> int:
        return _length(self.batch_sampler, "batch sampler")

    def __iter__(self) -> Iterator[list[int]]:
        return _skip(self.batch_sampler, self.skip)


class DistributedSampler(torch.utils.data.Sampler[int]):
    """Yields rank ``rank``'s share of the indices of ``sampler``: index ``i`` of its
    iteration goes to rank ``i % num_workers``.

    Unlike torch's ``torch.utils.data.DistributedSampler`` this wraps another sampler (of any
    length) rather than a dataset, and neither shuffles nor pads. Every rank reports the same
    ``len()``, the longest share (``ceil(len(sampler) / num_workers)``), so that epochs end at
    the same step everywhere; a shorter share yields one index less than that.

    Args:
        sampler: The sampler to shard.
        num_workers: The number of ranks.
        rank: This rank, in ``[0, num_workers)``.

    Raises:
        ValueError: ``num_workers`` below 1, or ``rank`` outside ``[0, num_workers)``.
    """

    def __init__(self, sampler: Iterable[int], num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self._sampler = sampler
        self._num_workers = num_workers
        self._rank = rank

    def __len__(self) -> int:
        return _shard_length(_length(self._sampler, "sampler"), self._num_workers)

    def __iter__(self) -> Iterator[int]:
        return _shard(self._sampler, self._num_workers, self._rank)


class DistributedBatchSampler(torch.utils.data.BatchSampler):
    """Yields rank ``rank``'s share of the batches of ``batch_sampler``: batch ``i`` of its
    iteration goes to rank ``i % num_workers``, so the ranks' ``k``-th batches together are
    the ``k``-th global batch.

    Unlike torch's ``DistributedSampler``, which comes before batching and stands alone, this
    wraps a batch sampler in a chain, and neither shuffles nor pads. Every rank reports the
    same ``len()``, the longest share (``ceil(len(batch_sampler) / num_workers)``), so that
    epochs end at the same step everywhere; a shorter share yields one batch less than that.

    Args:
        batch_sampler: The batch sampler to shard; its batch size is the per-rank one.
        num_workers: The number of ranks.
        rank: This rank, in ``[0, num_workers)``.

    Raises:
        ValueError: ``num_workers`` below 1, or ``rank`` outside ``[0, num_workers)``.
    """

    def __init__(self, batch_sampler: Iterable[list[int]], num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.rank = rank

    def __len__(self) -> int:
        return _shard_length(_length(self.batch_sampler, "batch sampler"), self.num_workers)

    def __iter__(self) -> Iterator[list[int]]:
        return _shard(self.batch_sampler, self.num_workers, self.rank)


class _SeededShuffle:
    """Shuffles a whole pass of what it wraps; pass ``e`` (from 0) is permuted from
    ``(seed, e)``, so the sequence of orders is the same in every run with the same seed."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._epoch = 0

    def shuffled(self, items: list[T]) -> Iterator[T]:
        rng = np.random.default_rng(epoch_seed(self._seed, self._epoch))
        self._epoch += 1
        return (items[int(i)] for i in rng.permutation(len(items)))


class ReproducibleShuffleSampler(torch.utils.data.Sampler[int]):
    """Yields the indices of ``sampler`` in an order shuffled from ``seed``.

    Each iteration reads all of ``sampler`` and permutes it; successive iterations (epochs)
    get different orders, and the sequence of orders is the same in every run with the same
    seed. Shuffle before skipping and before repeating: it never ends on a repeated sampler.

    Args:
        sampler: The sampler whose indices are shuffled.
        seed: The seed of the shuffles.
    """

    def __init__(self, sampler: Iterable[int], seed: int) -> None:
        self._sampler = sampler
        self._shuffle = _SeededShuffle(seed)

    def __len__(self) -> int:
        return _length(self._sampler, "sampler")

    def __iter__(self) -> Iterator[int]:
        return self._shuffle.shuffled(list(self._sampler))


class ReproducibleShuffleBatchSampler(torch.utils.data.BatchSampler):
    """Yields the batches of ``batch_sampler`` in an order shuffled from ``seed``.

    As :class:`ReproducibleShuffleSampler`, but whole batches change places and each batch
    keeps its records; prefer shuffling indices where the batches can be rebuilt.

    Args:
        batch_sampler: The batch sampler whose batches are shuffled.
        seed: The seed of the shuffles.
    """

    def __init__(self, batch_sampler: Iterable[list[int]], seed: int) -> None:
        self.batch_sampler = batch_sampler
        self._shuffle = _SeededShuffle(seed)

    def __len__(self) -> int:
        return _length(self.batch_sampler, "batch sampler")

    def __iter__(self) -> Iterator[list[int]]:
        return self._shuffle.shuffled(list(self.batch_sampler))


__all__ = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
]
