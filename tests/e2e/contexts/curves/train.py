"""A Core API script with a synthetic learning curve, for the search end-to-end tests.

``validation_loss`` after ``step`` batches is ``(x - 0.3) ** 2 + 1 / step``: every trial
improves with training, and the one with ``x`` nearest 0.3 is best at every length, so a
correct successive-halving search keeps exactly the right trials. The script checkpoints at
each operation's end and resumes from its latest checkpoint, printing how many batches this
process trained, so a test can tell that a promoted trial trained only the extra length.
"""

import json
import sys
import time

import det_hub.core as core


def loss(x: float, step: int) -> float:
    return (x - 0.3) ** 2 + 1.0 / step


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
        for op in ctx.searcher.operations():
            while step < op.length:
                step += 1
                time.sleep(float(hp.get("sleep", 0.02)))
                if step in op.validate_at:  # an ASHA rung: let the searcher decide
                    ctx.train.report_validation_metrics(
                        steps_completed=step, metrics={"validation_loss": loss(x, step)})
                if ctx.preempt.should_preempt():
                    break
            ctx.train.report_validation_metrics(
                steps_completed=step, metrics={"validation_loss": loss(x, step)})
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "state.json").write_text(json.dumps({"step": step}))
            if step < op.length:
                print(f"preempted at {step}", flush=True)
                break
            op.report_completed(loss(x, step))
        print(f"trained {step - started} batches in this process, {step} in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
