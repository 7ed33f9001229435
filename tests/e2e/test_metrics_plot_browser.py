"""MetricsPlot in JupyterLab, in a real browser (Debian's Chromium), against a real master:
a notebook cell makes a chart of a finished search, which shows every stored point within 2 s
of the cell running; once the notebook is saved and opened again (the page loaded anew, on the
same kernel), every chart is drawn again and the page's console holds no widget error (no
``[anywidget] Failed to initialize model.``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from det_hub.testing import MasterProcess

from .conftest import BROWSER_DIR, REPO, browser_node, jupyterlab

pytestmark = pytest.mark.slow

NOTEBOOK = "metrics_plot.ipynb"


def _search(master: MasterProcess) -> int:
    """A finished random search of three trials of the steps script, a row every 2 batches."""
    eid = master.create_ok({
        "name": "chart", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 2,
                            "x": {"type": "int", "minval": 1, "maxval": 1000}},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 3,
                     "max_length": {"batches": 80}},
        "max_restarts": 0})
    assert master.wait_state(eid, timeout=180)["state"] == "COMPLETED"
    return eid


def _stored(master: MasterProcess, trial_ids: list[int], metric: str) -> dict[str, list[int]]:
    """``{"trial N group": steps}`` of the rows holding ``metric``, as the master stores them."""
    traces: dict[str, list[int]] = {}
    for tid in trial_ids:
        for row in master.get(f"/trials/{tid}/metrics")["metrics"]:
            if metric in row["metrics"]:
                traces.setdefault(f"trial {tid} {row['group']}", []).append(
                    row["steps_completed"])
    return traces


@pytest.fixture
def lab(module_master: MasterProcess, tmp_path: Path) -> Iterator[tuple[str, dict[int, Any]]]:
    """A JupyterLab server serving a notebook of charts of a finished search; its URL with
    the token, and what each chart cell must show."""
    eid = _search(module_master)
    trials = sorted(t["id"] for t in module_master.trials(eid))
    work = tmp_path / "work"
    work.mkdir()
    cells = [
        "from det_hub.widgets import CompareTrials, MetricsPlot",
        f'plot = MetricsPlot({eid}, metric="loss")\nplot',
        f'validation = MetricsPlot({trials}, metric="validation_loss")\nvalidation',
        f"CompareTrials({eid})",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, work / NOTEBOOK)
    expected = {1: _stored(module_master, trials, "loss"),
                2: _stored(module_master, trials, "validation_loss")}
    assert [len(s) for s in expected[1].values()] == [40, 40, 40], expected[1]
    assert list(expected[2].values()) == [[80]] * 3, expected[2]
    token = "det-hub-metrics-plot-test"
    with jupyterlab(module_master, tmp_path, work, token) as url:
        yield f"{url}/?token={token}", expected


def test_metrics_plot_draws_stored_points_at_once_and_reopens_cleanly(
        lab: tuple[str, dict[int, Any]], tmp_path: Path) -> None:
    url, expected = lab
    node = browser_node()
    shots = tmp_path / "screenshots"
    expected_path = tmp_path / "expected.json"
    expected_path.write_text(json.dumps(expected))
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "metrics_plot.mjs"), url, NOTEBOOK, str(expected_path),
             str(shots)], capture_output=True, text=True, timeout=300, cwd=BROWSER_DIR)
    finally:
        if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "metrics-plot",
                            dirs_exist_ok=True)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("drawn.png", "all.png", "reopened.png"):
        shot = shots / name
        assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = json.loads((shots / "report.json").read_text())
    assert report["first_chart_ms"] <= 2000, report["first_chart_ms"]
    assert report["errors"] == []
    # A chart of single points (each trial's one validation, at batch 80) is centred on them.
    single = report["single_point"]
    [(x, y)] = {tuple(p) for p in single["points"]}
    assert single["x"] == pytest.approx([x - 8, x + 8])
    assert single["y"] == pytest.approx([y * 0.9, y * 1.1])
    # The widgets of the reopened page were restored from the kernel, not run again.
    saved = nbformat.read(tmp_path / "work" / NOTEBOOK, as_version=4)
    assert [c.execution_count for c in saved.cells] == [1, 2, 3, 4]
