"""examples/quickstart.ipynb run in JupyterLab by a real browser (Debian's Chromium), against
a real master: the search is submitted from a cell, the MetricsPlot chart drawn by the widget
frontend grows while the trials report, and at the end it holds every trial's training and
validation curve, point for point as the master stores them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_hub.testing import MasterProcess

from .conftest import BROWSER_DIR, REPO, browser_node, jupyterlab

pytestmark = pytest.mark.slow

NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
#: Batches per trial in the test's copy: with the example's 60 the trials can all end before
#: the chart is first drawn, which then never grows in sight.
MAX_LENGTH = 600
#: Seconds each batch of the test's copy sleeps: about 6 s of training per trial.
BATCH_SECONDS = 0.01


def _copy_notebook(work: Path) -> Path:
    """The example in ``work``, its trials training longer and slower (a few seconds each),
    so that the chart is seen to grow."""
    notebook = json.loads(NOTEBOOK.read_text())
    [cell] = [c for c in notebook["cells"] if "".join(c["source"]).startswith("%%det_experiment")]
    source = "".join(cell["source"])
    assert "--max-length 60 " in source, source.splitlines()[0]
    source = source.replace("--max-length 60 ", f"--max-length {MAX_LENGTH} ", 1)
    step = "    def train_batch(self, batch, epoch_idx, batch_idx):\n"
    assert step in source
    cell["source"] = source.replace(step, step + f"        time.sleep({BATCH_SECONDS})\n", 1) \
        .replace("import torch\n", "import time\n\nimport torch\n", 1)
    copy = work / NOTEBOOK.name
    copy.write_text(json.dumps(notebook, indent=1))
    return copy


@pytest.fixture
def lab(module_master: MasterProcess, tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 serving ``tmp_path/work``, whose kernels reach the
    master; its URL with the token."""
    work = tmp_path / "work"
    work.mkdir()
    _copy_notebook(work)
    token = "det-hub-browser-test"
    with jupyterlab(module_master, tmp_path, work, token) as url:
        yield f"{url}/?token={token}"


def test_the_quickstart_notebook_runs_in_jupyterlab_in_a_browser(
        module_master: MasterProcess, lab: str, tmp_path: Path) -> None:
    node = browser_node()
    shots = tmp_path / "screenshots"
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "quickstart_notebook.mjs"), lab, NOTEBOOK.name,
             str(shots)], capture_output=True, text=True, timeout=240, cwd=BROWSER_DIR)
    finally:
        if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "quickstart-notebook",
                            dirs_exist_ok=True)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("notebook.png", "finished.png"):
        shot = shots / name
        assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = json.loads((shots / "report.json").read_text())

    [experiment] = [e for e in module_master.get("/experiments?limit=1000")["experiments"]
                    if e["name"] == "quickstart"]
    assert experiment["state"] == "COMPLETED"
    trials = module_master.trials(experiment["id"])
    assert len(trials) == 3
    # Seen in the browser while the search ran: the chart's points grew as trials reported.
    samples = report["chart_samples"]
    assert samples == sorted(samples) and samples[0] < samples[-1], samples
    # The chart holds each trial's training and validation curves, as the master stores them.
    expected = {}
    for trial in trials:
        rows = module_master.get(f"/trials/{trial['id']}/metrics")["metrics"]
        for group in ("training", "validation"):
            steps = [r["steps_completed"] for r in rows
                     if r["group"] == group and "loss" in r["metrics"]]
            assert steps, (trial["id"], group)
            expected[f"trial {trial['id']} {group}"] = steps
    drawn = {t["name"]: t["x"] for t in report["traces"]}
    assert drawn == expected
    assert max(drawn[f"trial {t['id']} training"][-1] for t in trials) == MAX_LENGTH
    # The last cell loaded the best trial's model and predicted with it.
    assert "says 1 + 2 + 3 + 4 = " in report["last_output"], report["last_output"]
    assert float(report["last_output"].rsplit("= ", 1)[1]) == pytest.approx(10.0, abs=2.0)
