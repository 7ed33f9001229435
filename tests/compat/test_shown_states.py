"""Active experiments and trials are shown as QUEUED, STARTING or RUNNING, as Determined's REST
API shows them, on a real master with two slots; a filter by those states selects by them."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

ACTIVE = ("QUEUED", "STARTING", "RUNNING")


def listed(master: MasterProcess, *states: str) -> list[int]:
    query = "&".join(f"state={s}" for s in states)
    return [e["id"] for e in master.get(f"/experiments?{query}")["experiments"]]


def test_active_experiments_show_what_their_trials_do(
        module_master: MasterProcess, steps_experiment: Any) -> None:
    m = module_master
    holding = {**steps_experiment(length=100_000, sleep=0.05, name="holds-both-slots"),
               "resources": {"slots_per_trial": 2}}
    first = m.create_ok(holding)
    m.wait(lambda: m.experiment(first)["state"] == "RUNNING", 60)
    [trial] = m.trials(first)
    assert (trial["state"], trial["run_state"]) == ("RUNNING", "RUNNING")

    # No slot is free: the second waits, and says so.
    second = m.create_ok(steps_experiment(length=100_000, sleep=0.05, name="waits"))
    m.wait(lambda: m.trials(second), 30)
    assert m.experiment(second)["state"] == "QUEUED"
    assert m.trials(second)[0]["state"] == "QUEUED"

    assert listed(m, "RUNNING") == [first]
    assert listed(m, "QUEUED") == [second]
    assert listed(m, "QUEUED", "RUNNING") == [second, first]
    assert listed(m, "ACTIVE") == [second, first]  # every active one, as on Determined
    assert listed(m, "COMPLETED") == []

    # Paused, the first frees its slots and the second runs.
    assert m.api("POST", f"/experiments/{first}/pause").status_code == 200
    m.wait(lambda: m.experiment(second)["state"] == "RUNNING", 60)
    assert m.experiment(first)["state"] == "PAUSED"
    assert listed(m, "RUNNING") == [second]
    assert listed(m, "PAUSED", "RUNNING") == [second, first]

    # A state that is not one is refused, naming it.
    bad = m.api("GET", "/experiments?state=SLEEPING")
    assert bad.status_code == 400 and "'SLEEPING' is not an experiment state" in bad.text

    for eid in (first, second):
        assert m.api("POST", f"/experiments/{eid}/kill").status_code == 200
    for eid in (first, second):
        assert m.wait_state(eid, timeout=60)["state"] == "CANCELED"
    assert all(t["state"] == "CANCELED" for eid in (first, second) for t in m.trials(eid))
