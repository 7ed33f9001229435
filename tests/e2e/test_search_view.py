"""An experiment's page shows its search: parallel coordinates over its hyperparameters and
searcher metric, each hyperparameter against the metric (on a log axis where its space is
log), and a trials table sorted by a click on a heading. In a real browser, through the hub."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from det_hub.hub.up import find_proxy
from det_hub.testing import HubProcess, pack, reap_tasks

from .conftest import BROWSER_DIR, REPO, browser_node

pytestmark = pytest.mark.slow

CURVES = Path(__file__).parent / "contexts" / "curves"


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
            "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 4,
                         "max_length": {"batches": 10}, "max_concurrent_trials": 2},
            "reproducibility": {"experiment_seed": 7}, "max_restarts": 0}
        made = hub.call("POST", "/experiments", admin, json={
            "config": yaml.safe_dump(config), "context": pack(CURVES)})
        assert made.status_code == 201, made.text
        eid = made.json()["experiment"]["id"]

        def state() -> str:
            answer = hub.call("GET", f"/experiments/{eid}", admin)
            return str(answer.json()["experiment"]["state"])

        hub.wait(lambda: state() == "COMPLETED", 180)
        trials = hub.call("GET", f"/experiments/{eid}/trials", admin).json()["trials"]
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
    assert report["parallel"] == {"type": "parcoords", "lines": 4,
                                  "labels": ["lr", "x", "validation_loss"]}
    assert report["scatters"] == [{"name": "lr", "xaxis": "log", "points": 4},
                                  {"name": "x", "xaxis": "linear", "points": 4}]
    by_metric = [t["id"] for t in sorted(trials, key=lambda t: t["searcher_metric_value"])]
    assert report["sorted_up"] == by_metric
    assert report["sorted_down"] == by_metric[::-1]
