"""A Core API script that writes the loop Determined's users write, for test_rung_stops.py.

It trains ``sleep``-second "batches" on the curve ``(x - 0.3) ** 2 + 1 / step``, reports a
validation at each of the searcher's rungs (``op.validate_at``) and at the operation's end,
and asks ``should_preempt()`` after every batch, returning as soon as it answers True. As it
ends it reports one training row, ``trained``: the batches this process trained.
"""

import time

import det_hub.core as core


def main() -> None:
    info = core.get_cluster_info()
    assert info is not None and info.trial is not None
    x, sleep = float(info.trial.hparams["x"]), float(info.trial.hparams["sleep"])
    step = 0
    with core.init() as core_context:
        try:
            for op in core_context.searcher.operations():
                loss = None
                while step < op.length:
                    time.sleep(sleep)
                    step += 1
                    if step in op.validate_at or step == op.length:
                        loss = (x - 0.3) ** 2 + 1.0 / step
                        core_context.train.report_validation_metrics(
                            steps_completed=step, metrics={"validation_loss": loss})
                    if core_context.preempt.should_preempt():
                        return
                op.report_completed(loss)
        finally:
            core_context.train.report_training_metrics(
                steps_completed=step, metrics={"trained": step})


if __name__ == "__main__":
    main()
