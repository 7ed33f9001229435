"""Determined's published names exist in det_hub with Determined's meaning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import det_hub.core as core
from det_hub.compat import SITE_DIR

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), str(REPO)])
    env.update(extra)
    return env


def _run(code: str, **extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=_env(**extra), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cluster_info_reads_container_rank_and_friends(tmp_path: Path) -> None:
    path = tmp_path / "cluster_info.json"
    path.write_text(json.dumps({
        "master_url": "http://127.0.0.1:1", "allocation_id": "7.0", "task_id": "trial-7",
        "task_type": "TRIAL", "slot_ids": [2, 3], "container_addrs": ["10.0.0.1", "10.0.0.2"],
        "container_rank": 1, "container_slot_counts": [2, 2], "master_cert_file": "noverify",
        "trial": {"trial_id": 7, "experiment_id": 1, "hparams": {"lr": 0.1},
                  "config": {"data": {"url": "s3://x"}}},
    }))
    info = core.ClusterInfo.from_file(path)
    assert info.container_rank == 1
    assert info.container_slot_counts == [2, 2]
    assert info.container_addrs == ["10.0.0.1", "10.0.0.2"]
    assert info.master_cert_file == "noverify" and info.master_cert_name is None
    assert info.user_data == {"url": "s3://x"}
    assert info.trial is not None and info.trial.hparams == {"lr": 0.1}
    assert isinstance(info.gpu_uuids, list)


def test_cluster_info_of_an_older_master_defaults_to_one_container(tmp_path: Path) -> None:
    path = tmp_path / "cluster_info.json"
    path.write_text(json.dumps({"master_url": "http://m", "allocation_id": "1.0",
                                "task_id": "cmd-1", "task_type": "COMMAND", "slot_ids": [0, 1]}))
    info = core.ClusterInfo.from_file(path)
    assert (info.container_rank, info.container_slot_counts, info.user_data) == (0, [2], {})


def test_import_det_hub_reaches_subpackages_lazily() -> None:
    out = _run("""
        import sys, det_hub
        before = [m for m in ("det_hub.core", "det_hub.pytorch", "det_hub.client", "torch")
                  if m in sys.modules]
        print(before)
        print(det_hub.core.init.__module__, det_hub.client.Client.__name__,
              det_hub.pytorch.PyTorchTrialContext.__name__, "core" in dir(det_hub))
        try:
            det_hub.nothing_here
        except AttributeError as exc:
            print(exc)
    """)
    assert out.splitlines() == [
        "[]",
        "det_hub.core._context Client PyTorchTrialContext True",
        "module 'det_hub' has no attribute 'nothing_here'",
    ]


def test_determined_alias_gives_core_pytorch_common_and_log_format() -> None:
    out = _run("""
        import sys
        import determined as det
        import det_hub
        print("determined.core" in sys.modules)
        print(det.core.init is det_hub.core.init, det.pytorch.init is det_hub.pytorch.init)
        from determined.common import util
        print(util._LEGACY_TRAINING, util._LEGACY_VALIDATION, list(util.chunks("abcde", 2)))
        from determined.launch import wrap_rank
        print(wrap_rank.__name__, det.LOG_FORMAT)
    """)
    assert out.splitlines() == [
        "False",
        "True True",
        "training validation ['ab', 'cd', 'e']",
        "det_hub.launch.wrap_rank %(levelname)s: [%(process)s] %(name)s: %(message)s",
    ]


def test_wrap_rank_prefixes_each_line_and_keeps_the_exit_code() -> None:
    script = (
        "import sys; print('one'); print('two'); sys.stdout.write('a\\rb'); "
        "sys.stdout.flush(); print('err', file=sys.stderr); sys.exit(3)"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "determined.launch.wrap_rank", "NO_SUCH_VAR,MY_RANK", "--",
         sys.executable, "-c", script],
        env=_env(MY_RANK="5"), capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == ["[rank=5] one", "[rank=5] two", "[rank=5] a", "[rank=5] b"]
    assert proc.stderr == "[rank=5] err\n"
    proc = subprocess.run(
        [sys.executable, "-m", "det_hub.launch.wrap_rank", "2", sys.executable, "-c", "print(1)"],
        env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "[rank=2] 1\n")


def test_distributed_context_names() -> None:
    d = core.DistributedContext(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0,
                                cross_size=1, chief_ip=None, pub_port=1, pull_port=2,
                                port_offset=3, force_tcp=True)
    assert (d.get_num_agents(), d.chief_ip) == (1, "127.0.0.1")
    assert d.broadcast_local() is None and d.gather_local(4) == [4]
    with pytest.raises(ValueError, match="from_torch_distributed"):
        core.DistributedContext(rank=0, size=2, local_rank=0, local_size=2, cross_rank=0,
                                cross_size=1)


def test_from_horovod_takes_ranks_and_collectives_from_hvd() -> None:
    # Horovod is not installed here: a stand-in answering like rank 1 of 2 nodes x 2 workers.
    sent: list[object] = []
    hvd = SimpleNamespace(
        rank=lambda: 3, size=lambda: 4, local_rank=lambda: 1, local_size=lambda: 2,
        cross_rank=lambda: 1, cross_size=lambda: 2,
        allgather_object=lambda obj: sent.append(obj) or [(0, "a"), (0, "b"), (1, "c"), obj],
        broadcast_object=lambda obj, root_rank: "from-chief",
    )
    d = core.DistributedContext.from_horovod(hvd, chief_ip="10.0.0.1")
    assert (d.rank, d.size, d.local_rank, d.local_size, d.cross_rank, d.cross_size) == (
        3, 4, 1, 2, 1, 2)
    assert d.chief_ip == "10.0.0.1" and d.get_num_agents() == 2
    assert d.broadcast("x") == "from-chief"
    assert d.gather("x") is None  # only rank 0 gets the gathered list
    assert d.allgather_local("d") == ["c", "d"]  # the objects of node 1 only


#: The public names of Determined's ``determined.core`` (its ``Dummy*`` off-cluster stand-ins
#: aside: ``core.init()`` outside a cluster gives det_hub's local context instead).
DETERMINED_CORE = (
    "CheckpointContext", "Context", "DistributedContext", "DownloadMode", "EarlyExitReason",
    "ExperimentalCoreContext", "PreemptContext", "PreemptMode", "SearcherContext",
    "SearcherMode", "SearcherOperation", "TensorboardMode", "TrainContext", "Unit", "init",
)


def test_every_public_name_of_determined_core_is_there(tmp_path: Path) -> None:
    # ``determined.core`` is this module under det_hub's alias package (tested above).
    assert [n for n in DETERMINED_CORE if not hasattr(core, n)] == []
    with core.init(checkpoint_storage=str(tmp_path)) as context:
        for attribute in ("checkpoint", "distributed", "preempt", "searcher", "train",
                          "profiler", "experimental", "info"):
            assert hasattr(context, attribute), attribute
        assert context.searcher.get_configured_units() is None
        context.experimental.report_task_using_checkpoint("not-linked-off-cluster")
    assert [m.value for m in core.DownloadMode] == [
        "LOCAL_WORKERS_SHARE_DOWNLOAD", "NO_SHARED_DOWNLOAD"]
    assert [m.name for m in core.Unit] == ["EPOCHS", "RECORDS", "BATCHES"]
