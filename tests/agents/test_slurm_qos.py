"""A Slurm pool's QOS by det_hub priority (``qos_by_priority``): how the table is read and
checked, which QOS a job of each priority gets, that an experiment's own ``--qos`` wins, and
that a job submitted on the private test Slurm carries its QOS.

The test Slurm keeps no accounting (``AccountingStorageType=accounting_storage/none``): it
accepts any ``--qos`` and records none (``scontrol show job`` says ``QOS=(null)``, and
``sacctmgr`` refuses to run), so what Slurm makes of the QOS cannot be seen there; the test on
it checks the submitted command and that Slurm took the job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.agents import TaskSpec
from det_hub.agents.slurm import (
    SlurmAgent,
    names_option,
    qos_for_priority,
    qos_table,
    sbatch_argv,
)
from det_hub.contract import CLUSTER_INFO_FILE
from det_hub.env_names import TENSORBOARD_LOGDIRS_ENV

NOBODY = (65534, 65534)
TABLE = {"10": "high", "50": "normal", "99": "low"}


def test_priorities_map_to_the_qos_of_the_first_key_at_or_above_them() -> None:
    table = qos_table(TABLE, "qos_by_priority")
    assert table == [(10, "high"), (50, "normal"), (99, "low")]
    assert [qos_for_priority(p, table, "pool") for p in (1, 10, 11, 42, 50, 51, 99)] == \
        ["high", "high", "normal", "normal", "normal", "low", "low"]
    # Priorities past the last key get the pool's own qos (maybe none).
    partial = qos_table({20: "high", "5": "urgent"}, "qos_by_priority")
    assert partial == [(5, "urgent"), (20, "high")]
    assert [qos_for_priority(p, partial, "normal") for p in (3, 6, 21, 99)] == \
        ["urgent", "high", "normal", "normal"]
    assert qos_for_priority(99, partial, "") == ""
    assert qos_for_priority(42, [], "normal") == "normal"


@pytest.mark.parametrize(("mapping", "message"), [
    (["high"], "must map priorities to QOS names"),
    ({"ten": "high"}, "key 'ten' is not a priority"),
    ({"0": "high"}, "key '0' is not a priority"),
    ({100: "low"}, "key 100 is not a priority"),
    ({True: "high"}, "key True is not a priority"),
    ({"10": "high", 10: "urgent"}, "priority 10 is given twice"),
    ({"10": "high qos"}, "qos_by_priority['10']: 'high qos' is not a Slurm QOS name"),
    ({"10": ""}, "qos_by_priority['10']: '' is not a Slurm QOS name"),
    ({"10": 3}, "qos_by_priority['10']: 3 is not a Slurm QOS name"),
])
def test_a_bad_table_is_refused_naming_the_entry(mapping: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(")):
        qos_table(mapping, "qos_by_priority")


def test_an_experiments_own_qos_partition_or_account_replaces_the_pools() -> None:
    def argv(job_args: list[str]) -> list[str]:
        return sbatch_argv(sbatch="sbatch", job_name="n", job_dir="/j", script="/j/job.sh",
                           slots=1, slot_type="cpu", cpus_per_slot=1, partition="gpu",
                           account="ml", qos="high", pool_args=["--time=60"],
                           job_args=job_args)

    assert argv([])[-5:] == ["--partition=gpu", "--account=ml", "--qos=high", "--time=60",
                             "/j/job.sh"]
    assert argv(["--qos=low"])[-5:] == ["--partition=gpu", "--account=ml", "--time=60",
                                        "--qos=low", "/j/job.sh"]
    for own in (["-q", "low"], ["-qlow"], ["--qos", "low"]):
        assert not any(a.startswith("--qos=") for a in argv(own)), own
    assert [a for a in argv(["-p", "long", "-Alab"]) if a.startswith(("--partition",
                                                                       "--account"))] == []
    assert names_option(["--qos=x"], "--qos", "-q")
    assert not names_option(["--qos-other=x", "--quiet"], "--qos", "-q")


def test_the_master_refuses_a_bad_table_when_it_starts(tmp_path: Path) -> None:
    from det_hub.service.app import MasterApp

    def agents(table: Any) -> list[Any]:
        """The Slurm agents the master makes as it starts (``MasterApp.serve`` turns their
        ValueError into ``det-hub master: bad cluster settings: ...``)."""
        manager = {"type": "slurm", "job_root": str(tmp_path / "jobs"), "pool_slots": 1,
                   "qos_by_priority": table}
        return MasterApp(data_dir=str(tmp_path / "data"), resource_pools=[
            {"name": "hpc", "resource_manager": manager}]).make_slurm_agents()

    with pytest.raises(ValueError, match=r"Slurm agent hpc: qos_by_priority: key '1O' is not "
                                         r"a priority"):
        agents({"1O": "high"})
    [agent] = agents(TABLE)
    assert agent.qos_table == [(10, "high"), (50, "normal"), (99, "low")]


def test_a_tensorboard_over_files_in_the_masters_directory_is_refused(tmp_path: Path) -> None:
    agent = SlurmAgent(tmp_path / "state", agent_id="hpc", job_root=str(tmp_path / "jobs"),
                       pool_slots=1, private_paths=[tmp_path / "private"])
    logdirs = {"experiment 3": str(tmp_path / "private" / "ckpt" / "tensorboard" / "3")}
    board = TaskSpec("9.a", ["python3", "-m", "det_hub.exec.tensorboard"],
                     {TENSORBOARD_LOGDIRS_ENV: json.dumps(logdirs)}, None, [0],
                     {CLUSTER_INFO_FILE: "{}"}, run_as=NOBODY, owner_is_admin=True)
    with pytest.raises(ValueError, match=r"the TensorBoard files of experiment 3 \(.*\) are in "
                                         r"the master's private data directory"):
        agent.launch(board)
    assert not agent.job_dir("9.a").exists(), "nothing was laid out for a refused job"


# ----------------------------------------------------------------- on the test Slurm cluster


@pytest.fixture
def agent(slurm: dict[str, str], slurm_shared: Path, tmp_path: Path) -> Iterator[SlurmAgent]:
    made = SlurmAgent(tmp_path / "state", private_paths=[tmp_path / "private"],
                      **{**slurm, "agent_id": "q", "job_root": str(slurm_shared),
                         "poll_interval": 0.3, "exit_file_grace": 1.0,
                         "qos_by_priority": TABLE})
    yield made
    for record in (tmp_path / "state").glob("*.json"):
        made.run_command("scancel", str(json.loads(record.read_text())["job_id"]))


def test_a_job_is_submitted_with_the_qos_of_its_priority(
        agent: SlurmAgent, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    def submitted(allocation_id: str, priority: int, sbatch_args: list[str]) -> str:
        """The job's sbatch command as the agent logged it, once Slurm has taken the job."""
        handle = agent.launch(TaskSpec(
            allocation_id, ["python3", "-c", "pass"], {}, None, [0], {CLUSTER_INFO_FILE: "{}"},
            run_as=NOBODY, priority=priority,
            # Held back an hour: nothing needs to run for the submission to be seen.
            slurm={"sbatch_args": ["--begin=now+3600", *sbatch_args]}))
        assert handle.job_id.isdigit()
        deadline = time.monotonic() + 30
        while handle.waiting is None or "PENDING" not in handle.waiting:
            assert handle.exit_status() is None and time.monotonic() < deadline, handle.waiting
            time.sleep(0.2)
        [line] = [r.getMessage() for r in caplog.records
                  if f"allocation {allocation_id} is job {handle.job_id}:" in r.getMessage()]
        agent.kill(handle)
        return line

    assert " --qos=high " in submitted("q.1", 5, [])
    assert " --qos=low " in submitted("q.2", 60, [])
    own = submitted("q.3", 5, ["--qos=normal"])
    assert " --qos=normal " in own and "--qos=high" not in own
