"""The det-hub command against a real master, as a user types it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from det_hub.testing import MasterProcess

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow


def test_the_core_api_example_runs_from_create_to_completed(master: MasterProcess) -> None:
    done = master.cli("experiment", "create", "examples/core_api/const.yaml",
                      "examples/core_api", "-f")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Created experiment 1" in done.stdout
    assert "validation at batch 200" in done.stdout
    assert done.stdout.rstrip().endswith("Experiment 1 ended: COMPLETED")

    listing = json.loads(master.cli("experiment", "list", "--json", check=True).stdout)
    [exp] = listing["experiments"]
    assert exp["state"] == "COMPLETED" and exp["name"] == "core-api-const"
    described = json.loads(master.cli("e", "describe", "1", "--json", check=True).stdout)
    [trial] = described["trials"]
    assert trial["steps_completed"] == 200
    assert trial["best_validation"]["metrics"]["validation_loss"] < 0.1  # it learned
    table = master.cli("experiment", "list-trials", "1", check=True).stdout
    assert "COMPLETED" in table and "learning_rate=0.05" in table
    ckpts = json.loads(master.cli("checkpoint", "list", "1", "--json", check=True).stdout)
    assert [c["uuid"] for c in ckpts["checkpoints"]] == [trial["latest_checkpoint"]]
    logs = master.cli("trial", "logs", str(trial["id"]), check=True).stdout
    assert "done" in logs and "batch 200/200" in logs
    metrics = json.loads(master.cli("trial", "metrics", str(trial["id"]), "--group",
                                    "validation", "--json", check=True).stdout)
    assert [m["steps_completed"] for m in metrics["metrics"]] == [200]


def test_create_follow_exits_nonzero_when_the_experiment_errors(
        master: MasterProcess, tmp_path: Path) -> None:
    config = tmp_path / "fail.yaml"
    config.write_text(yaml.safe_dump(steps_config(length=5, exit_code=4)))
    done = master.cli("experiment", "create", str(config), str(STEPS), "-f")
    assert done.returncode == 1
    assert "exited with code 4" in done.stdout
    assert done.stdout.rstrip().endswith("ERROR")


def test_user_errors_are_one_clear_line(master: MasterProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("entrypoint: python3 train.py\nsearcher: {name: single, metric: x, "
                   "max_trails: 3}\n")
    done = master.cli("experiment", "create", str(bad), str(STEPS))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "searcher.max_trails: unknown key; did you mean 'max_trials'?" in done.stderr
    missing = master.cli("experiment", "describe", "999")
    assert missing.returncode == 1 and "experiment 999 not found" in missing.stderr
    nofile = master.cli("experiment", "create", str(tmp_path / "none.yaml"), str(STEPS))
    assert nofile.returncode == 1 and "Traceback" not in nofile.stderr


def test_pause_activate_kill_and_cluster_views(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=100_000, sleep=0.05))
    master.wait(lambda: master.trials(eid) and master.trials(eid)[0]["run_state"] == "RUNNING")
    slots = json.loads(master.cli("slot", "list", "--json", check=True).stdout)["slots"]
    assert sum(1 for s in slots if s["allocation_id"]) == 1
    jobs = json.loads(master.cli("job", "list", "--json", check=True).stdout)["jobs"]
    assert [(j["experiment_id"], j["state"], j["slots_allocated"]) for j in jobs] == [
        (eid, "SCHEDULED", 1)]
    assert "PAUSED" in master.cli("experiment", "pause", str(eid), check=True).stdout
    activated = master.cli("experiment", "activate", str(eid), check=True).stdout
    assert re.search(rf"Experiment {eid}: (QUEUED|STARTING|RUNNING)", activated), activated
    master.cli("experiment", "kill", str(eid), check=True)
    assert master.wait_state(eid)["state"] == "CANCELED"
    made = master.cli("user", "create", "carol", check=True).stdout
    assert "carol" in made
    users = json.loads(master.cli("user", "list", "--json", check=True).stdout)["users"]
    assert sorted(u["username"] for u in users) == ["admin", "carol"]
    assert "admin" in master.cli("user", "whoami", check=True).stdout
    assert (REPO / "examples" / "core_api" / "const.yaml").exists()
