"""Data loading that can be sharded across ranks and resumed at an exact batch.

torch's ``DistributedSampler`` shards, but cannot start in the middle of an epoch, and a
shuffled torch ``DataLoader`` draws from the global RNG. The sampler here makes each epoch's
order a function of (seed, epoch) alone, so training resumed from a checkpoint sees exactly
the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor
"""What a batch can be: a tensor, a sequence of tensors, or a dict of them."""


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


class DataLoader:
    """The arguments of a torch ``DataLoader``, turned into a sharded, resumable one later.

    Takes torch's arguments. det_hub calls :meth:`get_data_loader` with the rank, the number
    of ranks and where to resume; ``batch_size`` is the per-rank batch size
    (``context.get_per_slot_batch_size()``). ``shuffle=True`` shuffles with a permutation seeded
    by the trial seed and the epoch, never from the global RNG. Iterable datasets are passed
    through unsharded.

    Raises:
        ValueError: ``batch_sampler`` is given (det_hub builds the batches itself), or both
            ``sampler`` and ``shuffle``.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
    ) -> None:
        if batch_sampler is not None:
            raise ValueError(
                "det_hub.pytorch.DataLoader does not take batch_sampler: it builds sharded, "
                "resumable batches itself; give batch_size (and sampler) instead"
            )
        if sampler is not None and shuffle:
            raise ValueError("sampler and shuffle=True cannot be used together")
        if batch_size is None or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, not {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.sampler = sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.drop_last = drop_last
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device

    @property
    def is_iterable(self) -> bool:
        """Whether the dataset is an ``IterableDataset`` (no indices, so no sharding)."""
        return isinstance(self.dataset, torch.utils.data.IterableDataset)

    def batch_sampler(
        self,
        repeat: bool = False,
        skip: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
    ) -> ShardedBatchSampler:
        """The batch sampler :meth:`get_data_loader` uses."""
        return ShardedBatchSampler(
            len(self.dataset),
            self.batch_size,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            seed=seed,
            num_replicas=num_replicas,
            rank=rank,
            repeat=repeat,
            skip=skip,
            sampler=self.sampler,
        )

    def get_data_loader(
        self,
        repeat: bool = False,
        skip: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 0,
    ) -> torch.utils.data.DataLoader:
        """A torch ``DataLoader`` giving rank ``rank``'s share of the batches.

        Args:
            repeat: Run through epochs forever (training) instead of once (validation).
            skip: Global batches already done; the loader starts at the next one.
            num_replicas: Number of ranks sharing the data.
            rank: This rank.
            seed: Seed of the shuffles (the trial seed); epoch ``e`` is shuffled from
                ``(seed, e)``.
        """
        # The loader's own generator supplies worker seeds, which torch otherwise draws from
        # the global RNG: drawing there would make training depend on when loaders are built.
        generator = self.generator
        if generator is None:
            generator = torch.Generator()
            generator.manual_seed(seed)
        common: dict[str, Any] = {
            "num_workers": self.num_workers,
            "collate_fn": self.collate_fn,
            "pin_memory": self.pin_memory,
            "timeout": self.timeout,
            "worker_init_fn": self.worker_init_fn,
            "multiprocessing_context": self.multiprocessing_context,
            "generator": generator,
            "prefetch_factor": self.prefetch_factor,
            "persistent_workers": self.persistent_workers,
            "pin_memory_device": self.pin_memory_device,
        }
        if self.is_iterable:
            return torch.utils.data.DataLoader(
                self.dataset, batch_size=self.batch_size, drop_last=self.drop_last, **common
            )
        sampler = self.batch_sampler(repeat, skip, num_replicas, rank, seed)
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=sampler, **common)

    def __len__(self) -> int:
        """Batches in one epoch on one rank alone."""
        if self.is_iterable:
            raise TypeError("the length of an IterableDataset's loader is unknown")
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
