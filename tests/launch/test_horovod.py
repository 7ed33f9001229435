"""``python -m det_hub.launch.horovod``: the ``horovodrun`` command it builds and runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from det_hub.launch._command import parse_launch_args
from det_hub.launch.horovod import PROG, horovod_env, horovodrun_command


def test_command_from_slots() -> None:
    options = parse_launch_args(PROG, ["--trace", "--", "python3", "train.py", "--lr", "0.1"],
                                allow_passthrough=True)
    assert horovodrun_command(options, 4) == [
        "horovodrun", "-np", "4", "--gloo", "-H", "127.0.0.1:4",
        "python3", "train.py", "--lr", "0.1",
    ]


def test_command_with_horovodrun_options() -> None:
    options = parse_launch_args(
        PROG, ["--verbose", "--start-timeout", "60", "--", "python3", "train.py"],
        allow_passthrough=True,
    )
    assert horovodrun_command(options, 2, "/opt/hvd/bin/horovodrun") == [
        "/opt/hvd/bin/horovodrun", "-np", "2", "--gloo", "-H", "127.0.0.1:2",
        "--verbose", "--start-timeout", "60", "python3", "train.py",
    ]


def test_env() -> None:
    assert horovod_env({"PATH": "/bin", "OMP_NUM_THREADS": "4"}, 2) == {
        "PATH": "/bin", "OMP_NUM_THREADS": "2", "DET_HUB_DISTRIBUTED": "horovod",
        "PYTHONUNBUFFERED": "1",
    }
    assert horovod_env({}, 1) == {"DET_HUB_DISTRIBUTED": "horovod", "PYTHONUNBUFFERED": "1"}


# The launcher prefers a horovodrun beside its Python; once Horovod is built into the
# environment these two tests cannot hide it.
needs_no_built_horovod = pytest.mark.skipif(
    (Path(sys.executable).parent / "horovodrun").exists(),
    reason="horovodrun is installed beside this Python",
)


def clean_env(path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(PATH=path, CUDA_VISIBLE_DEVICES="")
    env.pop("OMP_NUM_THREADS", None)
    return env


@needs_no_built_horovod
def test_not_installed(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", PROG, "python3", "train.py"],
        env=clean_env(str(tmp_path)), cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 127
    assert proc.stdout == ""
    assert proc.stderr == (
        "det_hub.launch.horovod: Horovod is not installed; build it with `make horovod`\n"
    )


@needs_no_built_horovod
def test_runs_horovodrun_from_path(tmp_path: Path) -> None:
    # A stand-in horovodrun that records how it was called and exits 5.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "horovodrun"
    record = tmp_path / "called.json"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'dist': os.environ.get('DET_HUB_DISTRIBUTED')}},"
        f" open({str(record)!r}, 'w'))\n"
        "print('from horovodrun')\n"
        "sys.exit(5)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    info = tmp_path / "cluster_info.json"
    info.write_text(json.dumps({"master_url": "http://m", "allocation_id": "1.0",
                                "task_id": "trial-1", "slot_ids": [0, 1, 2]}))
    env = dict(clean_env(f"{bindir}:/usr/bin:/bin"), DET_HUB_CLUSTER_INFO=str(info))
    proc = subprocess.run(
        [sys.executable, "-m", PROG, "--", "python3", "train.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 5
    assert proc.stdout == "from horovodrun\n"
    assert json.loads(record.read_text()) == {
        "argv": ["-np", "3", "--gloo", "-H", "127.0.0.1:3", "python3", "train.py"],
        "dist": "horovod",
    }
