"""One rank of a two-rank torch.distributed (gloo) job using the Core API; see test_distributed."""

from __future__ import annotations

import json
import sys
import time

import det_hub.core as core


def main() -> None:
    with core.DistributedContext.from_torch_distributed() as dist:
        run(dist)


def run(dist: core.DistributedContext) -> None:
    out: dict[str, object] = {"rank": dist.rank, "size": dist.size, "cross_rank": dist.cross_rank}
    out["allgather"] = dist.allgather(dist.rank * 10)
    out["gather"] = dist.gather(f"r{dist.rank}")
    out["broadcast"] = dist.broadcast({"from": dist.rank})
    out["allgather_local"] = dist.allgather_local(dist.rank)
    out["broadcast_local"] = dist.broadcast_local(dist.rank)
    with core.init(distributed=dist) as ctx:
        # The chief's watcher needs a moment to hear the (already raised) flag; all ranks ask
        # together each round and must agree every time.
        answers = []
        for _ in range(200):
            answer = ctx.preempt.should_preempt()
            answers.append(answer)
            if answer:
                break
            time.sleep(0.01)
        out["preempt_answers_agree"] = ctx.distributed.allgather(answers)
        lengths = []
        for op in ctx.searcher.operations():
            lengths.append(op.length)
            if ctx.distributed.is_chief:
                ctx.train.report_validation_metrics(op.length, {"validation_loss": 1.0})
                op.report_completed(1.0)
        out["lengths"] = lengths
        with ctx.checkpoint.store_path({"steps_completed": 5}, shard=True) as (path, sid):
            (path / f"rank{dist.rank}.bin").write_bytes(b"x" * (dist.rank + 1))
        out["storage_id"] = sid
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
