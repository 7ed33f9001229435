"""An experiment's page shows its search: parallel coordinates over its hyperparameters and
searcher metric, each hyperparameter against the metric (on a log axis where its space is
log), hyperparameter importance, the ASHA rung table, and a trials table with a column per
hyperparameter, sorted by a click on a heading, filtered by what is picked on the parallel
coordinates, whose ticked trials are the ones the charts draw. In a real browser, through the
hub."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from det_hub.hub.up import find_proxy
from det_hub.service import wire
from det_hub.testing import HubProcess, pack, reap_tasks

from .conftest import BROWSER_DIR, REPO, browser_node

pytestmark = pytest.mark.slow

CURVES = Path(__file__).parent / "contexts" / "curves"
#: The search's trials: each reports at its first rung, so each draws a line.
TRIALS = 16


def test_a_searchs_page_draws_its_hyperparameters_against_its_metric(tmp_path: Path) -> None:
    node = browser_node()
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    hub = HubProcess(tmp_path / "hub")
    shots = tmp_path / "screenshots"
    try:
        admin = hub.token("admin")
        config = {
            "name": "search-view", "entrypoint": "python3 train.py",
            "hyperparameters": {
                "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                "validate_every": 5},
            "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                         "max_trials": TRIALS, "max_length": {"batches": 10}, "max_rungs": 2,
                         "divisor": 2, "mode": "conservative", "max_concurrent_trials": 2},
            "reproducibility": {"experiment_seed": 7}, "max_restarts": 0}
        made = hub.call("POST", "/experiments", admin, json={
            "config": yaml.safe_dump(config), "context": pack(CURVES)})
        assert made.status_code == 201, made.text
        eid = made.json()["experiment"]["id"]

        def state() -> str:
            answer = hub.call("GET", f"/experiments/{eid}", admin)
            return str(answer.json()["experiment"]["state"])

        hub.wait(lambda: state() == "COMPLETED", 300)
        trials = hub.call("GET", f"/experiments/{eid}/trials", admin).json()["trials"]
        searcher = hub.call("GET", f"/experiments/{eid}/searcher", admin).json()["searcher"]
        checkpoints = hub.call("GET", f"/experiments/{eid}/checkpoints", admin).json()[
            "checkpoints"]
        answer = hub.call("GET", f"/experiments/{eid}/hyperparameter-importance", admin)
        assert answer.status_code == 200, answer.text
        importance = answer.json()["importance"]
        assert {i["name"] for i in importance} == {"lr", "x"}
        # What the lab panel draws: the same view, over the REST API.
        answer = hub.call("GET", f"/experiments/{eid}/search-view", admin)
        assert answer.status_code == 200, answer.text
        rest_view = wire.SearchView.model_validate(answer.json()["search"])
        try:
            done = subprocess.run(
                [node, str(BROWSER_DIR / "search_view.mjs"), hub.url, "admin", hub.password,
                 str(eid), str(shots)],
                capture_output=True, text=True, timeout=180, cwd=BROWSER_DIR)
        finally:
            if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
                shutil.copytree(shots, REPO / "test-artifacts" / "search-view",
                                dirs_exist_ok=True)
        assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    finally:
        hub.stop()
        reap_tasks(tmp_path)
    report = json.loads((shots / "report.json").read_text())
    assert [d["label"] for d in rest_view.parallel["dimensions"]] == \
        report["parallel"]["labels"]
    assert [(s.name, len(s.x)) for s in rest_view.scatters] == \
        [(s["name"], s["points"]) for s in report["scatters"]]
    assert report["parallel"] == {"type": "parcoords", "lines": TRIALS,
                                  "labels": ["lr", "x", "validation_loss"]}
    assert report["scatters"] == [{"name": "lr", "xaxis": "log", "points": TRIALS},
                                  {"name": "x", "xaxis": "linear", "points": TRIALS}]
    by_metric = [t["id"] for t in sorted(trials, key=lambda t: t["searcher_metric_value"])]
    assert report["sorted_up"] == by_metric
    assert report["sorted_down"] == by_metric[::-1]
    assert report["columns"] == ["lr", "x"]
    # Importance: optuna's fANOVA over the same trials, as the REST API answers it.
    assert [i["name"] for i in report["importance"]] == [i["name"] for i in importance]
    assert sum(i["percent"] for i in report["importance"]) == pytest.approx(100, abs=0.2)
    # Picked on the parallel coordinates: the trials whose x is in [0, 0.5].
    inside = sorted(t["id"] for t in trials if t["hparams"]["x"] <= 0.5)
    assert report["picked"] == inside
    assert report["picked_note"] == f"Listing {len(inside)} of {TRIALS} trials: those picked " \
        "on the parallel coordinates."
    assert report["unpicked"] == sorted(t["id"] for t in trials)
    assert report["ticked"] == [by_metric[0]]
    assert report["unticked"] == sorted(t["id"] for t in trials)
    # The rung table is the searcher's, trial ids and all.
    rungs = [(rung["index"], rung["length"], rung["trial_ids"])
             for bracket in searcher["rungs"]["brackets"] for rung in bracket["rungs"]]
    assert [(r["rung"], r["length"], r["trials"]) for r in report["rungs"]] == rungs
    assert rungs and rungs[0][2]
    assert report["checkpoints"] == [
        {"uuid": c["uuid"], "register": True,
         "code": f'import det_hub\n\nmodel = det_hub.load_checkpoint("{c["uuid"]}")'}
        for c in checkpoints]
    assert checkpoints
    assert report["trial_page"] == {
        "drawn": [by_metric[0]],
        "checkpoints": [c["uuid"] for c in checkpoints if c["trial_id"] == by_metric[0]]}
