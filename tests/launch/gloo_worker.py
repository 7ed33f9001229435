"""One worker of a launcher test: reports its environment and all-reduces its rank over gloo."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    env = os.environ
    print(
        f"rank {env['RANK']} world {env['WORLD_SIZE']} local {env['LOCAL_RANK']} "
        f"local_world {env['LOCAL_WORLD_SIZE']} cross {env['CROSS_RANK']}/{env['CROSS_SIZE']} "
        f"addr {env['MASTER_ADDR']} distributed {env['DET_HUB_DISTRIBUTED']} "
        f"omp {env.get('OMP_NUM_THREADS')}"
    )
    print(f"stderr of rank {env['RANK']}", file=sys.stderr)
    dist.init_process_group("gloo")  # env:// from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    value = torch.tensor([dist.get_rank()])
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()} sum {int(value.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
