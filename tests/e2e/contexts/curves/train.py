"""A Core API script with a synthetic learning curve, for the search end-to-end tests.

``validation_loss`` after ``step`` batches is ``(x - 0.3) ** 2 + 1 / step``: every trial
improves with training, and the one with ``x`` nearest 0.3 is best at every length, so a
correct successive-halving search keeps exactly the right trials. The script checkpoints at
each operation's end and resumes from its latest checkpoint, printing how many batches this
process trained, so a test can tell that a promoted trial trained only the extra length.

Optional hyperparameters: ``validate_every`` and ``checkpoint_every`` (batches) report and
checkpoint along the way; ``crash_at`` makes the first attempt exit with code 1 at that batch
(a restart resumes from a checkpoint and goes past it).
"""

import json
import sys
import time

import det_hub.core as core


def loss(x: float, step: int) -> float:
    return (x - 0.3) ** 2 + 1.0 / step


def save(ctx: core.Context, step: int) -> None:
    with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
        (path / "state.json").write_text(json.dumps({"step": step}))


def main() -> int:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None
    hp = info.trial.hparams
    x = float(hp["x"])
    with core.init() as ctx:
        step = 0
        if info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                step = json.loads((path / "state.json").read_text())["step"]
            print(f"resumed at {step}", flush=True)
        started = step
        validated = saved = False
        every, checkpoint_every = int(hp.get("validate_every", 0)), int(hp.get("checkpoint_every", 0))
        for op in ctx.searcher.operations():
            while step < op.length:
                step += 1
                time.sleep(float(hp.get("sleep", 0.02)))
                if step == hp.get("crash_at") and not info.latest_checkpoint:
                    print(f"crashing at {step}", flush=True)
                    return 1  # once: a restart resumes from a checkpoint and goes past it
                validated = step in op.validate_at or bool(every and step % every == 0)
                if validated:
                    ctx.train.report_validation_metrics(
                        steps_completed=step, metrics={"validation_loss": loss(x, step)})
                saved = bool(checkpoint_every and step % checkpoint_every == 0)
                if saved:
                    save(ctx, step)
                if ctx.preempt.should_preempt():
                    break
            if not validated:
                ctx.train.report_validation_metrics(
                    steps_completed=step, metrics={"validation_loss": loss(x, step)})
            if not saved:
                save(ctx, step)
            if step < op.length:
                print(f"preempted at {step}", flush=True)
                break
            op.report_completed(loss(x, step))
        print(f"trained {step - started} batches in this process, {step} in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
