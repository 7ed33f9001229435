"""A Slurm pool's QOS by det_hub priority (``qos_by_priority``): how the table is read and
checked, which QOS a job of each priority gets, that an experiment's own ``--qos`` wins, and
that a job submitted on the private test Slurm carries its QOS.

The first test Slurm keeps no accounting (``AccountingStorageType=accounting_storage/none``):
it accepts any ``--qos`` and records none (``scontrol show job`` says ``QOS=(null)``), so the
test on it checks the submitted command and that Slurm took the job. The second keeps
accounting and enforces associations and QOS, as most sites' do: there each job gets the QOS
its priority maps to, a QOS or account the site does not allow stops the job at submission
with Slurm's reason, and a job its QOS holds back waits, showing Slurm's reason, until it may
run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
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


# ------------------------------------------------- on the test Slurm cluster with accounting
# The second test cluster keeps accounting and enforces associations and QOS
# (``AccountingStorageEnforce=associations,limits,qos``), as most sites' do: root and nobody
# submit under account ``dethub`` with QOS normal, high, low and ``one`` (one running job per
# user); QOS ``elsewhere`` exists but is no association's.


@pytest.fixture
def accounted(slurm_acct: dict[str, str], slurm_shared: Path, tmp_path: Path
              ) -> Iterator[Callable[..., SlurmAgent]]:
    """Slurm agents on the cluster with accounting, each with its settings; their jobs are
    cancelled afterwards."""
    made: list[SlurmAgent] = []

    def agent(**settings: Any) -> SlurmAgent:
        one = SlurmAgent(tmp_path / f"state{len(made)}", private_paths=[tmp_path / "private"],
                         **{**slurm_acct, "agent_id": "acct", "job_root": str(slurm_shared),
                            "poll_interval": 0.3, "exit_file_grace": 1.0, **settings})
        made.append(one)
        return one

    yield agent
    for one in made:
        for record in one.state_dir.glob("*.json"):
            one.run_command("scancel", str(json.loads(record.read_text())["job_id"]))


def task(allocation_id: str, code: str = "pass", priority: int = 42, **slurm: Any) -> TaskSpec:
    return TaskSpec(allocation_id, ["python3", "-c", code], {}, None, [0],
                    {CLUSTER_INFO_FILE: "{}"}, run_as=NOBODY, priority=priority, slurm=slurm)


def qos_of(agent: SlurmAgent, job_id: str) -> str:
    """The QOS Slurm gave the job, as its accounting keeps it."""
    return agent.run_command("squeue", "-h", "-j", job_id, "-o", "%q").stdout.strip()


def test_slurm_gives_each_job_the_qos_of_its_priority(
        accounted: Callable[..., SlurmAgent]) -> None:
    agent = accounted(qos_by_priority=TABLE)
    # Held back an hour: the QOS is Slurm's as soon as it takes the job.
    held = {"sbatch_args": ["--begin=now+3600"]}
    urgent = agent.launch(task("acct.1", priority=5, **held))
    idle = agent.launch(task("acct.2", priority=60, **held))
    assert (qos_of(agent, urgent.job_id), qos_of(agent, idle.job_id)) == ("high", "low")
    for handle in (urgent, idle):
        agent.kill(handle)


@pytest.mark.parametrize(("settings", "slurm_says"), [
    ({"qos_by_priority": {"99": "elsewhere"}}, "Invalid qos specification"),
    ({"qos": "nonexistent"}, "Invalid qos specification"),
    ({"account": "nonexistent"}, "Invalid account"),
], ids=["qos-of-no-association", "unknown-qos", "unknown-account"])
def test_a_job_slurms_associations_refuse_fails_to_start_naming_why(
        accounted: Callable[..., SlurmAgent], settings: dict[str, Any], slurm_says: str) -> None:
    agent = accounted(**settings)
    with pytest.raises(RuntimeError, match=rf"sbatch refused the job of allocation acct\.3: "
                                           rf".*{slurm_says}"):
        agent.launch(task("acct.3"))
    assert not agent.job_dir("acct.3").exists(), "nothing is left of a refused job"
    assert list(agent.state_dir.glob("*.json")) == []


def test_a_job_its_qos_holds_back_waits_with_slurms_reason_until_it_may_run(
        accounted: Callable[..., SlurmAgent]) -> None:
    agent = accounted(qos="one")  # one running job per user
    first = agent.launch(task("acct.4", "import time; time.sleep(3)"))
    second = agent.launch(task("acct.5"))
    deadline = time.monotonic() + 30
    # (asking for its exit status is what has the agent look at the queue)
    while second.waiting is None or "QOSMaxJobsPerUserLimit" not in second.waiting:
        assert second.exit_status() is None and time.monotonic() < deadline, second.waiting
        time.sleep(0.2)
    assert second.waiting == f"Slurm job {second.job_id} is PENDING: QOSMaxJobsPerUserLimit"
    assert qos_of(agent, second.job_id) == "one"
    # Once the first has ended, the second runs and ends as it should.
    for handle in (first, second):
        while (status := handle.exit_status()) is None:
            assert time.monotonic() < deadline + 60, handle.waiting
            time.sleep(0.2)
        assert status.success, status
