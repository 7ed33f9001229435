"""``Checkpoint.get_metrics()`` and ``ModelVersion.get_metrics()``: the metrics of the trials
that reported using a checkpoint or model version, read from the master."""

from __future__ import annotations

import math

import pytest
from fake_master import FakeMaster

from det_hub.client import Checkpoint, Client, DetHubError, MasterError, MetricReport

UUID = "0b8f2a52-6c1e-4d0c-9a57-3f0e4c1b2a9d"
ROWS = {"metrics": [
    {"id": 3, "trial_id": 12, "group": "validation", "steps_completed": 5,
     "report_time": "2026-11-25T10:00:00Z", "metrics": {"accuracy": 0.9, "loss": "NaN"}},
    {"id": 9, "trial_id": 14, "group": "validation", "steps_completed": 2,
     "report_time": "2026-11-25T11:00:00Z", "metrics": {"accuracy": 0.7}},
]}


def test_checkpoint_get_metrics(fake_master: FakeMaster) -> None:
    fake_master.json("GET", f"/checkpoints/{UUID}", {"checkpoint": {"uuid": UUID}})
    fake_master.json("GET", f"/checkpoints/{UUID}/metrics", ROWS)
    client = Client(fake_master.url, "t")

    reports = client.get_checkpoint(UUID).get_metrics()
    assert all(isinstance(r, MetricReport) for r in reports)
    assert [(r.trial_id, r.group, r.steps_completed) for r in reports] == [
        (12, "validation", 5), (14, "validation", 2)]
    assert reports[0].metrics["accuracy"] == 0.9 and math.isnan(reports[0].metrics["loss"])
    assert reports.raw == ROWS
    client.get_checkpoint(UUID).get_metrics(group="validation")
    queries = [r.query for r in fake_master.calls("GET", f"/checkpoints/{UUID}/metrics")]
    assert queries == [{}, {"group": "validation"}]


def test_model_version_get_metrics(fake_master: FakeMaster) -> None:
    version = {"id": 4, "model_id": 1, "model_name": "mnist cnn", "version": 2,
               "checkpoint_uuid": UUID, "checkpoint": {"uuid": UUID}}
    fake_master.json("GET", "/models/mnist%20cnn/versions/2", {"model_version": version})
    fake_master.json("GET", "/models/mnist%20cnn/versions/2/metrics", ROWS)
    fake_master.json("GET", f"/checkpoints/{UUID}/metrics", {"metrics": []})
    client = Client(fake_master.url, "t")

    got = client.get_model_version("mnist cnn", 2)
    assert [r.trial_id for r in got.get_metrics("validation")] == [12, 14]
    [call] = fake_master.calls("GET", "/models/mnist%20cnn/versions/2/metrics")
    assert call.query == {"group": "validation"}
    # The version's checkpoint reads the checkpoint's own.
    assert got.checkpoint.get_metrics() == []


def test_an_unknown_checkpoint_and_an_object_without_a_client(fake_master: FakeMaster) -> None:
    fake_master.json("GET", f"/checkpoints/{UUID}/metrics",
                     {"error": f"checkpoint {UUID} not found", "details": []}, status=404)
    with pytest.raises(MasterError) as caught:
        Client(fake_master.url, "t").checkpoint_metrics(UUID)
    assert caught.value.status == 404
    with pytest.raises(DetHubError, match="was not read through a Client"):
        Checkpoint.from_json({"uuid": UUID}).get_metrics()


def test_a_trial_metric_report_says_its_trial_when_the_master_does() -> None:
    assert MetricReport.from_json(ROWS["metrics"][0]).trial_id == 12
    assert MetricReport.from_json({"group": "training", "steps_completed": 1}).trial_id is None
