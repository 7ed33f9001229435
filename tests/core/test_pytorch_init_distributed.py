"""``det_hub.pytorch.init()`` under ``python -m determined.launch.torch_distributed``: the ranks
form one torch.distributed (gloo) group and act as one trial."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from conftest import TRIAL_ID, FakeMaster

from det_hub.compat import SITE_DIR

REPO = Path(__file__).resolve().parents[2]

WORKER = """
import json
import torch.distributed as dist
from determined import pytorch

with pytorch.init() as ctx:
    d = ctx.distributed
    out = {"rank": d.rank, "size": d.size, "group": dist.is_initialized(),
           "world": dist.get_world_size(), "allgather": d.allgather(d.rank * 10)}
    ctx.core.train.report_validation_metrics(5, {"validation_loss": float(d.rank)})
    with ctx.core.checkpoint.store_path({"steps_completed": 5}, shard=True) as (path, sid):
        (path / f"rank{d.rank}.txt").write_text(str(d.rank))
    out["storage_id"] = sid
out["group_after"] = dist.is_initialized()
print("RESULT " + json.dumps(out), flush=True)
"""


def test_ranks_share_one_group_and_only_the_chief_reports(
    master: FakeMaster, make_trial_env: Any, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(make_trial_env())
    info_path = Path(env["DET_HUB_CLUSTER_INFO"])
    info = json.loads(info_path.read_text())
    info["slot_ids"] = [0, 1]
    info_path.write_text(json.dumps(info))
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO)])
    env["CUDA_VISIBLE_DEVICES"] = ""
    worker = tmp_path / "worker.py"
    worker.write_text(textwrap.dedent(WORKER))
    proc = subprocess.run(
        [sys.executable, "-m", "determined.launch.torch_distributed", "--",
         sys.executable, str(worker)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    results = sorted(
        (json.loads(line.split("RESULT ", 1)[1]) for line in proc.stdout.splitlines()
         if "RESULT " in line),
        key=lambda r: r["rank"],
    )
    assert [(r["rank"], r["size"], r["group"], r["world"]) for r in results] == [
        (0, 2, True, 2), (1, 2, True, 2)]
    assert results[0]["allgather"] == results[1]["allgather"] == [0, 10]
    assert results[0]["storage_id"] == results[1]["storage_id"]
    assert not any(r["group_after"] for r in results)  # init() took its group down again
    rows = [row for group, row in master.state.metric_rows if group == "validation"]
    assert [row["metrics"] for row in rows] == [{"validation_loss": 0.0}]
    assert master.state.count("POST", "/checkpoints") == 1
    assert master.state.count("POST", f"/trials/{TRIAL_ID}/metrics") == 1
    ckpt = next(iter(master.state.checkpoints.values()))
    assert sorted(ckpt["resources"]) == ["metadata.json", "rank0.txt", "rank1.txt"]
