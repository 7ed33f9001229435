"""Determined scripts as Determined's own end-to-end fixtures write them, on a real master.

Written from Determined's documentation, with Determined's import names only: a "noop"-style
Core API trial (its cluster info with ``container_rank``, metrics, a NaN validation, a
checkpoint, a crash and the restart that resumes from it, an exit code), a context that is a
directory of symbolic links, and a ``startup-hook.sh``.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from det_hub.client import Client
from det_hub.testing import MasterProcess, reap_tasks

pytestmark = pytest.mark.slow

NOOP = textwrap.dedent('''
    import json
    import sys

    import determined as det

    info = det.get_cluster_info()
    hp = info.trial.hparams
    print(f"container rank {info.container_rank} of {len(info.container_addrs)}", flush=True)
    with det.core.init() as core_context:
        start = 0
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                start = json.loads((path / "state.json").read_text())["batches"]
            print(f"resumed at {start}", flush=True)
        for op in core_context.searcher.operations():
            for batch in range(start + 1, op.length + 1):
                core_context.train.report_training_metrics(
                    steps_completed=batch, metrics={"loss": 1.0 / batch})
                if batch == hp["checkpoint_at"]:
                    with core_context.checkpoint.store_path({"steps_completed": batch}) as (
                            path, uuid):
                        (path / "state.json").write_text(json.dumps({"batches": batch}))
                    if not info.latest_checkpoint and hp["crash_after_checkpoint"]:
                        print("crashing", flush=True)
                        sys.exit(3)
            core_context.train.report_validation_metrics(
                steps_completed=op.length, metrics={"validation_error": float("nan")})
            op.report_completed(float("nan"))
    sys.exit(hp["exit_code"])
''')


def noop_config(**hparams: object) -> dict[str, object]:
    hp = {"checkpoint_at": 3, "crash_after_checkpoint": True, "exit_code": 0, **hparams}
    return {"name": "noop", "entrypoint": "python3 noop.py", "hyperparameters": hp,
            "searcher": {"name": "single", "metric": "validation_error",
                         "max_length": {"batches": 5}},
            "max_restarts": 1}


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    proc = MasterProcess(tmp_path / "data", f"sqlite:///{tmp_path / 'data' / 'det_hub.db'}")
    proc.start()
    yield proc
    proc.stop()
    reap_tasks(tmp_path)  # trials outlive a stopped master by design


def logs(master: MasterProcess, eid: int) -> list[str]:
    return [line for t in master.trials(eid) for line in master.logs(t["id"])]


def test_a_noop_trial_checkpoints_crashes_resumes_and_reports_nan(
        master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "noop"
    context.mkdir()
    (context / "noop.py").write_text(NOOP)
    eid = master.create_ok(noop_config(), context=context)
    exp = master.wait_state(eid, timeout=120)
    lines = logs(master, eid)
    assert exp["state"] == "COMPLETED", "\n".join(lines[-20:])
    [trial] = master.trials(eid)
    assert trial["restarts"] == 1 and trial["steps_completed"] == 5
    assert "container rank 0 of 1" in lines and "crashing" in lines and "resumed at 3" in lines
    # The NaN validation is stored and served as Determined's API serves it.
    r = master.api("GET", f"/trials/{trial['id']}/metrics?group=validation")
    [row] = json.loads(r.text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))[
        "metrics"]
    assert row["metrics"]["validation_error"] == "NaN"


def test_a_noop_trial_exiting_non_zero_fails(master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "noop"
    context.mkdir()
    (context / "noop.py").write_text(NOOP)
    eid = master.create_ok(noop_config(crash_after_checkpoint=False, exit_code=7),
                           context=context)
    assert master.wait_state(eid, timeout=120)["state"] == "ERROR"
    assert master.trials(eid)[0]["state"] == "ERROR"


def test_a_context_of_symbolic_links_runs(master: MasterProcess, tmp_path: Path) -> None:
    """Determined's mnist fixture is a directory of links into its examples: the CLI packs
    the files they lead to."""
    shared = tmp_path / "examples"
    (shared / "lib").mkdir(parents=True)
    (shared / "noop.py").write_text(NOOP)
    (shared / "lib" / "helper.py").write_text("WORD = 'linked'\n")
    context = tmp_path / "fixture"
    context.mkdir()
    os.symlink(shared / "noop.py", context / "noop.py")
    os.symlink("../examples/lib", context / "lib")
    (context / "startup-hook.sh").write_text(
        "echo hook running in $(pwd | xargs basename)\n"
        "export FROM_HOOK=$(python3 -c 'import sys; sys.path.insert(0, \"lib\"); "
        "import helper; print(helper.WORD)')\n")
    with Client(master.url, master.token) as client:
        exp = client.create_experiment(yaml.safe_dump(noop_config(
            crash_after_checkpoint=False)), context)
    assert master.wait_state(exp.id, timeout=120)["state"] == "COMPLETED"
    lines = logs(master, exp.id)
    assert "hook running in run" in lines


def test_a_failing_startup_hook_fails_the_trial_and_says_so(
        master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "noop"
    context.mkdir()
    (context / "noop.py").write_text(NOOP)
    (context / "startup-hook.sh").write_text(
        "python3 -c 'import no_such_package_here' 2>/dev/null"
        " || { echo 'cannot install'; false; }\n")
    eid = master.create_ok({**noop_config(), "max_restarts": 0}, context=context)
    assert master.wait_state(eid, timeout=120)["state"] == "ERROR"
    lines = logs(master, eid)
    assert "cannot install" in lines
    assert any("startup-hook.sh failed with exit code 1; the task's command did not run" in m
               for m in lines), lines
    assert not any(m.startswith("container rank") for m in lines)


DISTRIBUTED = textwrap.dedent('''
    import determined as det

    distributed = det.core.DistributedContext.from_torch_distributed()
    with det.core.init(distributed=distributed) as core_context:
        rank = core_context.distributed.rank
        ranks = core_context.distributed.allgather(rank)
        print(f"rank {rank} of {core_context.distributed.size} saw {ranks}", flush=True)
        for op in core_context.searcher.operations():
            if rank == 0:
                core_context.train.report_training_metrics(
                    steps_completed=op.length, metrics={"ranks": float(sum(ranks))})
            with core_context.checkpoint.store_path({"steps_completed": op.length},
                                                    shard=True) as (path, uuid):
                (path / f"rank{rank}.txt").write_text(str(rank))
            if rank == 0:
                core_context.train.report_validation_metrics(
                    steps_completed=op.length, metrics={"validation_error": 0.5})
                op.report_completed(0.5)
''')


def test_core_api_with_two_ranks_under_the_launcher(master: MasterProcess,
                                                    tmp_path: Path) -> None:
    """Determined's Core API distributed tutorial, in small: two ranks under
    ``python3 -m determined.launch.torch_distributed`` act as one trial."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two ranks need two CPU slots")
    context = tmp_path / "dist"
    context.mkdir()
    (context / "dist.py").write_text(DISTRIBUTED)
    eid = master.create_ok({
        "name": "dist", "max_restarts": 0,
        "entrypoint": "python3 -m determined.launch.torch_distributed python3 dist.py",
        "resources": {"slots_per_trial": 2},
        "searcher": {"name": "single", "metric": "validation_error",
                     "max_length": {"batches": 4}}}, context=context)
    exp = master.wait_state(eid, timeout=180)
    lines = logs(master, eid)
    assert exp["state"] == "COMPLETED", "\n".join(lines[-30:])
    assert sum("saw [0, 1]" in line for line in lines) == 2, lines
    [trial] = master.trials(eid)
    rows = master.get(f"/trials/{trial['id']}/metrics?group=training")["metrics"]
    assert [r["metrics"]["ranks"] for r in rows] == [1.0]  # the chief's report, once
    ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    assert len(ckpts) == 1
    files = master.data_dir / "checkpoints" / "admin" / ckpts[0]["uuid"]
    assert sorted(p.name for p in files.iterdir() if p.suffix == ".txt") == [
        "rank0.txt", "rank1.txt"]
