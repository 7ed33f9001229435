"""A torch.distributed (gloo) trial for the multi-host tests: every rank says where it runs,
the ranks all-reduce, the chief reports the sum, and each rank writes its shard of one
checkpoint."""

import os
import socket
import sys

import torch
import torch.distributed as dist

import det_hub.core as core


def main() -> int:
    with core.DistributedContext.from_torch_distributed() as distributed:
        value = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(value)
        print(f"rank {distributed.rank} of {distributed.size} on node {distributed.cross_rank} "
              f"in container {os.path.exists('/.dockerenv')} agent "
              f"{os.environ.get('DET_HUB_NODE_RANK')} host {socket.gethostname()} "
              f"sum {value.item():g}", flush=True)
        with core.init(distributed=distributed) as ctx:
            for op in ctx.searcher.operations():
                if distributed.is_chief:
                    ctx.train.report_validation_metrics(
                        op.length, {"validation_loss": 1.0 / (1.0 + value.item())})
                    op.report_completed(value.item())
            with ctx.checkpoint.store_path({"steps_completed": 1}, shard=True) as (path, _):
                (path / f"rank{distributed.rank}.txt").write_text(str(distributed.rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
