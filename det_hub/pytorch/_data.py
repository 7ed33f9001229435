"""Data loading that can be sharded across ranks and resumed at an exact batch: torch's
``DataLoader`` over :class:`~det_hub.data.ShardedBatchSampler` (see there); and Determined's
helpers for batches (:func:`to_device`, :func:`data_length`) and batch samplers
(:func:`adapt_batch_sampler`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data

from det_hub.data import ShardedBatchSampler
from det_hub.pytorch import samplers

logger = logging.getLogger("det_hub.pytorch")

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


def adapt_batch_sampler(
    batch_sampler: Iterable[list[int]],
    repeat: bool = False,
    skip: int = 0,
    num_replicas: int = 1,
    rank: int = 0,
) -> Iterable[list[int]]:
    """Make a batch sampler repeat (training), start after ``skip`` batches (resuming) and
    give rank ``rank`` its share of the batches (distributed training).

    A det_hub :class:`~det_hub.data.ShardedBatchSampler` that is not adapted yet (one rank, no
    repeat, no skip) is rebuilt with these arguments: its per-rank batches are slices of the
    same global batches, with shards of equal length. Any other batch sampler is wrapped, in
    this order, in :class:`~det_hub.pytorch.samplers.RepeatBatchSampler`,
    :class:`~det_hub.pytorch.samplers.DistributedBatchSampler` (batch ``i`` to rank
    ``i % num_replicas``) and :class:`~det_hub.pytorch.samplers.SkipBatchSampler`. Either way
    ``skip`` counts the batches each rank has already yielded, i.e. global batches, and the
    batch size of ``batch_sampler`` is the per-rank one.

    Args:
        batch_sampler: The batch sampler, e.g. a torch ``BatchSampler``.
        repeat: Go through it forever instead of once.
        skip: Batches of this rank to leave out from the start.
        num_replicas: The number of ranks.
        rank: This rank, in ``[0, num_replicas)``.

    Returns:
        The adapted batch sampler, to give to a torch ``DataLoader`` as ``batch_sampler``.

    Raises:
        ValueError: ``skip`` below 0, ``num_replicas`` below 1 or ``rank`` outside
            ``[0, num_replicas)``.
    """
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip must be an integer >= 0, not {skip!r}")
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"num_replicas must be an integer >= 1, not {num_replicas!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be an integer in [0, {num_replicas}), not {rank!r}")
    if (
        isinstance(batch_sampler, ShardedBatchSampler)
        and batch_sampler.num_replicas == 1
        and not batch_sampler.repeat
        and batch_sampler.skip == 0
    ):
        return ShardedBatchSampler(
            batch_sampler.num_samples,
            batch_sampler.batch_size,
            shuffle=batch_sampler.shuffle,
            drop_last=batch_sampler.drop_last,
            seed=batch_sampler.seed,
            num_replicas=num_replicas,
            rank=rank,
            repeat=repeat,
            skip=skip,
            sampler=batch_sampler.sampler,
        )
    adapted = batch_sampler
    if repeat:
        adapted = samplers.RepeatBatchSampler(adapted)
    if num_replicas > 1:
        adapted = samplers.DistributedBatchSampler(adapted, num_replicas, rank)
    # After sharding: a resumed rank skips the batches it has trained, one per global batch.
    if skip > 0:
        adapted = samplers.SkipBatchSampler(adapted, skip)
    return adapted


def data_length(data: Any) -> int:
    """The number of records in a batch, as Determined counts them.

    A tensor or numpy array gives its first dimension; a dict, list or tuple gives the length
    of its first value, looked for recursively, so every leaf is assumed to hold the same
    number of records. A list or tuple of other things (strings, numbers) is a list of
    records and gives its own length. Anything else with a ``len()`` (a torch
    ``DataLoader``, a dataset) gives its ``len()``.

    Raises:
        ValueError: An empty dict, list or tuple (no value to measure).
        TypeError: A scalar (0-dimensional) tensor or array, a dict whose first value is
            neither a tensor, an array nor a container of them, or an object without a length
            (an iterable dataset's loader, a generator, a number).
    """
    if isinstance(data, (torch.Tensor, np.ndarray)):
        if data.ndim == 0:
            raise TypeError("a 0-dimensional tensor has no length; batches have a first dimension")
        return int(data.shape[0])
    if isinstance(data, (Mapping, list, tuple)):
        if len(data) == 0:
            raise ValueError(
                f"cannot tell the length of an empty {type(data).__name__}: a batch needs at "
                "least one tensor or array"
            )
        first = next(iter(data.values())) if isinstance(data, Mapping) else data[0]
        if isinstance(first, (torch.Tensor, np.ndarray, Mapping, list, tuple)):
            return data_length(first)
        if isinstance(data, Mapping):
            raise TypeError(
                f"cannot tell the length of a batch whose first value is a "
                f"{type(first).__name__}; put a tensor or an array first"
            )
        return len(data)
    try:
        return len(data)
    except TypeError:
        raise TypeError(
            f"cannot tell the length of data of type {type(data).__name__}: it is neither a "
            "tensor, an array, a dict, list or tuple of them, nor an object with len()"
        ) from None


def to_device(
    data: Any, device: torch.device | str, warned_types: set[type] | None = None
) -> Any:
    """``data`` with every tensor in it on ``device``, in the same structure.

    Dicts (and other mappings), lists, tuples and named tuples are walked into and rebuilt;
    tensors, and any object with a callable ``to`` (a ``PackedSequence``, a module), are
    moved with ``.to(device)``; numpy arrays of numbers or booleans become tensors on
    ``device``. Anything else is returned unchanged, and logged once per type: a warning the
    first time that type is met while ``warned_types`` (updated in place) does not hold it.

    Args:
        data: A batch: a tensor, array, or containers of them.
        device: Where the tensors go.
        warned_types: The types already logged as not movable; pass the same set to every
            call to log each type once in all (default: once per call).
    """
    return move_to_device(data, torch.device(device), set() if warned_types is None else warned_types)


def move_to_device(data: Any, device: torch.device, warned_types: set[type]) -> Any:
    """:func:`to_device` for a ``torch.device`` and a set of its own: what a trial context
    calls once a batch."""
    # Asynchronous from pinned memory; the copy is ordered before later work on the stream.
    return _to_device(data, device, device.type == "cuda", warned_types)


def _to_device(data: Any, device: torch.device, non_blocking: bool, warned: set[type]) -> Any:
    # Called once a batch: plain tuples, lists and dicts are met before the checks that cost
    # an ABC lookup (Mapping) or an attribute lookup (a named tuple's _fields).
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    kind = type(data)
    if kind is tuple or kind is list:
        items = [_to_device(value, device, non_blocking, warned) for value in data]
        return items if kind is list else tuple(items)
    if isinstance(data, Mapping):
        moved = {key: _to_device(value, device, non_blocking, warned)
                 for key, value in data.items()}
        if kind is dict:
            return moved
        try:
            return type(data)(moved)  # type: ignore[call-arg]
        except TypeError:
            return moved  # a mapping type that cannot be built from a dict (defaultdict)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(_to_device(value, device, non_blocking, warned) for value in data))
    if isinstance(data, (list, tuple)):  # a subclass of either
        items = [_to_device(value, device, non_blocking, warned) for value in data]
        try:
            return type(data)(items)
        except TypeError:
            return items if isinstance(data, list) else tuple(items)
    if isinstance(data, np.ndarray) and data.dtype.kind in "biufc":
        return torch.from_numpy(data).to(device)
    move = getattr(data, "to", None)
    if callable(move):
        return move(device)
    if type(data) not in warned:
        warned.add(type(data))
        logger.warning("cannot move data of type %s to %s; left where it is",
                       type(data).__name__, device)
    return data
