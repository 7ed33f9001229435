"""``det_hub.launch.slurm``: each task of a Slurm job is told its place among the job's tasks
in det_hub's multi-node variables, and sees its own slot only."""

from __future__ import annotations

import pytest

from det_hub.launch import slurm
from det_hub.launch._command import LaunchError
from det_hub.launch.torch_distributed import Node

TASK = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.7",
        "SLURM_CPUS_PER_TASK": "4", "DET_HUB_CHIEF_PORT": "29500", "OMP_NUM_THREADS": "8",
        "PATH": "/usr/bin"}


def test_a_task_is_one_node_of_the_launch() -> None:
    env = slurm.task_env(TASK)
    assert Node.from_env(env) == Node(rank=1, count=2, chief_addr="10.0.0.7", chief_port=29500)
    assert env["OMP_NUM_THREADS"] == "4" and env["PATH"] == "/usr/bin"
    with pytest.raises(LaunchError, match="SLURM_PROCID"):
        slurm.task_env({k: v for k, v in TASK.items() if k != "SLURM_PROCID"})


def test_a_task_sees_its_own_slot() -> None:
    info = {"master_url": "http://m", "slot_ids": [3, 5], "container_rank": 0}
    own = slurm.task_cluster_info(info, 1, 2, "10.0.0.7")
    assert own == {"master_url": "http://m", "slot_ids": [5], "container_rank": 1,
                   "container_addrs": ["10.0.0.7"], "container_slot_counts": [1, 1]}
    with pytest.raises(LaunchError, match="2 tasks but its cluster-info file lists 3 slots"):
        slurm.task_cluster_info({"slot_ids": [0, 1, 2]}, 0, 2, "10.0.0.7")


def test_the_batch_step_runs_srun_with_the_task_role() -> None:
    assert slurm.srun_command("/usr/bin/srun", ["--ntasks=2"], ["python3", "-m", "x"],
                              python="/py") == [
        "/usr/bin/srun", "--ntasks=2", "/py", "-m", "det_hub.launch.slurm", "--task", "--",
        "python3", "-m", "x"]
    assert slurm.main(["--srun"]) == 2
    assert slurm.main(["--bogus", "--", "true"]) == 2
