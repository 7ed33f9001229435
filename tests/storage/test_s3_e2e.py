"""An experiment whose ``checkpoint_storage`` is S3, on a real master with its local agent and
a real S3 server: its trial checkpoints into the bucket, crashes and resumes from a checkpoint
it downloads, the master records the checkpoints and its GC deletes their objects,
``det_hub.load_checkpoint`` downloads one, and a TensorBoard task shows the metrics whose
event files the trial uploaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import det_hub
from det_hub.client import Client
from det_hub.storage import S3Storage, build_storage
from det_hub.testing import MasterProcess
from det_hub.testing_s3 import SeaweedS3

pytestmark = pytest.mark.slow

PREFIX = "e2e"


def objects(server: SeaweedS3, bucket: str, prefix: str) -> dict[str, int]:
    pages = server.client().get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                       Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture(scope="module")
def finished(module_master: MasterProcess, s3_server: SeaweedS3) -> dict[str, Any]:
    """An experiment of the steps script with S3 storage, run to its end: it checkpoints at
    batches 2, 4 and 6 (and once more at the end), reports every 2 batches, and crashes at
    batch 3 on its first attempt."""
    bucket = s3_server.create_bucket()
    config = {
        "name": "s3", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 2, "checkpoint_every": 2,
                            "crash_once_at": 3},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 6}},
        "max_restarts": 1,
        "checkpoint_storage": s3_server.storage_config(bucket, PREFIX),
    }
    eid = module_master.create_ok(config)
    exp = module_master.wait_state(eid, timeout=180)
    assert exp["state"] == "COMPLETED", module_master.log_path.read_text()[-3000:]
    [trial] = module_master.trials(eid)
    return {"eid": eid, "trial": trial, "bucket": bucket}


def test_checkpoints_go_to_the_bucket_and_gc_deletes_them(
        module_master: MasterProcess, s3_server: SeaweedS3, finished: dict[str, Any]) -> None:
    m, bucket, trial = module_master, finished["bucket"], finished["trial"]
    assert trial["restarts"] == 1 and trial["steps_completed"] == 6
    logs = m.logs(trial["id"])
    assert "crashing at 3" in logs and "resumed at 2" in logs  # restored from the bucket

    def checkpoints() -> list[dict[str, Any]]:
        return m.get(f"/experiments/{finished['eid']}/checkpoints")["checkpoints"]

    # GC (save_trial_best=1, save_trial_latest=1) runs once the trial has ended.
    ckpts = m.wait(lambda: (c := checkpoints()) and all(
        x["state"] == "DELETED" for x in c if x["steps_completed"] < 6) and c)
    assert sorted(c["steps_completed"] for c in ckpts) == [2, 4, 6, 6]
    kept = [c for c in ckpts if c["state"] == "COMPLETED"]
    assert trial["latest_checkpoint"] in {c["uuid"] for c in kept}
    in_bucket = objects(s3_server, bucket, PREFIX + "/")
    for ckpt in ckpts:
        stored = {k.split("/", 2)[2]: size for k, size in in_bucket.items()
                  if k.startswith(f"{PREFIX}/{ckpt['uuid']}/")}
        if ckpt["state"] == "COMPLETED":
            assert stored == ckpt["resources"] and "state.json" in stored
        else:
            assert ckpt["state"] == "DELETED" and stored == {}


def test_load_checkpoint_downloads_it(
        module_master: MasterProcess, finished: dict[str, Any], tmp_path: Path) -> None:
    uuid = finished["trial"]["latest_checkpoint"]
    client = Client(module_master.url, module_master.token)
    try:
        loaded = det_hub.load_checkpoint(uuid, client=client)
        copied = det_hub.load_checkpoint(uuid, client=client, path=tmp_path / "copy")
    finally:
        client.close()
    assert isinstance(loaded, Path) and loaded.is_dir()
    assert json.loads((loaded / "state.json").read_text()) == {"step": 6}
    assert json.loads((loaded / "metadata.json").read_text()) == {"steps_completed": 6}
    assert copied == tmp_path / "copy"
    assert json.loads((copied / "state.json").read_text()) == {"step": 6}


def test_the_trials_event_files_are_in_the_bucket(
        s3_server: SeaweedS3, finished: dict[str, Any], tmp_path: Path) -> None:
    eid, tid, bucket = finished["eid"], finished["trial"]["id"], finished["bucket"]
    trial_dir = f"{PREFIX}/tensorboard/experiment/{eid}/trial/{tid}/"
    files = objects(s3_server, bucket, trial_dir)
    # One event file per run of the trial (it crashed once), each with content.
    assert len(files) == 2 and all(size > 0 for size in files.values())
    assert all(k[len(trial_dir):].startswith("events.out.tfevents.") for k in files)

    storage = build_storage(s3_server.storage_config(bucket, PREFIX))
    assert isinstance(storage, S3Storage)
    storage.download_tensorboard(eid, tmp_path)
    events = EventAccumulator(str(tmp_path / "trial" / str(tid)))
    events.Reload()
    assert sorted(e.step for e in events.Scalars("training/loss")) == [2, 4, 6]
    assert [(e.step, e.value) for e in events.Scalars("validation/validation_loss")] == [
        (6, pytest.approx(1 / 6))]


def test_a_tensorboard_task_shows_the_metrics_from_the_bucket(
        module_master: MasterProcess, finished: dict[str, Any]) -> None:
    m, eid, tid = module_master, finished["eid"], finished["trial"]["id"]
    done = m.cli("tensorboard", "start", str(eid), "--no-browser")
    assert done.returncode == 0, done.stdout + done.stderr
    url = done.stdout.strip().splitlines()[-1]
    board = m.wait(lambda: next((b for b in m.get("/tensorboards")["tensorboards"]
                                 if b["experiment_ids"] == [eid]), None))
    browser = requests.Session()
    try:
        assert browser.get(url, timeout=30).status_code == 200
        base = f"{m.url}/proxy/{board['id']}"
        run = f"experiment_{eid}/trial/{tid}"

        def scalars(tag: str) -> Callable[[], Any]:
            def points() -> Any:
                answer = browser.get(f"{base}/data/plugin/scalars/scalars",
                                     params={"run": run, "tag": tag}, timeout=10)
                return answer.status_code == 200 and answer.json()
            return points

        points = m.wait(scalars("training/loss"), timeout=60, every=1)
        assert sorted(p[1] for p in points) == [2, 4, 6]
    finally:
        m.cli("tensorboard", "kill", str(board["id"]), check=True)
