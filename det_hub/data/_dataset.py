"""A dataset of records in remote storage, cached per host and read with random access."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from det_hub.data._cache import HostCache
from det_hub.data._records import RecordFile
from det_hub.data._sampler import ShardedBatchSampler
from det_hub.data._sources import DataSource, Progress, source_for

T = TypeVar("T")


class RecordDataset(Generic[T]):
    """A record file (see :mod:`det_hub.data._records`) from a shared filesystem or object
    storage, fetched once to this host's cache and then read from local disk.

    It is a map-style dataset (``len``, ``[i]``), so it works as is with
    ``det_hub.pytorch.DataLoader`` (which shards and resumes it) and with torch's own loader;
    :func:`batches` does the same without torch.

    Args:
        location: ``s3://BUCKET/KEY``, a path, or a :class:`~det_hub.data.DataSource`.
        decode: Turns a record's bytes into a sample (``pickle.loads``, an image decoder,
            ...); the bytes themselves by default.
        s3: S3 settings for ``s3://`` locations (``endpoint_url``, ``access_key``,
            ``secret_key``, ...), as in the ``s3`` checkpoint storage.
        cache: The host cache; the default one (``$DET_HUB_DATA_CACHE``) when None.
        progress: Called with (bytes done, bytes in all) while the file is fetched.
    """

    @overload
    def __init__(
        self: RecordDataset[bytes],
        location: str | os.PathLike[str] | DataSource,
        decode: None = None,
        *,
        s3: Mapping[str, Any] | None = None,
        cache: HostCache | None = None,
        progress: Progress | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        location: str | os.PathLike[str] | DataSource,
        decode: Callable[[bytes], T],
        *,
        s3: Mapping[str, Any] | None = None,
        cache: HostCache | None = None,
        progress: Progress | None = None,
    ) -> None: ...

    def __init__(
        self,
        location: str | os.PathLike[str] | DataSource,
        decode: Callable[[bytes], Any] | None = None,
        *,
        s3: Mapping[str, Any] | None = None,
        cache: HostCache | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.source = source_for(location, s3)
        self.local_path = (cache or HostCache()).fetch(self.source, progress)
        self.records = RecordFile(self.local_path)
        self.decode = decode

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> T:
        record = self.records[index]
        return self.decode(record) if self.decode is not None else record  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"RecordDataset({self.source.url!r}, {len(self)} records)"


def batches(
    dataset: Any,
    batch_size: int,
    *,
    rank: int = 0,
    num_replicas: int = 1,
    shuffle: bool = True,
    seed: int = 0,
    skip: int = 0,
    repeat: bool = False,
    drop_last: bool = False,
) -> Iterator[list[Any]]:
    """One rank's batches of a map-style dataset, as lists of samples.

    The order of each epoch depends on ``(seed, epoch)`` alone, rank ``r`` of ``R`` gets the
    ``r``-th slice of every global batch, and ``skip`` global batches already done are not
    read: save the number of batches done in a checkpoint and pass it back as ``skip`` to go
    on mid-epoch exactly where training stopped (see :class:`ShardedBatchSampler`, which
    this follows).

    With the Core API, ``rank=ctx.distributed.rank`` and ``num_replicas=ctx.distributed.size``.
    """
    sampler = ShardedBatchSampler(
        len(dataset), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed,
        num_replicas=num_replicas, rank=rank, repeat=repeat, skip=skip)
    for indices in sampler:
        yield [dataset[i] for i in indices]


__all__ = ["RecordDataset", "batches"]
