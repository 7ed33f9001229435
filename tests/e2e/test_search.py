"""Hyperparameter searches through a real master: random, grid and ASHA (stop and promote).

The trials run ``contexts/curves/train.py``, whose validation loss is ``(x - 0.3) ** 2 +
1 / step``: the trial with ``x`` nearest 0.3 is the best at every length, so what a correct
search must keep is known.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from det_hub.testing import TERMINAL, MasterProcess

pytestmark = pytest.mark.slow

CURVES = Path(__file__).parent / "contexts" / "curves"


def search_config(searcher: dict[str, Any], length: int, **hparams: Any) -> dict[str, Any]:
    return {
        "name": f"search-{searcher['name']}",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                            "sleep": 0.02, **hparams},
        "searcher": {"metric": "validation_loss", "max_length": {"batches": length},
                     **searcher},
        "reproducibility": {"experiment_seed": 7},
        "max_restarts": 0,
    }


class RunningJobs:
    """Samples the job queue while a search runs: the most slots in use at once (one per
    running trial, as the searches here ask for one slot a trial)."""

    def __init__(self, master: MasterProcess) -> None:
        self.master = master
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            jobs = self.master.get("/jobs")["jobs"]
            self.most = max(self.most, sum(j["slots_allocated"] for j in jobs))
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def run(master: MasterProcess, config: dict[str, Any],
        timeout: float = 300) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    jobs = RunningJobs(master)
    try:
        eid = master.create_ok(config, context=CURVES)
        exp = master.wait_state(eid, timeout=timeout)
    finally:
        most = jobs.stop()
    return exp, master.trials(eid), most


def slots(master: MasterProcess) -> int:
    return sum(len(a["slots"]) for a in master.get("/agents")["agents"])


def test_random_search_runs_trials_side_by_side(master: MasterProcess) -> None:
    config = search_config({"name": "random", "max_trials": 5, "max_concurrent_trials": 2}, 20)
    exp, trials, most = run(master, config)
    assert exp["state"] == "COMPLETED" and exp["progress"] == 1.0
    assert len(trials) == 5
    assert all(t["state"] == "COMPLETED" and t["steps_completed"] == 20 for t in trials)
    assert len({t["hparams"]["x"] for t in trials}) == 5
    assert most == min(2, slots(master))  # parallel, and never past max_concurrent_trials


def test_grid_search_runs_every_point(master: MasterProcess) -> None:
    config = search_config({"name": "grid"}, 5)
    config["hyperparameters"]["x"]["count"] = 3
    config["hyperparameters"]["opt"] = {"type": "categorical", "vals": ["sgd", "adam"]}
    exp, trials, _ = run(master, config)
    assert exp["state"] == "COMPLETED"
    points = sorted((t["hparams"]["x"], t["hparams"]["opt"]) for t in trials)
    assert points == sorted((x, o) for x in (0.0, 0.5, 1.0) for o in ("sgd", "adam"))


ASHA = {"name": "adaptive_asha", "max_trials": 8, "divisor": 2, "max_rungs": 3,
        "mode": "aggressive", "max_concurrent_trials": 2}


def test_asha_stops_the_worse_trials_at_their_rungs(master: MasterProcess) -> None:
    exp, trials, most = run(master, search_config(ASHA, 16))
    assert exp["state"] == "COMPLETED" and exp["progress"] == 1.0
    assert most <= 2
    assert len(trials) == 8 and all(t["state"] == "COMPLETED" for t in trials)
    best = min(trials, key=lambda t: abs(t["hparams"]["x"] - 0.3))
    assert best["steps_completed"] == 16
    stopped = [t for t in trials if t["steps_completed"] < 16]
    assert stopped, "ASHA stopped nothing"
    # A stopped trial was stopped at a rung it reported at (validate_at made it report there).
    for t in stopped:
        validations = master.get(f"/trials/{t['id']}/metrics?group=validation")["metrics"]
        assert validations[0]["steps_completed"] == 4
    search = master.get(f"/experiments/{exp['id']}/searcher")["searcher"]
    [bracket] = search["rungs"]["brackets"]
    assert [r["length"] for r in bracket["rungs"]] == [4, 8, 16]
    assert bracket["rungs"][0]["reported"] == 8
    assert bracket["rungs"][0]["trial_ids"][0] == best["id"]  # best first
    assert search["shutdown"] and search["waiting_trials"] == []


def test_asha_with_promotions_pauses_at_rungs_and_resumes_from_checkpoints(
        master: MasterProcess) -> None:
    config = search_config({**ASHA, "stop_once": False}, 16)
    eid = master.create_ok(config, context=CURVES)
    waited = master.wait(
        lambda: master.get(f"/experiments/{eid}/searcher")["searcher"]["waiting_trials"],
        timeout=120)
    assert waited, "no trial ever waited at its rung"
    exp = master.wait_state(eid, timeout=300)
    trials = master.trials(eid)
    assert exp["state"] == "COMPLETED"
    assert len(trials) == 8 and all(t["state"] == "COMPLETED" for t in trials)
    assert {t["steps_completed"] for t in trials} <= {4, 8, 16}
    best = min(trials, key=lambda t: abs(t["hparams"]["x"] - 0.3))
    assert best["steps_completed"] == 16
    resumed = 0
    for t in trials:
        logs = master.logs(t["id"])
        # Promoted at once, a trial trains on in the same process; promoted later, it comes
        # back from its rung's checkpoint. Either way no batch is trained twice.
        per_process = [int(line.split()[1]) for line in logs if line.startswith("trained ")]
        assert sum(per_process) == t["steps_completed"], logs
        resumed += sum(1 for line in logs if line.startswith("resumed at "))
    assert resumed >= 1, "no waiting trial was promoted and resumed"


def test_a_search_survives_a_master_crash(master: MasterProcess) -> None:
    config = search_config({**ASHA, "stop_once": False}, 16, sleep=0.05)
    eid = master.create_ok(config, context=CURVES)
    master.wait(lambda: len([t for t in master.trials(eid) if t["state"] in TERMINAL]) >= 1
                or master.get(f"/experiments/{eid}/searcher")["searcher"]["waiting_trials"],
                timeout=120)
    master.stop(signal.SIGKILL)
    time.sleep(1.0)
    master.start()
    exp = master.wait_state(eid, timeout=300)
    trials = master.trials(eid)
    assert exp["state"] == "COMPLETED"
    assert len(trials) == 8, "a trial was lost or created twice"
    assert len({t["hparams"]["x"] for t in trials}) == 8
    assert all(t["state"] == "COMPLETED" for t in trials)
    best = min(trials, key=lambda t: abs(t["hparams"]["x"] - 0.3))
    assert best["steps_completed"] == 16


def test_trials_warm_start_from_a_source_trial(master: MasterProcess) -> None:
    source = search_config({"name": "single"}, 6)
    source["hyperparameters"]["x"] = 0.3
    first = master.create_ok(source, context=CURVES)
    assert master.wait_state(first)["state"] == "COMPLETED"
    [trained] = master.trials(first)

    config = search_config({"name": "random", "max_trials": 2, "source_trial_id": trained["id"]},
                           10)
    exp, trials, _ = run(master, config)
    assert exp["state"] == "COMPLETED"
    for t in trials:
        logs = master.logs(t["id"])
        assert "resumed at 6" in logs  # every trial starts from the source's checkpoint
        assert logs[-1] == "trained 4 batches in this process, 10 in all"

    missing = search_config({"name": "single", "source_trial_id": 999}, 6)
    r = master.create(missing, context=CURVES)
    assert r.status_code == 400
    assert r.json()["details"] == [{"path": "searcher.source_trial_id",
                                    "message": "trial 999 does not exist"}]


def test_continue_trains_a_finished_trial_on_and_fork_starts_anew(
        master: MasterProcess, tmp_path: Path) -> None:
    """`det-hub experiment continue` resumes the trial in place from its checkpoint and trains
    only the extra length; `create --fork` makes a new experiment from the old one's config
    and context."""
    config = search_config({"name": "single"}, 10)
    config["hyperparameters"]["x"] = 0.5
    eid = master.create_ok(config, context=CURVES)
    assert master.wait_state(eid)["state"] == "COMPLETED"
    [trial] = master.trials(eid)
    assert trial["steps_completed"] == 10

    done = master.cli("experiment", "continue", str(eid),
                      "--config", "searcher.max_length.batches=25", "-f")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"Continued experiment {eid}: (QUEUED|STARTING|RUNNING)", done.stdout)
    assert "resumed at 10" in done.stdout
    assert "trained 15 batches in this process, 25 in all" in done.stdout
    assert done.stdout.rstrip().endswith(f"Experiment {eid} ended: COMPLETED")
    [again] = master.trials(eid)
    assert again["id"] == trial["id"] and again["steps_completed"] == 25
    exp = master.experiment(eid)
    assert exp["config"]["searcher"]["max_length"] == {"batches": 25}
    validations = master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]
    assert [m["steps_completed"] for m in validations] == [10, 25]

    refused = master.cli("experiment", "continue", str(eid), "--config", "searcher.name=grid")
    assert refused.returncode == 1 and "searcher.name" in refused.stderr

    forked = master.cli("experiment", "create", "--fork", str(eid), "--config",
                        "searcher.max_length.batches=4", "--name", "forked", "-f")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert f"(a fork of experiment {eid})" in forked.stdout
    child = max(e["id"] for e in master.get("/experiments")["experiments"])
    assert master.experiment(child)["forked_from"] == eid
    [child_trial] = master.trials(child)
    assert child_trial["steps_completed"] == 4 and child_trial["hparams"]["x"] == 0.5
    assert not any("resumed" in line for line in master.logs(child_trial["id"]))


def test_a_failed_trial_restarts_without_duplicating_metrics(master: MasterProcess) -> None:
    """Metrics a trial reported after its latest checkpoint are reported again when it
    restarts from that checkpoint; the master keeps one copy of each."""
    config = search_config({"name": "single"}, 8, crash_at=6, validate_every=1,
                           checkpoint_every=4)
    config["max_restarts"] = 1
    eid = master.create_ok(config, context=CURVES)
    assert master.wait_state(eid)["state"] == "COMPLETED"
    [trial] = master.trials(eid)
    assert trial["restarts"] == 1
    steps = [m["steps_completed"] for m in
             master.get(f"/trials/{trial['id']}/metrics?group=validation")["metrics"]]
    assert steps == sorted(set(steps)) and steps[-1] == 8


def test_asha_with_the_tpe_sampler_runs_through_the_master(master: MasterProcess) -> None:
    """sampler: tpe on the master: each rung result reaches optuna's TPE, whose state is
    stored with the search, and the search completes."""
    searcher = {**ASHA, "sampler": "tpe", "max_trials": 6}
    exp, trials, _ = run(master, search_config(searcher, 8))
    assert exp["state"] == "COMPLETED" and len(trials) == 6
    state = master.get(f"/experiments/{exp['id']}/searcher_state")["searcher"]
    history = state["method"]["sampler"]["history"]
    reported = sum(1 for t in trials for m in master.get(
        f"/trials/{t['id']}/metrics?group=validation")["metrics"])
    assert 6 <= len(history) <= reported  # every trial's first rung at least, each result once
    xs = sorted(round(t["hparams"]["x"], 12) for t in trials)
    first_rung = min(length for _, length, _ in history)
    assert sorted(round(params["x"], 12) for params, length, _ in history
                  if length == first_rung) == xs  # the first rung heard from every trial
