"""A trial for the fault tests: one training row per step (``loss`` = 1 / step), a checkpoint
every ``checkpoint_every`` steps, ``sleep`` seconds per step, and a validation at the end. It
resumes from its latest checkpoint, as training code does, and does nothing else to survive
what the tests do to it.
"""

import json
import time

import det_hub.core as core


def main() -> None:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None
    hp = info.trial.hparams
    steps, every, sleep = int(hp["steps"]), int(hp["checkpoint_every"]), float(hp["sleep"])
    with core.init() as ctx:
        step = 0
        if info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                step = json.loads((path / "state.json").read_text())["step"]
            print(f"resumed at {step}", flush=True)
        while step < steps:
            step += 1
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
            if step % every == 0:
                with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "state.json").write_text(json.dumps({"step": step}))
            if sleep:
                time.sleep(sleep)
        ctx.train.report_validation_metrics(steps_completed=step,
                                            metrics={"validation_loss": 1 / step})
    print("done", flush=True)


if __name__ == "__main__":
    main()
