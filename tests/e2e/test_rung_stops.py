"""ASHA's stops land at the rung: Core API trials on a real master that ask should_preempt()
right after each validation train no batch past the validation the searcher stopped them on.

The trials run ``contexts/rung_stops/train.py`` (the loop Determined's users write) with
1 ms batches: a decision that reached the trial even a few milliseconds after its report
returned would show as batches trained past its last validation.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

CONTEXT = Path(__file__).parent / "contexts" / "rung_stops"
MAX_LENGTH = 200


def test_trials_stopped_at_a_rung_train_no_batch_past_it(master: MasterProcess) -> None:
    eid = master.create_ok({
        "name": "rung-stops", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                            "sleep": 0.001},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "max_length": {"batches": MAX_LENGTH}, "max_trials": 8, "divisor": 2,
                     "max_rungs": 3, "mode": "aggressive", "stop_once": True,
                     "max_concurrent_trials": 2},
        "reproducibility": {"experiment_seed": 11},
        "max_restarts": 0,
    }, context=CONTEXT)
    exp = master.wait_state(eid, timeout=240)
    assert exp["state"] == "COMPLETED", master.log_path.read_text()[-3000:]
    [bracket] = master.get(f"/experiments/{eid}/searcher")["searcher"]["rungs"]["brackets"]
    rungs = [r["length"] for r in bracket["rungs"]]
    assert rungs == [50, 100, 200]
    stopped = []
    for trial in master.trials(eid):
        rows = master.get(f"/trials/{trial['id']}/metrics")["metrics"]
        validations = [r["steps_completed"] for r in rows if r["group"] == "validation"]
        [trained] = [r["metrics"]["trained"] for r in rows if r["group"] == "training"]
        assert trial["state"] == "COMPLETED"
        # It validated at every rung it reached, and trained not one batch past the last.
        assert validations == [n for n in rungs if n <= trained], (trial["id"], validations)
        assert trained == validations[-1], (trial["id"], trained, validations)
        if trained < MAX_LENGTH:
            stopped.append(trained)
    assert stopped, "ASHA stopped no trial"
    assert set(stopped) <= {50, 100}
