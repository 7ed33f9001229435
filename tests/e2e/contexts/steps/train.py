"""A Core API script for the end-to-end tests: counts batches, checkpoints, obeys pauses.

Hyperparameters steer it: ``sleep`` (seconds per batch), ``checkpoint_every``,
``report_every``, ``crash_once_at`` (exit 3 at that batch on the first attempt only),
``exit_code`` (exit with it after training), ``print_token`` (print the allocation token to
the trial's log, so a test can try to misuse it), ``ignore_preempt`` (never stop when asked to),
``report_where`` (print whether it runs in a container).
"""

import json
import os
import sys
import time

import det_hub.core as core


def main() -> int:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None
    hp = info.trial.hparams
    if hp.get("print_token"):
        print("allocation token " + json.dumps({
            "token": os.environ["DET_HUB_ALLOCATION_TOKEN"],
            "allocation_id": os.environ["DET_HUB_ALLOCATION_ID"],
            "trial_id": info.trial.trial_id}), flush=True)
    if hp.get("report_where"):
        print(f"in container {os.path.exists('/.dockerenv')} on agent "
              f"{info.agent_id}", flush=True)
    with core.init() as ctx:

        def save(step: int) -> None:
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, uuid):
                (path / "state.json").write_text(json.dumps({"step": step}))
            print(f"checkpoint {uuid} at {step}", flush=True)

        step = 0
        if info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                step = json.loads((path / "state.json").read_text())["step"]
            print(f"resumed at {step}", flush=True)
        for op in ctx.searcher.operations():
            while step < op.length:
                step += 1
                time.sleep(hp.get("sleep", 0.0))
                if step % hp.get("report_every", 5) == 0:
                    ctx.train.report_training_metrics(steps_completed=step,
                                                      metrics={"loss": 1.0 / step})
                    op.report_progress(step)
                if hp.get("crash_once_at") == step and info.latest_checkpoint is None:
                    print(f"crashing at {step}", flush=True)
                    return 3
                if step % hp.get("checkpoint_every", 1000) == 0:
                    save(step)
                if not hp.get("ignore_preempt") and ctx.preempt.should_preempt():
                    save(step)
                    print(f"preempted at {step}", flush=True)
                    return 0
            ctx.train.report_validation_metrics(steps_completed=step,
                                                metrics={"validation_loss": 1.0 / step})
            print(f"experiment best {ctx.train.get_experiment_best_validation()}", flush=True)
            save(step)
            op.report_completed(1.0 / step)
    print("done", flush=True)
    return int(hp.get("exit_code", 0))


if __name__ == "__main__":
    sys.exit(main())
