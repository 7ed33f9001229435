"""What the local agent's sandbox adds to a task's start.

The clock starts when ``LocalAgent.launch`` is called and stops when the task's first output
line is in its log (read every 2 ms): the runner, bubblewrap and the drop to the task's user
where the master runs as root, ``det_hub.exec.task_start`` unpacking a small context, then
``python -c "print('up')"``. The same start runs without the sandbox in the same process,
runs alternating, so both see the same machine. (Without the sandbox the task keeps the
master's account: the drop to another user is part of what is measured.)

    python bench/task_start.py [--runs 30]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from det_hub.agents import TaskSpec
from det_hub.agents.local import LocalAgent
from det_hub.testing import targz

#: The account the task runs as where the bench runs as root.
NOBODY = (65534, 65534)


def time_one(agent: LocalAgent, allocation_id: str, context: bytes) -> float:
    """Seconds from launch to the task's first log line."""
    spec = TaskSpec(allocation_id, ["python3", "-c", "print('up')"], {}, context, [0],
                    {"cluster_info.json": "{}"}, run_as=NOBODY)
    t0 = time.perf_counter()
    handle = agent.launch(spec)
    deadline = time.monotonic() + 30
    while not handle.read_logs():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{allocation_id} printed nothing in 30 s: "
                               f"{(handle.root / 'runner.err').read_text()}")
        time.sleep(0.002)
    elapsed = time.perf_counter() - t0
    while handle.exit_status() is None:
        time.sleep(0.01)
    status = handle.exit_status()
    if status is None or not status.success:
        raise RuntimeError(f"{allocation_id} failed: {status}")
    agent.reap(handle)
    agent.cleanup(allocation_id)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="det-hub-bench-"))
    try:
        sandboxed = LocalAgent(work_root=work / "work", use_gpus=False)
        if not sandboxed.sandboxed:
            print(f"no sandbox here: {sandboxed.sandbox_problem}", file=sys.stderr)
            return 1
        # The same agent with the sandbox left out: only the wrapping differs.
        bare = LocalAgent(work_root=work / "work", use_gpus=False)
        bare.sandbox_problem = "left out for the comparison"
        bare.isolation = "none"
        context = targz({"train.py": "print('hello')\n", "data/x.txt": "x" * 1000})
        times: dict[str, list[float]] = {"sandbox": [], "none": []}
        for i in range(2):  # warm the page cache and the probe of the task Python
            time_one(sandboxed, f"warm.s{i}", context)
            time_one(bare, f"warm.n{i}", context)
        for i in range(args.runs):
            times["sandbox"].append(time_one(sandboxed, f"run.s{i}", context))
            times["none"].append(time_one(bare, f"run.n{i}", context))
        med = {k: statistics.median(v) for k, v in times.items()}
        for k, v in times.items():
            print(f"{k:8s} median {med[k] * 1000:7.1f} ms  min {min(v) * 1000:7.1f} ms  "
                  f"max {max(v) * 1000:7.1f} ms  ({len(v)} starts)")
        print(f"the sandbox adds {(med['sandbox'] - med['none']) * 1000:.1f} ms (median)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
