"""Experiments from creation to their end, through a real master and real trial processes."""

from __future__ import annotations

import signal
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from det_hub.testing import MasterProcess, kill_trial_processes

from .conftest import steps_config

pytestmark = pytest.mark.slow


def test_a_trial_runs_to_completion_and_reports_everything(master_any_db: MasterProcess) -> None:
    m = master_any_db
    eid = m.create_ok(steps_config(length=30, checkpoint_every=10))
    exp = m.wait_state(eid)
    assert exp["state"] == "COMPLETED" and exp["progress"] == 1.0
    [trial] = m.trials(eid)
    assert trial["state"] == "COMPLETED" and trial["steps_completed"] == 30
    assert trial["best_validation"]["metrics"]["validation_loss"] == pytest.approx(1 / 30)
    training = m.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert [p["steps_completed"] for p in training] == list(range(5, 31, 5))
    logs = m.logs(trial["id"])
    assert "done" in logs and f"experiment best {1 / 30}" in logs
    # GC (save_trial_best=1, save_trial_latest=1): of 4 checkpoints only the last survives.
    ckpts = m.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert sorted(c["steps_completed"] for c in ckpts) == [10, 20, 30, 30]
    assert {c["state"] for c in ckpts if c["steps_completed"] < 30} == {"DELETED"}
    kept = [c for c in ckpts if c["state"] == "COMPLETED"]
    assert {c["uuid"] for c in kept} >= {trial["latest_checkpoint"]}
    storage = m.data_dir / "checkpoints" / "admin"
    assert sorted(p.name for p in storage.iterdir() if p.name != "tensorboard") == sorted(
        c["uuid"] for c in kept)
    # The reported metrics are also TensorBoard scalars beside the checkpoints.
    events = EventAccumulator(str(storage / f"tensorboard/experiment/{eid}/trial/{trial['id']}"))
    events.Reload()
    assert [e.step for e in events.Scalars("training/loss")] == list(range(5, 31, 5))
    assert [(e.step, e.value) for e in events.Scalars("validation/validation_loss")] == [
        (30, pytest.approx(1 / 30))]


def test_a_crash_restarts_from_the_latest_checkpoint(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=30, max_restarts=2, checkpoint_every=10,
                                        crash_once_at=15))
    assert master.wait_state(eid)["state"] == "COMPLETED"
    [trial] = master.trials(eid)
    assert trial["restarts"] == 1
    logs = master.logs(trial["id"])
    assert "crashing at 15" in logs and "resumed at 10" in logs
    assert any("exited with code 3; restarting from checkpoint" in line and
               "(restart 1 of 2)" in line for line in logs)
    # Step 15 of run 1 came after its checkpoint at 10: run 2 reported it again, and only
    # run 2's row counts.
    assert trial["run_id"] == 2
    assert any(line.startswith("run 2 trains on from checkpoint") and
               line.endswith("1 metric row reported past step 10 is rolled back")
               for line in logs), logs
    training = master.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert [p["steps_completed"] for p in training] == list(range(5, 31, 5))


def test_a_failing_trial_errors_after_max_restarts(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=5, max_restarts=1, exit_code=7))
    assert master.wait_state(eid)["state"] == "ERROR"
    [trial] = master.trials(eid)
    assert trial["state"] == "ERROR" and trial["restarts"] == 1
    logs = master.logs(trial["id"])
    assert logs.count("done") == 2
    assert logs[-1] == ("the trial's process exited with code 7; the trial has failed "
                        "(max_restarts=1 restarts used)")


def test_pause_frees_the_slot_and_activate_resumes_from_the_checkpoint(
        master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=120, sleep=0.05))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 10)
    r = master.api("POST", f"/experiments/{eid}/pause")
    assert r.status_code == 200 and r.json()["experiment"]["state"] == "PAUSED"
    trial = master.wait(lambda: (t := master.get(f"/trials/{trial_id}")["trial"])[
        "run_state"] is None and t)
    assert trial["state"] == "PAUSED" and trial["latest_checkpoint"]
    paused_at = trial["steps_completed"]
    slots = master.get("/agents")["agents"][0]["slots"]
    assert all(s["allocation_id"] is None for s in slots)
    assert master.get("/jobs")["jobs"] == []
    # Pausing twice is refused, and says why.
    again = master.api("POST", f"/experiments/{eid}/pause")
    assert again.status_code == 409 and "PAUSED" in again.json()["error"]

    assert master.api("POST", f"/experiments/{eid}/activate").status_code == 200
    assert master.wait_state(eid)["state"] == "COMPLETED"
    logs = master.logs(trial_id)
    resumed = [line for line in logs if line.startswith("resumed at ")]
    assert resumed == [f"resumed at {int(line.split()[-1])}" for line in logs
                       if line.startswith("preempted at ")]
    assert int(resumed[0].split()[-1]) >= paused_at - 5
    steps = [p["steps_completed"] for p in
             master.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert steps == sorted(set(steps)) and steps[-1] == 120


def test_kill_cancels_a_running_experiment(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=10_000, sleep=0.05))
    trial_id = master.wait(lambda: master.trials(eid))[0]["id"]
    master.wait(lambda: master.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 5)
    assert master.api("POST", f"/experiments/{eid}/kill").status_code == 200
    exp = master.wait_state(eid, timeout=30)
    assert exp["state"] == "CANCELED"
    assert master.get(f"/trials/{trial_id}")["trial"]["state"] == "CANCELED"
    # A finished experiment can be archived, and is then listed only when asked for.
    assert master.api("POST", f"/experiments/{eid}/archive").json()["experiment"]["archived"]
    assert master.get("/experiments?archived=false")["experiments"] == []
    assert [e["id"] for e in master.get("/experiments?archived=true")["experiments"]] == [eid]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "crash"])
def test_the_master_restarts_mid_experiment_and_the_trial_finishes(
        master_any_db: MasterProcess, sig: int) -> None:
    m = master_any_db
    eid = m.create_ok(steps_config(length=100, sleep=0.04, checkpoint_every=20))
    trial_id = m.wait(lambda: m.trials(eid))[0]["id"]
    m.wait(lambda: m.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 15)
    m.stop(sig)
    time.sleep(1.5)  # the trial keeps training and retries its reports meanwhile
    m.start()
    exp = m.wait_state(eid)
    assert exp["state"] == "COMPLETED", m.logs(trial_id)
    trial = m.get(f"/trials/{trial_id}")["trial"]
    assert trial["restarts"] == 0, "the running trial should have been adopted, not restarted"
    steps = [p["steps_completed"] for p in
             m.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert steps == list(range(5, 101, 5)), "every report arrives exactly once"
    logs = m.logs(trial_id)
    assert logs.count("done") == 1
    assert not any(line.startswith("resumed at") for line in logs)


def test_a_trial_that_died_while_the_master_was_down_resumes_and_counts_each_row_once(
        master_any_db: MasterProcess) -> None:
    """The restarted master finds the trial's process gone (a failure, within max_restarts);
    its rows past the checkpoint it resumes from are rolled back: the steps it trains again
    are stored once, not twice."""
    m = master_any_db
    eid = m.create_ok(steps_config(length=60, sleep=0.04, checkpoint_every=20, max_restarts=1))
    trial_id = m.wait(lambda: m.trials(eid))[0]["id"]
    m.wait(lambda: m.get(f"/trials/{trial_id}")["trial"]["steps_completed"] >= 30)
    m.stop(signal.SIGKILL)
    assert kill_trial_processes(trial_id) >= 1
    m.start()
    assert m.wait_state(eid)["state"] == "COMPLETED", m.logs(trial_id)
    trial = m.get(f"/trials/{trial_id}")["trial"]
    assert trial["run_id"] == 2 and trial["restarts"] == 1 and trial["steps_completed"] == 60
    steps = [p["steps_completed"] for p in
             m.get(f"/trials/{trial_id}/metrics?group=training")["metrics"]]
    assert steps == list(range(5, 61, 5)), "every step counted exactly once"
    charted = m.get(f"/trials/{trial_id}/metrics?group=training&max_points=1000")["metrics"]
    assert [p["steps_completed"] for p in charted] == steps
    rolled_back = m.get(f"/trials/{trial_id}/metrics/rolled_back")["metrics"]
    assert rolled_back and all(
        r["steps_completed"] > 20 and (r["trial_run"], r["rolled_back_by_run"]) == (1, 2)
        for r in rolled_back)
    logs = m.logs(trial_id)
    assert "resumed at 20" in logs
    assert any(line.startswith("run 2 trains on from checkpoint") and "past step 20" in line
               for line in logs), logs
