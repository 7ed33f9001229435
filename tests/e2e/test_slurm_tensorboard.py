"""A TensorBoard in a resource pool on a Slurm partition, through a real master and the private
test Slurm of ``scripts/test-services.sh start``: it runs as a Slurm job of its owner's account
on the node Slurm picked, serves the metrics a trial of the pool reported (the event files on
the shared filesystem) through the master's proxy, and killing it ends its job. Without that
Slurm the test is skipped, except in CI, where it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from det_hub.testing import MasterProcess

from .conftest import steps_config
from .test_proxied_tasks import assert_serves_the_losses
from .test_slurm import (
    POOL,
    cancel_jobs,
    job_state,
    on_slurm,
    running_master,
    slurm_command,
    slurm_jobs,
    slurm_master,
    task_jobs,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def shared(slurm_shared: Path) -> Path:
    """The filesystem the master and the nodes share, with checkpoints (and so TensorBoard
    files) that every job's user may write."""
    (slurm_shared / "checkpoints").mkdir(mode=0o777)
    (slurm_shared / "checkpoints").chmod(0o1777)
    return slurm_shared


@pytest.fixture
def master(tmp_path: Path, slurm: dict[str, str], shared: Path) -> Iterator[MasterProcess]:
    yield from running_master(tmp_path, slurm, shared)


def test_a_tensorboard_runs_as_a_slurm_job_behind_the_masters_proxy(
        master: MasterProcess, shared: Path, slurm: dict[str, str]) -> None:
    from .test_proxied_tasks import started_url, wait_state

    eid = master.create_ok(on_slurm(steps_config("tb-on-slurm", length=20, report_every=5),
                                    shared))
    exp = master.wait_state(eid, timeout=120)
    [trial] = master.trials(eid)
    assert exp["state"] == "COMPLETED", master.logs(trial["id"])[-20:]
    [trial_job] = slurm_jobs(master, trial["id"])

    url = started_url(master, master.cli("tensorboard", "start", str(eid), "--no-browser",
                                         "--config", f"resources.resource_pool={POOL}"))
    [board] = master.get("/tensorboards")["tensorboards"]
    assert (board["state"], board["resource_pool"]) == ("RUNNING", POOL), board
    [job] = task_jobs(master) - {trial_job}
    state, node, user = slurm_command(slurm, "squeue", "--noheader", f"--jobs={job}",
                                      "--format=%T|%N|%u").strip().split("|")
    assert (state, user) == ("RUNNING", "nobody") and node in ("n1", "n2"), (state, node, user)

    # Through the master's proxy to the node's NodeAddr, where the job's TensorBoard reads the
    # event files the trial's job wrote on the shared filesystem.
    browser = requests.Session()
    page = browser.get(url, timeout=30)
    assert page.status_code == 200 and "TensorBoard" in page.text, page.text[:500]
    base = f"{master.url}/proxy/{board['id']}"
    assert requests.get(f"{base}/data/runs", timeout=10).status_code in (401, 403), \
        "only the TensorBoard's owner gets in"
    assert_serves_the_losses(master, browser, base, f"experiment_{eid}/trial/{trial['id']}")

    # Killing the TensorBoard ends its Slurm job.
    master.cli("tensorboard", "kill", str(board["id"]), check=True)
    ended = wait_state(master, "tensorboard", board["id"], "TERMINATED", timeout=90)
    assert ended["exit_reason"] == "killed by its owner or an admin"
    assert job_state(slurm, job) in ("COMPLETED", "CANCELLED", "FAILED")



def test_a_tensorboard_on_slurm_over_files_the_nodes_cannot_read_is_refused(
        tmp_path: Path, slurm: dict[str, str], shared: Path) -> None:
    """An experiment of the master's own agent keeps its TensorBoard files in the master's
    private data directory; a TensorBoard over it in the Slurm pool would serve nothing on
    its node, so it ends before it serves, saying why, and no job is submitted."""
    master = slurm_master(tmp_path, slurm, shared, local_pool=True)
    try:
        eid = master.create_ok(steps_config("tb-local", length=10, report_every=5))
        assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
        done = master.cli("tensorboard", "start", str(eid), "--no-browser",
                          "--config", f"resources.resource_pool={POOL}")
        assert done.returncode != 0, done.stdout
        [board] = master.get("/tensorboards")["tensorboards"]
        assert board["state"] == "TERMINATED"
        reason = board["exit_reason"] or ""
        assert f"the TensorBoard files of experiment {eid} (" in reason and \
            "are in the master's private data directory, which jobs on Slurm nodes cannot " \
            "read" in reason, reason
        assert "ended before it served" in done.stderr and "private data directory" in \
            done.stderr, done.stderr
        assert not task_jobs(master), "no Slurm job was submitted"
    finally:
        master.stop()
        cancel_jobs(master, slurm)
