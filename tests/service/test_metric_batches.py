"""Metric batches against a real master: a batch sent again under its key is stored once, and
the answer says it was a repeat."""

from __future__ import annotations

import math
from typing import Any

import pytest

from det_hub.client import Client
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


@pytest.mark.slow
def test_columns_are_stored_once_and_read_back_in_bulk(master: MasterProcess) -> None:
    """A batch of columns is stored like a batch of rows (once under its key), read back as
    rows, as columns by REST and by the SDK (a pandas frame too), and refused whole when a
    column does not match its steps."""
    with master.idle_trial("columns") as (eid, trial_id):
        path = f"/trials/{trial_id}/metrics"
        body = {"group": "training", "key": "cols:1", "steps": [1, 2, 3],
                "metrics": {"loss": [0.5, "NaN", 0.25], "note": ["a", None, {"b": [1]}]},
                "report_times": [1_700_000_000.0, 1_700_000_000.5, 1_700_000_001.0]}
        assert master.api("POST", path, json=body).json() == {"count": 3, "repeat": False}
        assert master.api("POST", path, json=body).json() == {"count": 3, "repeat": True}
        rows = master.get(f"{path}?group=training")["metrics"]
        assert [(r["steps_completed"], r["metrics"]) for r in rows] == [
            (1, {"loss": 0.5, "note": "a"}), (2, {"loss": "NaN", "note": None}),
            (3, {"loss": 0.25, "note": {"b": [1]}})]
        assert rows[1]["report_time"].startswith("2023-11-14T22:13:20.5")
        assert master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] == 3
        master.api("POST", path, json={"group": "validation", "steps": [3],
                                       "metrics": {"loss": [0.75]}}).raise_for_status()

        bad = master.api("POST", path, json={"group": "training", "steps": [4, 5],
                                             "metrics": {"loss": [1.0]}})
        assert bad.status_code == 400
        assert bad.json()["error"] == "metrics.loss: 1 values for 2 steps; give one value per step"
        deep: Any = 1
        for _ in range(40):
            deep = [deep]
        bad = master.api("POST", path, json={"group": "training", "steps": [4],
                                             "metrics": {"loss": [deep]}})
        assert bad.status_code == 400 and "nested deeper than" in bad.json()["error"]

        columns = master.get(f"/trials/{trial_id}/metrics/columns?metric=loss")
        assert columns["trial_id"] == trial_id
        assert columns["groups"]["training"]["steps"] == [1, 2, 3]
        assert columns["groups"]["training"]["ids"] == [r["id"] for r in rows]
        assert columns["groups"]["training"]["metrics"] == {"loss": [0.5, "NaN", 0.25]}
        assert columns["groups"]["validation"]["metrics"] == {"loss": [0.75]}

        client = Client(master.url, token=master.token)
        got = client.trial_metric_columns(trial_id, "training", after=1)
        assert got["training"]["steps"] == [2, 3]
        assert math.isnan(got["training"]["metrics"]["loss"][0])
        assert got["training"]["metrics"]["note"] == [None, {"b": [1]}]
        master.api("POST", path, json={"group": "big", "steps": [1],
                                       "metrics": {"n": [2 ** 70]}}).raise_for_status()
        assert master.get(f"/trials/{trial_id}/metrics/columns?group=big")["groups"][
            "big"]["metrics"] == {"n": [2 ** 70]}
        assert client.trial_metric_columns(trial_id, "big")["big"]["metrics"] == {
            "n": [2 ** 70]}
        frame = client.trial_metrics_frame(trial_id, metrics=["loss"])
        assert list(frame.columns) == ["steps_completed", "id", "loss"]
        assert frame["steps_completed"].tolist() == [1, 2, 3]
        assert frame["loss"].iloc[2] == 0.25
