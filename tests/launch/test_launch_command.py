"""The launchers' shared command line, worker count and thread share."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from det_hub.launch._command import (
    HelpRequested,
    LaunchError,
    LaunchOptions,
    parse_launch_args,
    slot_count,
    threads_per_worker,
)

PROG = "det_hub.launch.torch_distributed"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python3", "train.py"], LaunchOptions(["python3", "train.py"])),
        (["--", "python3", "train.py", "--lr", "1"],
         LaunchOptions(["python3", "train.py", "--lr", "1"])),
        (["--trace", "python3", "train.py"], LaunchOptions(["python3", "train.py"], trace=True)),
        (["--trace", "--", "python3", "-u", "train.py"],
         LaunchOptions(["python3", "-u", "train.py"], trace=True)),
        (["--nproc", "3", "python3", "t.py"], LaunchOptions(["python3", "t.py"], nproc=3)),
        (["--nproc=2", "--", "python3", "t.py"], LaunchOptions(["python3", "t.py"], nproc=2)),
        (["train.py", "--nproc", "5"], LaunchOptions([sys.executable, "train.py", "--nproc", "5"])),
        # Only the first `--` is the launcher's, and only before the command.
        (["--", "prog", "--", "x"], LaunchOptions(["prog", "--", "x"])),
        (["python3", "t.py", "--", "--x"], LaunchOptions(["python3", "t.py", "--", "--x"])),
        (["--trace", "python3", "t.py", "--", "x"],
         LaunchOptions(["python3", "t.py", "--", "x"], trace=True)),
    ],
)
def test_parse(argv: list[str], expected: LaunchOptions) -> None:
    assert parse_launch_args(PROG, argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no worker command given"),
        (["--trace"], "no worker command given"),
        (["--"], "no worker command given"),
        (["--nproc"], "--nproc needs a number"),
        (["--nproc", "two", "x"], "--nproc must be a whole number, not 'two'"),
        (["--nproc", "0", "x"], "--nproc must be >= 1, not 0"),
        (["--max_restarts", "1", "--", "x"], "unknown option '--max_restarts'"),
        (["-v", "python3", "train.py"], "unknown option '-v'"),
    ],
)
def test_parse_errors(argv: list[str], message: str) -> None:
    with pytest.raises(LaunchError) as info:
        parse_launch_args(PROG, argv)
    assert str(info.value).splitlines()[0] == message
    assert info.value.exit_code == 2


def test_help() -> None:
    with pytest.raises(HelpRequested) as info:
        parse_launch_args(PROG, ["--help"])
    assert str(info.value).startswith(f"usage: python -m {PROG} ")
    assert info.value.exit_code == 0


def test_passthrough_only_before_the_separator() -> None:
    options = parse_launch_args(
        PROG, ["--trace", "--verbose", "--start-timeout", "60", "--", "python3", "t.py"],
        allow_passthrough=True,
    )
    assert options == LaunchOptions(
        ["python3", "t.py"], trace=True, passthrough=["--verbose", "--start-timeout", "60"]
    )
    with pytest.raises(LaunchError, match="unknown option '--verbose'"):
        parse_launch_args(PROG, ["--verbose", "python3", "t.py"], allow_passthrough=True)
    # No launcher options at all: a `--` in the command is the command's.
    assert parse_launch_args(PROG, ["python3", "t.py", "--", "-v"], allow_passthrough=True) == (
        LaunchOptions(["python3", "t.py", "--", "-v"])
    )


def write_info(tmp_path: Path, slot_ids: list[int]) -> str:
    path = tmp_path / "cluster_info.json"
    path.write_text(json.dumps({"master_url": "http://m", "allocation_id": "1.0",
                                "task_id": "trial-1", "slot_ids": slot_ids}))
    return str(path)


def test_slot_count(tmp_path: Path) -> None:
    plain = LaunchOptions(["x"])
    assert slot_count(plain, {}) == 1
    assert slot_count(LaunchOptions(["x"], nproc=4), {}) == 4
    info = write_info(tmp_path, [0, 1, 2])
    assert slot_count(plain, {"DET_HUB_CLUSTER_INFO": info, "CUDA_VISIBLE_DEVICES": ""}) == 3
    gpus = {"DET_HUB_CLUSTER_INFO": info, "CUDA_VISIBLE_DEVICES": "4,5,7"}
    assert slot_count(plain, gpus) == 3
    # An explicit --nproc wins over the slot count, but never over the GPUs there are.
    assert slot_count(LaunchOptions(["x"], nproc=2), gpus) == 2
    with pytest.raises(LaunchError) as info_error:
        slot_count(LaunchOptions(["x"], nproc=4), gpus)
    assert str(info_error.value) == (
        "4 workers but only 3 GPUs in CUDA_VISIBLE_DEVICES (4,5,7); "
        "each worker needs its own GPU"
    )


def test_slot_count_bad_cluster_info(tmp_path: Path) -> None:
    empty = write_info(tmp_path, [])
    with pytest.raises(LaunchError, match="lists no slot_ids"):
        slot_count(LaunchOptions(["x"]), {"DET_HUB_CLUSTER_INFO": empty})
    with pytest.raises(LaunchError, match="cannot read the cluster-info file"):
        slot_count(LaunchOptions(["x"]), {"DET_HUB_CLUSTER_INFO": str(tmp_path / "none")})
    (tmp_path / "bad.json").write_text("[")
    with pytest.raises(LaunchError, match="not valid JSON"):
        slot_count(LaunchOptions(["x"]), {"DET_HUB_CLUSTER_INFO": str(tmp_path / "bad.json")})


def test_threads_per_worker() -> None:
    assert threads_per_worker(1, {"OMP_NUM_THREADS": "8"}) is None
    assert threads_per_worker(2, {"OMP_NUM_THREADS": "8"}) == "4"
    assert threads_per_worker(3, {"OMP_NUM_THREADS": "8"}) == "2"
    assert threads_per_worker(4, {"OMP_NUM_THREADS": "2"}) == "1"
    assert threads_per_worker(2, {"OMP_NUM_THREADS": "lots"}) is None
