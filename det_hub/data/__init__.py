"""The data layer: datasets in object storage or on a shared filesystem, read as if local.

A dataset is a record file (:class:`RecordWriter` writes one; :func:`write_records` from any
iterable of bytes). :class:`RecordDataset` fetches it once per host into a local cache
(:class:`HostCache`; every rank and every DataLoader worker on the host shares the one copy),
then reads any record in O(1) from the memory-mapped file. :func:`batches` and
``det_hub.pytorch.DataLoader`` shard it across ranks and resume mid-epoch from a number of
batches done::

    import pickle
    from det_hub.data import RecordDataset, batches

    train = RecordDataset("s3://datasets/mnist/train.rec", pickle.loads,
                          s3={"endpoint_url": "http://127.0.0.1:8333"})
    for batch in batches(train, 64, rank=ctx.distributed.rank,
                         num_replicas=ctx.distributed.size, seed=seed, skip=done):
        ...
"""

from det_hub.data._cache import CACHE_ENV, HostCache, default_cache_dir
from det_hub.data._dataset import RecordDataset, batches
from det_hub.data._records import RecordFile, RecordFormatError, RecordWriter, write_records
from det_hub.data._sampler import ShardedBatchSampler, epoch_seed
from det_hub.data._sources import DataSource, FileSource, S3Source, source_for

__all__ = [
    "CACHE_ENV",
    "DataSource",
    "FileSource",
    "HostCache",
    "RecordDataset",
    "RecordFile",
    "RecordFormatError",
    "RecordWriter",
    "S3Source",
    "ShardedBatchSampler",
    "batches",
    "default_cache_dir",
    "epoch_seed",
    "source_for",
    "write_records",
]
