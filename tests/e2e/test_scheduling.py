"""Scheduling on a real master: a more important job preempts a less important one, which
checkpoints, waits and resumes to the same result; one that will not stop is killed after the
pool's preemption timeout and resumes without counting as a failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from det_hub.testing import MasterProcess

from .conftest import REPO, STEPS, steps_config

pytestmark = pytest.mark.slow


def preempting_master(tmp_path: Path, sqlite_url: str, timeout: float) -> MasterProcess:
    config = tmp_path / "det_hub_config.py"
    pools = [{"name": "default", "preemption_timeout": timeout,
              "scheduler": {"type": "priority", "preemption": True}}]
    config.write_text(f"c.MasterApp.resource_pools = {pools!r}\n")
    # Two one-core CPU slots on any host, so a 2-slot trial fills the agent.
    proc = MasterProcess(tmp_path / "data", sqlite_url,
                         ["--config", str(config), "--cpu-slot-cores=1",
                          "--LocalAgent.max_cpu_slots=2"])
    proc.default_context = STEPS
    proc.cli_cwd = REPO
    proc.start()
    return proc


@pytest.fixture
def master(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    proc = preempting_master(tmp_path, sqlite_url, timeout=60)
    yield proc
    proc.stop()


@pytest.fixture
def impatient_master(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    proc = preempting_master(tmp_path, sqlite_url, timeout=2)
    yield proc
    proc.stop()


def two_slots(name: str, priority: int, length: int, **hparams: object) -> dict[str, object]:
    config = steps_config(name, length=length, **hparams)
    config["resources"] = {"slots_per_trial": 2, "priority": priority}
    # One process on the two slots: the steps script is not a distributed program.
    config["entrypoint"] = "python3 train.py"
    return config


def test_a_more_important_job_preempts_and_the_victim_resumes(master: MasterProcess) -> None:
    low = master.create_ok(two_slots("low", 60, 40, sleep=0.1, report_every=2))
    [low_trial] = master.wait(lambda: [t for t in master.trials(low)
                                       if t["run_state"] == "RUNNING"])
    master.wait(lambda: master.get(f"/trials/{low_trial['id']}")["trial"]
                ["steps_completed"] >= 4)
    high = master.create_ok(two_slots("high", 10, 5))
    assert master.wait_state(high)["state"] == "COMPLETED"
    assert master.wait_state(low, timeout=120)["state"] == "COMPLETED"

    logs = master.logs(low_trial["id"])
    preempted = [m for m in logs if m.startswith("preempted at ")]
    assert len(preempted) == 1, logs
    at = int(preempted[0].split()[-1])
    assert f"resumed at {at}" in logs
    assert any("preempted to make room for a more important job" in m for m in logs)
    # The same result as an uninterrupted run: 40 batches, validated once at the end.
    [trial] = master.trials(low)
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 0
    assert trial["steps_completed"] == 40
    assert trial["latest_validation"]["metrics"]["validation_loss"] == pytest.approx(1 / 40)
    # The high-priority trial ran while the low one waited: it ended before the low one.
    [high_trial] = master.trials(high)
    assert high_trial["ended_at"] < trial["ended_at"]


def test_a_task_that_will_not_stop_is_killed_after_the_preemption_timeout(
        impatient_master: MasterProcess) -> None:
    master = impatient_master
    low = master.create_ok(two_slots("stubborn", 60, 40, sleep=0.1, report_every=2,
                                     ignore_preempt=True))
    [low_trial] = master.wait(lambda: [t for t in master.trials(low)
                                       if t["run_state"] == "RUNNING"])
    high = master.create_ok(two_slots("high", 10, 5))
    assert master.wait_state(high)["state"] == "COMPLETED"
    assert master.wait_state(low, timeout=120)["state"] == "COMPLETED"
    logs = master.logs(low_trial["id"])
    assert any("did not stop within the preemption timeout" in m for m in logs), logs
    [trial] = master.trials(low)
    assert trial["restarts"] == 0 and trial["steps_completed"] == 40
