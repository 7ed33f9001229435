"""``python -m det_hub.launch.torch_distributed`` with real worker processes on CPU (gloo)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from det_hub.launch._command import LaunchError
from det_hub.launch.torch_distributed import Node, exit_code, free_port, run_workers, worker_env

HERE = Path(__file__).parent
GLOO_WORKER = str(HERE / "gloo_worker.py")
SIGNAL_WORKER = str(HERE / "signal_worker.py")
LAUNCHER = [sys.executable, "-m", "det_hub.launch.torch_distributed"]


@pytest.fixture
def base_env() -> dict[str, str]:
    """The environment of a task on two CPU slots, less the cluster-info file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2")
    env.pop("PYTHONUNBUFFERED", None)
    return env


def by_rank(text: str) -> dict[str, list[str]]:
    """Prefixed lines grouped by their prefix, in the order each rank wrote them."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        prefix, sep, rest = line.partition("] ")
        assert sep and prefix.startswith("[rank="), f"line without a rank prefix: {line!r}"
        lines.setdefault(prefix + "]", []).append(rest)
    return lines


def wait_ready(ready: Path, count: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 20
    while len(list(ready.iterdir())) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "workers did not get ready"
        time.sleep(0.02)


def gloo_expected(omp: str) -> dict[str, list[str]]:
    return {
        f"[rank={r}]": [
            f"rank {r} world 2 local {r} local_world 2 cross 0/1 addr 127.0.0.1 "
            f"distributed torch omp {omp}",
            f"rank {r} sum 1",
        ]
        for r in (0, 1)
    }


def test_two_slots_from_cluster_info(tmp_path: Path, base_env: dict[str, str]) -> None:
    info = tmp_path / "cluster_info.json"
    info.write_text(json.dumps({
        "master_url": "http://127.0.0.1:1", "allocation_id": "7.0", "task_id": "trial-7",
        "task_type": "TRIAL", "slot_ids": [0, 1], "container_addrs": ["127.0.0.1"],
    }))
    env = dict(base_env, DET_HUB_CLUSTER_INFO=str(info))
    # Determined's form: launcher options, `--`, then an explicit interpreter.
    proc = subprocess.run(
        [*LAUNCHER, "--trace", "--", sys.executable, GLOO_WORKER],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert by_rank(proc.stdout) == gloo_expected("1")
    assert by_rank(proc.stderr) == {
        "[rank=0]": ["stderr of rank 0"], "[rank=1]": ["stderr of rank 1"]
    }


def test_nproc_outside_a_cluster(tmp_path: Path, base_env: dict[str, str]) -> None:
    env = dict(base_env)
    del env["OMP_NUM_THREADS"]
    # A bare script is run with the launcher's Python, as torchrun does.
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", GLOO_WORKER],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    cores = len(os.sched_getaffinity(0))
    assert by_rank(proc.stdout) == gloo_expected(str(max(1, cores // 2)))


def test_a_failing_worker_stops_the_others(tmp_path: Path, base_env: dict[str, str]) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(base_env, MODE="0=catch,1=fail", READY_DIR=str(ready))
    started = time.monotonic()
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", sys.executable, SIGNAL_WORKER],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert time.monotonic() - started < 15
    assert proc.returncode == 3
    assert by_rank(proc.stdout) == {
        "[rank=0]": ["rank 0 ready", f"got signal {int(signal.SIGTERM)}"],
        "[rank=1]": ["rank 1 ready"],
    }
    assert proc.stderr == "[rank=1] failing with 3\n"


def test_sigterm_reaches_every_worker(tmp_path: Path, base_env: dict[str, str]) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(base_env, MODE="0=catch,1=plain", READY_DIR=str(ready))
    proc = subprocess.Popen(
        [*LAUNCHER, "--nproc", "2", sys.executable, SIGNAL_WORKER],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_ready(ready, 2, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    # Rank 0 caught it (once) and exited 0; rank 1 died of it, which the launcher reports.
    assert proc.returncode == 128 + signal.SIGTERM
    assert by_rank(out) == {
        "[rank=0]": ["rank 0 ready", f"got signal {int(signal.SIGTERM)}"],
        "[rank=1]": ["rank 1 ready"],
    }
    assert err == ""


def test_sigkill_follows_an_ignored_sigterm(tmp_path: Path, base_env: dict[str, str]) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    env = dict(base_env, MODE="0=ignore,1=fail", READY_DIR=str(ready))
    out, err = io.BytesIO(), io.BytesIO()
    started = time.monotonic()
    code = run_workers(
        [sys.executable, SIGNAL_WORKER], 2, env=env, stdout=out, stderr=err, kill_grace=0.5
    )
    assert time.monotonic() - started < 15
    assert code == 3
    assert sorted(out.getvalue().decode().splitlines()) == [
        "[rank=0] rank 0 ready", "[rank=1] rank 1 ready"
    ]
    assert err.getvalue() == b"[rank=1] failing with 3\n"


def test_missing_command(tmp_path: Path, base_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "2", "no-such-program-here"],
        env=base_env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 127
    assert proc.stdout == ""
    assert proc.stderr.startswith(
        "det_hub.launch.torch_distributed: cannot run 'no-such-program-here': "
    )


def test_bad_usage(tmp_path: Path, base_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*LAUNCHER, "--nproc", "0", "train.py"],
        env=base_env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr == "det_hub.launch.torch_distributed: --nproc must be >= 1, not 0\n"


def test_worker_env() -> None:
    env = worker_env(
        {"PATH": "/bin", "RANK": "9", "PYTHONUNBUFFERED": "0"},
        rank=1, size=4, port=29500, omp_threads="3",
    )
    assert env == {
        "PATH": "/bin", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4", "CROSS_RANK": "0", "CROSS_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "DET_HUB_DISTRIBUTED": "torch",
        "OMP_NUM_THREADS": "3", "PYTHONUNBUFFERED": "0",
    }
    assert "OMP_NUM_THREADS" not in worker_env({}, rank=0, size=1, port=1)


def test_exit_code() -> None:
    assert (exit_code(0), exit_code(3), exit_code(-9), exit_code(-15)) == (0, 3, 137, 143)


def test_worker_env_on_the_second_of_two_nodes() -> None:
    node = Node.from_env({"DET_HUB_NNODES": "2", "DET_HUB_NODE_RANK": "1",
                          "DET_HUB_CHIEF_ADDR": "10.1.2.3", "DET_HUB_CHIEF_PORT": "23456"})
    env = worker_env({}, rank=1, size=2, port=23456, node=node)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "CROSS_RANK": "1", "CROSS_SIZE": "2", "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"}
    assert Node.from_env({}) == Node()


@pytest.mark.parametrize(("env", "message"), [
    ({"DET_HUB_NNODES": "2"}, "incomplete"),
    ({"DET_HUB_NNODES": "2", "DET_HUB_NODE_RANK": "2", "DET_HUB_CHIEF_ADDR": "x",
      "DET_HUB_CHIEF_PORT": "1"}, "outside 0..1"),
])
def test_bad_node_variables(env: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        Node.from_env(env)


def test_two_nodes_make_one_world(tmp_path: Path, base_env: dict[str, str]) -> None:
    """Two launchers, as on two hosts, start 2 workers each; all 4 meet at the chief."""
    port = free_port()
    procs = []
    for node in (0, 1):
        env = dict(base_env, DET_HUB_NNODES="2", DET_HUB_NODE_RANK=str(node),
                   DET_HUB_CHIEF_ADDR="127.0.0.1", DET_HUB_CHIEF_PORT=str(port))
        procs.append(subprocess.Popen(
            [*LAUNCHER, "--nproc", "2", "--", sys.executable, GLOO_WORKER],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    lines = {**by_rank(outs[0][0]), **by_rank(outs[1][0])}
    assert sorted(lines) == ["[rank=0]", "[rank=1]", "[rank=2]", "[rank=3]"]
    for rank in range(4):
        assert lines[f"[rank={rank}]"][0].startswith(
            f"rank {rank} world 4 local {rank % 2} local_world 2 cross {rank // 2}/2")
        assert lines[f"[rank={rank}]"][1] == f"rank {rank} sum 6"  # 0 + 1 + 2 + 3
