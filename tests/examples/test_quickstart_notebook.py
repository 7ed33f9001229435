"""examples/quickstart.ipynb runs top to bottom against a real master, as a user runs it:
a search submitted from a cell, live charts, a monitor, and the best model loaded back to
predict."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from det_hub.testing import MasterProcess

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb"

pytestmark = pytest.mark.slow


def test_the_quickstart_notebook_runs(module_master: MasterProcess, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    monkeypatch.setenv("DET_HUB_MASTER", module_master.url)
    monkeypatch.setenv("DET_HUB_TOKEN", module_master.token)
    notebook = nbformat.read(work / NOTEBOOK.name, as_version=4)
    # The kernel inherits this process's environment, with the master's URL and token.
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()

    outputs = ["".join(o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
                       for o in cell.get("outputs", [])) for cell in notebook.cells
               if cell.cell_type == "code"]
    assert "says 1 + 2 + 3 + 4 = " in outputs[-1], outputs[-1]
    prediction = float(outputs[-1].rsplit("= ", 1)[1])
    assert prediction == pytest.approx(10.0, abs=2.0)
    # Every trial's training and validation curves reached the chart, as curves: a training
    # point every 5 batches of 60, a validation every 20.
    assert outputs[6].count("training") == 3 and outputs[6].count("validation") == 3, outputs[6]
    points = ast.literal_eval(outputs[6])
    assert {name.rsplit(" ", 1)[1]: n for name, n in points.items()} == \
        {"training": 12, "validation": 3}, points
    # The comparison holds a metric for each of the three learning rates.
    assert outputs[-2].count("(") == 3 and "None" not in outputs[-2], outputs[-2]
    [experiment] = module_master.get("/experiments")["experiments"]
    assert (experiment["name"], experiment["state"]) == ("quickstart", "COMPLETED")
