"""A torch.distributed (gloo) Core API trial of two ranks that counts batches: every rank asks
``should_preempt()`` after each one (the chief's answer is every rank's), and when told to stop
each rank writes its shard of one checkpoint and exits; a later run goes on from it."""

import json
import sys
import time

import det_hub.core as core


def main() -> int:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None
    sleep = float(info.trial.hparams.get("sleep", 0.1))
    with core.DistributedContext.from_torch_distributed() as distributed, \
            core.init(distributed=distributed) as ctx:
        rank, step = distributed.rank, 0

        def save(at: int) -> None:
            with ctx.checkpoint.store_path({"steps_completed": at}, shard=True) as (path, _):
                (path / f"rank{rank}.json").write_text(json.dumps({"step": at}))

        if info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                step = json.loads((path / f"rank{rank}.json").read_text())["step"]
            print(f"rank {rank} resumed at {step}", flush=True)
        for op in ctx.searcher.operations():
            while step < op.length:
                step += 1
                time.sleep(sleep)
                if step % 5 == 0 and distributed.is_chief:
                    ctx.train.report_training_metrics(steps_completed=step,
                                                      metrics={"loss": 1.0 / step})
                if ctx.preempt.should_preempt():
                    save(step)
                    print(f"rank {rank} preempted at {step}", flush=True)
                    return 0
            save(step)
            if distributed.is_chief:
                ctx.train.report_validation_metrics(step, {"validation_loss": 1.0 / step})
                op.report_completed(1.0 / step)
    print(f"rank {rank} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
