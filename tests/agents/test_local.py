"""The local agent runs real processes, captures their output, and re-adopts them."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from det_hub.agents import TaskSpec
from det_hub.agents.local import LocalAgent, LocalTaskHandle
from det_hub.agents.slots import discover_slots
from det_hub.testing import targz


def wait_exit(handle: LocalTaskHandle, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = handle.exit_status()
        if status is not None:
            return status
        time.sleep(0.05)
    raise AssertionError("the task did not finish")


SCRIPT = """
import os, sys
print("out:", os.environ["MY_VAR"], os.environ["OMP_NUM_THREADS"], repr(os.environ["CUDA_VISIBLE_DEVICES"]))
print("err line", file=sys.stderr)
print("cwd has", sorted(os.listdir(".")))
print("affinity", sorted(os.sched_getaffinity(0)))
sys.exit(int(os.environ.get("EXIT", "0")))
"""


#: Who the tasks run as where the master runs as root (an unprivileged account).
NOBODY = (65534, 65534)


def spec(*args: object, **kwargs: object) -> TaskSpec:
    """A TaskSpec that runs as nobody."""
    return TaskSpec(*args, run_as=NOBODY, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def agent(tmp_path: Path) -> LocalAgent:
    return LocalAgent(work_root=tmp_path / "work", use_gpus=False)


def test_slots_are_groups_of_cores() -> None:
    ncpu = len(os.sched_getaffinity(0))
    slots = discover_slots(cpu_slot_cores=1, use_gpus=False)
    assert [s.kind for s in slots] == ["cpu"] * ncpu
    assert sorted(c for s in slots for c in s.cpus) == sorted(os.sched_getaffinity(0))
    assert len(discover_slots(cpu_slot_cores=ncpu, use_gpus=False)) == 1
    with pytest.raises(ValueError):
        discover_slots(cpu_slot_cores=0)


def test_runs_the_context_and_captures_both_streams(agent: LocalAgent) -> None:
    handle = agent.launch(spec("1.a", ["python3", "train.py"], {"MY_VAR": "hi"},
                                   targz({"train.py": SCRIPT}), [0], {"info.json": "{}"}))
    status = wait_exit(handle)
    assert status.exit_code == 0 and status.success
    lines = handle.read_logs()
    messages = {(line.stdtype, line.message) for line in lines}
    assert ("stdout", "out: hi 1 ''") in messages
    assert ("stderr", "err line") in messages
    assert ("stdout", "cwd has ['train.py']") in messages
    first_slot_cpus = agent.slots[0].cpus
    assert ("stdout", f"affinity {sorted(first_slot_cpus)}") in messages
    assert Path(agent.file_path("1.a", "info.json")).read_text() == "{}"
    assert handle.read_logs() == []  # the offset moved past everything
    agent.reap(handle)


def test_exit_codes_and_missing_programs(agent: LocalAgent) -> None:
    handle = agent.launch(spec("2.a", [sys.executable, "train.py"],
                                   {"MY_VAR": "x", "EXIT": "3"}, targz({"train.py": SCRIPT}), [0]))
    assert wait_exit(handle).exit_code == 3
    missing = agent.launch(spec("3.a", ["no-such-program-here"], {}, None, [0]))
    status = wait_exit(missing)
    assert status.exit_code == 127
    assert "cannot start 'no-such-program-here'" in (status.reason or "")


def test_kill_stops_the_whole_task(agent: LocalAgent) -> None:
    handle = agent.launch(spec("4.a", [sys.executable, "-c", "import time; "
                                   "print('up', flush=True); time.sleep(60)"], {}, None, [0]))
    deadline = time.monotonic() + 10
    while not any(line.message == "up" for line in handle.read_logs()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    agent.kill(handle)
    status = wait_exit(handle)
    assert status.signal == "SIGTERM"


def test_a_new_agent_adopts_a_running_task(agent: LocalAgent, tmp_path: Path) -> None:
    handle = agent.launch(spec("5.a", [sys.executable, "-c",
                                   "import time\nfor i in range(3):\n print(i, flush=True)\n"
                                   " time.sleep(0.3)"], {}, None, [0]))
    time.sleep(0.4)
    first = handle.read_logs()
    # A second agent over the same directory stands for the master after a restart.
    again = LocalAgent(work_root=tmp_path / "work", use_gpus=False)
    adopted = again.attach("5.a", handle.log_offset, handle.pid)
    assert adopted is not None
    assert wait_exit(adopted).exit_code == 0
    rest = adopted.read_logs()
    assert [line.message for line in first + rest] == ["0", "1", "2"]
    # A task whose runner is gone without an exit status cannot be adopted.
    assert again.attach("6.z", 0, 999_999) is None


HOOKED = {"train.py": "import os\nprint('command sees', os.environ.get('FROM_HOOK'))\n"}


@pytest.mark.parametrize(("hook", "code", "reason"), [
    ("echo installing\nexport FROM_HOOK=yes\n", 0, None),
    ("echo installing\nfalse\necho never\n", 1,
     "startup-hook.sh failed with exit code 1; the task's command did not run"),
    ("echo installing\nexit 0\n", 126,
     "startup-hook.sh exited instead of returning; the task's command did not run"),
])
def test_a_startup_hook_runs_before_the_command(agent: LocalAgent, hook: str, code: int,
                                                reason: str | None) -> None:
    handle = agent.launch(spec("7.a", ["python3", "train.py"], {}, targz(
        {**HOOKED, "startup-hook.sh": hook}), [0]))
    status = wait_exit(handle)
    messages = [line.message for line in handle.read_logs()]
    assert (status.exit_code, status.reason) == (code, reason), messages
    assert messages[0] == "installing" and "never" not in messages
    ran = [m for m in messages if m.startswith("command sees")]
    assert ran == (["command sees yes"] if code == 0 else [])
