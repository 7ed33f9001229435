"""DistributedContext over real torch.distributed (gloo, two processes) and the Core API."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeMaster

import det_hub.core as core

REPO = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_size_one_default() -> None:
    d = core.DistributedContext()
    assert (d.rank, d.size, d.is_chief) == (0, 1, True)
    assert d.allgather(3) == [3] and d.gather(3) == [3] and d.broadcast(3) == 3
    assert d.allgather_local("a") == ["a"] and d.broadcast_local("a") == "a"
    with pytest.raises(ValueError, match="from_torch_distributed"):
        core.DistributedContext(rank=1, size=2, local_size=2, local_rank=1)


def test_two_ranks_share_answers_and_checkpoint(
    master: FakeMaster, make_trial_env: Any, tmp_path: Path
) -> None:
    state = master.state
    state.preempt.set()
    state.ops = [10, 20]
    port = _port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    base.update(make_trial_env())
    base["PYTHONPATH"] = str(REPO)
    procs = []
    for rank in range(2):
        # Two "nodes" of one rank each, so the *_local collectives use their own groups.
        env = {
            **base,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("dist_worker.py"))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    r0, r1 = results
    assert (r0["rank"], r1["rank"], r0["cross_rank"], r1["cross_rank"]) == (0, 1, 0, 1)
    assert r0["allgather"] == r1["allgather"] == [0, 10]
    assert r0["gather"] == ["r0", "r1"] and r1["gather"] is None
    assert r0["broadcast"] == r1["broadcast"] == {"from": 0}
    assert r0["allgather_local"] == [0] and r1["allgather_local"] == [1]
    assert r0["broadcast_local"] == 0 and r1["broadcast_local"] == 1
    per_rank = r0["preempt_answers_agree"]
    assert per_rank[0] == per_rank[1] and per_rank[0][-1] is True
    assert r0["lengths"] == r1["lengths"] == [10, 20]
    assert [c["length"] for c in state.completed_ops] == [10, 20]
    # Only the chief reported: one checkpoint, holding both ranks' files.
    assert r0["storage_id"] == r1["storage_id"]
    ckpt = state.checkpoints[r0["storage_id"]]
    assert {k: v for k, v in ckpt["resources"].items() if k != "metadata.json"} == {
        "rank0.bin": 1,
        "rank1.bin": 2,
    }
    assert ckpt["metadata"] == {"steps_completed": 5}
    assert state.count("GET", "/allocations/7.0/signals/preemption") == 1


def test_closing_the_core_context_closes_the_distributed_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As Determined's core.init() does: a torch.distributed group that
    DistributedContext.from_torch_distributed() made is taken down when the core context
    closes, not left to interpreter exit, where gloo can abort the process."""
    distributed = core.DistributedContext(rank=0, size=1)
    closed: list[bool] = []
    monkeypatch.setattr(distributed, "close", lambda: closed.append(True))
    with core.init(distributed=distributed):
        assert closed == []
    assert closed == [True]
