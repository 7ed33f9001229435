"""``cancel``: an experiment stops gracefully (its trials checkpoint, then stop) and ends
CANCELED, against a real master with the e2e steps script."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.client import Client
from det_hub.testing import MasterProcess


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.mark.slow
def test_cancel_checkpoints_running_trials_then_ends_canceled(
        master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=2000, sleep=0.02, name="cancel"))
    master.wait(lambda: master.trials(eid) and master.trials(eid)[0]["steps_completed"] >= 4,
                timeout=60)
    r = master.api("POST", f"/experiments/{eid}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["experiment"]["state"] in ("STOPPING_CANCELED", "CANCELED")
    assert master.wait_state(eid, timeout=60)["state"] == "CANCELED"
    [trial] = master.trials(eid)
    assert trial["state"] == "CANCELED"
    logs = master.logs(trial["id"])
    # The script checkpointed when asked to stop, as a pause asks it: not killed mid-step.
    stopped = [line for line in logs if line.startswith("preempted at ")]
    assert len(stopped) == 1, logs
    step = int(stopped[0].split()[-1])
    assert 4 <= step < 2000
    checkpoints = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert [c["steps_completed"] for c in checkpoints] == [step]
    # Cancelling a finished experiment changes nothing.
    again = Client(master.url, master.token).cancel_experiment(eid)
    assert again.state == "CANCELED"


@pytest.mark.slow
def test_cancel_a_paused_experiment(master: MasterProcess, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=50, sleep=0.0, name="paused"),
                           activate=False)
    assert master.experiment(eid)["state"] == "PAUSED"
    assert master.cli("experiment", "cancel", str(eid)).returncode == 0
    assert master.wait_state(eid, timeout=30)["state"] == "CANCELED"
