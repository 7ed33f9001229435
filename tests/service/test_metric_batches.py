"""Metric batches against a real master: a batch sent again under its key is stored once, and
the answer says it was a repeat."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.testing import MasterProcess


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def _batch(steps: range, key: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"group": "training", "metrics": [
        {"steps_completed": s, "metrics": {"loss": 1.0 / (s + 1)}} for s in steps]}
    if key is not None:
        body["key"] = key
    return body


@pytest.mark.slow
def test_a_repeated_batch_is_stored_once_and_answered_as_a_repeat(
        master: MasterProcess) -> None:
    with master.idle_trial("batches") as (eid, trial_id):
        path = f"/trials/{trial_id}/metrics"

        first = master.api("POST", path, json=_batch(range(1, 4), "run-a:1"))
        assert first.status_code == 200, first.text
        assert first.json() == {"count": 3, "repeat": False}
        again = master.api("POST", path, json=_batch(range(1, 4), "run-a:1"))
        assert again.json() == {"count": 3, "repeat": True}
        # Without a key every batch is stored; another key is another batch.
        assert master.api("POST", path, json=_batch(range(4, 5), None)).json()["repeat"] is False
        assert master.api("POST", path, json=_batch(range(5, 6), "run-a:2")).json() == {
            "count": 1, "repeat": False}

        steps = [m["steps_completed"] for m in master.get(f"{path}?group=training")["metrics"]]
        assert steps == [1, 2, 3, 4, 5]
        assert master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] == 5

        for bad in ["", "x" * 129, "a b", "nul\x00", 7]:
            r = master.api("POST", path, json={**_batch(range(6, 7), None), "key": bad})
            assert r.status_code == 400, (bad, r.text)
            assert ("NUL" if "\x00" in str(bad) else "key") in r.json()["error"]
        assert len(master.get(f"{path}?group=training")["metrics"]) == 5


@pytest.mark.slow
def test_a_repeated_checkpoint_report_changes_nothing_and_says_so(
        master: MasterProcess) -> None:
    """The uuid is a checkpoint report's key: the same report again answers 200 with what was
    stored; another checkpoint under a taken uuid is a 409."""
    with master.idle_trial("checkpoint reports") as (eid, trial_id):
        report = {"uuid": "5b8f4e4e-8f0e-4c4f-9a55-000000000001", "trial_id": trial_id,
                  "steps_completed": 4, "resources": {"model.pt": 10}, "metadata": {},
                  "state": "COMPLETED"}
        first = master.api("POST", "/checkpoints", json=report)
        assert first.status_code == 201, first.text
        again = master.api("POST", "/checkpoints", json=report)
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        other = master.api("POST", "/checkpoints", json={**report, "steps_completed": 5})
        assert other.status_code == 409 and "already exists" in other.json()["error"]
        assert [c["uuid"] for c in master.get(f"/experiments/{eid}/checkpoints")[
            "checkpoints"]] == [report["uuid"]]
        assert master.get(f"/trials/{trial_id}")["trial"]["latest_checkpoint"] == report["uuid"]
