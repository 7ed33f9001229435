"""``python -m det_hub.launch.horovod`` running real Horovod workers on CPU (Gloo).

Needs Horovod built into the environment (``make horovod``, which ``make test`` runs). Without
it these tests are skipped, except in CI, where they fail: CI must test the real thing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from det_hub.env_names import (
    AGENT_ADDRESS_ENV,
    CHIEF_ADDR_ENV,
    CHIEF_PORT_ENV,
    NNODES_ENV,
    NODE_RANK_ENV,
)
from det_hub.launch.torch_distributed import free_port

LAUNCHER = [sys.executable, "-m", "det_hub.launch.horovod"]

# One worker: reports its place in the job, then all-reduces its rank with the other workers.
# With FAIL_RANK set, that rank exits 3 instead, and the others wait to be stopped.
WORKER = '''\
import os
import sys
import time

import horovod.torch as hvd
import torch

hvd.init()
rank = hvd.rank()
print(
    f"rank {rank} size {hvd.size()} local {hvd.local_rank()} "
    f"distributed {os.environ.get('DET_HUB_DISTRIBUTED')} omp {os.environ.get('OMP_NUM_THREADS')}"
)
print(f"stderr of rank {rank}", file=sys.stderr)
if "FAIL_RANK" in os.environ:
    if os.environ["FAIL_RANK"] == str(rank):
        sys.exit(3)
    time.sleep(120)
    sys.exit("not stopped")
total = hvd.allreduce(torch.tensor([rank]), op=hvd.Sum)
print(f"rank {rank} sum {int(total.item())}")
'''

# horovodrun with Gloo marks each line a worker writes as `[RANK]<stdout>:` or `[RANK]<stderr>:`.
RANK_LINE = re.compile(r"\[(\d+)\]<(stdout|stderr)>:(.*)")


@pytest.fixture(scope="module")
def horovod_installed() -> None:
    """Skips (fails in CI) when this Python cannot import ``horovod.torch``."""
    # Checked in a child process, as the workers will run: a broken build can fail to load in
    # ways an in-process import would not survive.
    check = subprocess.run(
        [sys.executable, "-c", "import horovod.torch"],
        capture_output=True, text=True, timeout=120,
    )
    if check.returncode == 0:
        return
    last = check.stderr.strip().splitlines()[-1:] or [f"exit code {check.returncode}"]
    message = f"`import horovod.torch` fails ({last[0]}); run `make horovod`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


@pytest.fixture
def base_env() -> dict[str, str]:
    """The environment of a task on CPU slots, less the cluster-info file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="4")
    env.pop("FAIL_RANK", None)
    return env


def by_rank(text: str, stream: str) -> dict[int, list[str]]:
    """The workers' lines on ``stream``, grouped by rank, in the order each rank wrote them."""
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = RANK_LINE.fullmatch(line)
        assert match and match[2] == stream, f"not a {stream} line of a worker: {line!r}"
        lines.setdefault(int(match[1]), []).append(match[3])
    return lines


def expected_stdout(omp: str) -> dict[int, list[str]]:
    return {
        r: [f"rank {r} size 2 local {r} distributed horovod omp {omp}", f"rank {r} sum 1"]
        for r in (0, 1)
    }


EXPECTED_STDERR = {0: ["stderr of rank 0"], 1: ["stderr of rank 1"]}


@pytest.mark.usefixtures("horovod_installed")
def test_two_workers_from_nproc(tmp_path: Path, worker: Path, base_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", "--", sys.executable, worker.name],
        env=base_env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The task's 4 threads are shared out between the two workers.
    assert by_rank(proc.stdout, "stdout") == expected_stdout("2")
    assert by_rank(proc.stderr, "stderr") == EXPECTED_STDERR


@pytest.mark.usefixtures("horovod_installed")
def test_two_workers_from_cluster_info(
    tmp_path: Path, worker: Path, base_env: dict[str, str]
) -> None:
    info = tmp_path / "cluster_info.json"
    info.write_text(json.dumps({
        "master_url": "http://127.0.0.1:1", "allocation_id": "3.0", "task_id": "trial-3",
        "task_type": "TRIAL", "slot_ids": [0, 1], "container_addrs": ["127.0.0.1"],
    }))
    env = dict(base_env, DET_HUB_CLUSTER_INFO=str(info), OMP_NUM_THREADS="2")
    proc = subprocess.run(
        [*LAUNCHER, "--trace", "--", sys.executable, str(worker)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert by_rank(proc.stdout, "stdout") == expected_stdout("1")
    assert by_rank(proc.stderr, "stderr") == EXPECTED_STDERR


@pytest.mark.usefixtures("horovod_installed")
def test_failing_worker_fails_the_job(
    tmp_path: Path, worker: Path, base_env: dict[str, str]
) -> None:
    env = dict(base_env, FAIL_RANK="1")
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", "--", sys.executable, worker.name],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    workers = [line for line in proc.stdout.splitlines() if RANK_LINE.fullmatch(line)]
    own = [line for line in proc.stdout.splitlines() if not RANK_LINE.fullmatch(line)]
    assert by_rank("\n".join(workers), "stdout") == {
        r: [f"rank {r} size 2 local {r} distributed horovod omp 2"] for r in (0, 1)
    }
    # horovodrun names the worker that failed, then stops the other one. Whether it also
    # reports the exit status of the one it stopped depends on timing.
    assert own[:2] == [
        "Process 1 exit with status code 3.",
        "Terminating remaining workers after failure of Process 1.",
    ]
    assert set(own[2:]) <= {"Process 0 exit with status code 143."}


@pytest.mark.usefixtures("horovod_installed")
def test_a_job_spread_over_two_nodes_meets_at_the_chief(
    tmp_path: Path, worker: Path, base_env: dict[str, str]
) -> None:
    """Two launchers, as the two nodes of one trial (two Slurm tasks, or containers on two
    hosts), each told its place as the master tells it: no horovodrun, the chief serves the
    rendezvous at its address and port, and the two nodes' workers are ranks 0 and 1 of one
    job, which all-reduce across the nodes."""
    port = free_port()
    nodes = []
    for rank in (0, 1):
        env = dict(base_env, OMP_NUM_THREADS="2", **{
            NNODES_ENV: "2", NODE_RANK_ENV: str(rank), CHIEF_ADDR_ENV: "127.0.0.1",
            CHIEF_PORT_ENV: str(port), AGENT_ADDRESS_ENV: "127.0.0.1"})
        nodes.append(subprocess.Popen(
            [*LAUNCHER, "--nproc", "1", "--", sys.executable, str(worker)], env=env,
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [node.communicate(timeout=120) for node in nodes]
    for node, (out, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, out + err
    for rank, (out, err) in enumerate(outputs):
        # Marked by the launcher as its other workers' lines are; local rank 0 on each node.
        assert out.splitlines() == [
            f"[rank={rank}] rank {rank} size 2 local 0 distributed horovod omp 2",
            f"[rank={rank}] rank {rank} sum 1"]
        assert err.splitlines() == [f"[rank={rank}] stderr of rank {rank}"]


def test_horovodrun_options_are_refused_for_a_job_over_several_nodes(
        base_env: dict[str, str]) -> None:
    env = dict(base_env, **{NNODES_ENV: "2", NODE_RANK_ENV: "1", CHIEF_ADDR_ENV: "127.0.0.1",
                            CHIEF_PORT_ENV: "1"})
    proc = subprocess.run([*LAUNCHER, "--nproc", "1", "--verbose", "--", "true"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "horovodrun options (--verbose) do not apply to a trial spread over several " \
           "nodes" in proc.stderr
