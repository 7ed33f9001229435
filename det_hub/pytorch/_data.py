"""Data loading that can be sharded across ranks and resumed at an exact batch: torch's
``DataLoader`` over :class:`~det_hub.data.ShardedBatchSampler` (see there)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils.data

from det_hub.data._sampler import ShardedBatchSampler

TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor
"""What a batch can be: a tensor, a sequence of tensors, or a dict of them."""


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
