"""The det_hub panel of JupyterLab (labextension/) in a real browser (Debian's Chromium),
against a real master: it lists a running experiment, creates one from a config through the
file browser's context menu, shows it going from ACTIVE to COMPLETED without a reload, draws
its metric chart point for point as the master stores it, shows its log, downloads its
checkpoint and inserts the code that loads it into a notebook, shows who holds the cluster's
slots, kills the running experiment through its confirmation dialog, and asks the master
nothing while it is collapsed.

JupyterLab finds the panel built in ``labextension/prebuilt`` (``make labextension``) through
``JUPYTER_PATH``, ahead of any copy installed in the environment.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from det_hub.testing import MasterProcess

from .conftest import BROWSER_DIR, REPO, STEPS, browser_node, jupyterlab, steps_config

pytestmark = pytest.mark.slow

PREBUILT = REPO / "labextension" / "prebuilt"
#: Where the config to launch lies in the server's root, beside the training script.
FOLDER = "launch-me"
CONFIG = "steps.yaml"
NOTEBOOK = "scratch.ipynb"
LAUNCHED = "launched-from-lab"
#: Batches of the launched experiment, one report every 2, 0.1 s each: about 6 s of training,
#: so that its chart is seen to grow.
LENGTH = 60


@pytest.fixture
def lab(module_master: MasterProcess, tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on 127.0.0.1 with the det_hub server extension and the panel built in
    labextension/prebuilt, serving ``tmp_path/work`` (the config to launch, in ``FOLDER``);
    its URL with the token."""
    if not (PREBUILT / "package.json").is_file():
        pytest.fail(f"the panel is not built in {PREBUILT}: make labextension builds it")
    work = tmp_path / "work"
    shutil.copytree(STEPS, work / FOLDER)
    (work / FOLDER / CONFIG).write_text(yaml.safe_dump(
        steps_config(LAUNCHED, length=LENGTH, sleep=0.1, report_every=2)))
    (work / NOTEBOOK).write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": "first", "metadata": {},
                   "outputs": [], "source": "print('mine')"}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}))
    data = tmp_path / "jupyter-data"
    (data / "labextensions").mkdir(parents=True)
    (data / "labextensions" / "det-hub-labextension").symlink_to(PREBUILT)
    token = "det-hub-panel-test"
    with jupyterlab(module_master, tmp_path, work, token,
                    args=['--ServerApp.jpserver_extensions={"det_hub.extension": True}'],
                    env={"JUPYTER_PATH": str(data)}) as url:
        # The panel is the one just built, not some copy installed earlier.
        extensions = requests.get(f"{url}/lab/api/extensions", params={"token": token},
                                  timeout=10).json()
        [panel] = [e for e in extensions if e["name"] == "det-hub-labextension"]
        assert panel["enabled"] and panel["installed"], panel
        yield f"{url}/?token={token}"


def test_the_panel_lists_launches_charts_and_kills(module_master: MasterProcess, lab: str,
                                                   tmp_path: Path) -> None:
    node = browser_node()
    # Runs until it is killed from the panel.
    running = module_master.create_ok(steps_config("runs-until-killed", length=100000,
                                                   sleep=0.05))
    module_master.wait(lambda: module_master.trials(running), timeout=30)
    shots = tmp_path / "screenshots"
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "labextension.mjs"), lab, str(running), FOLDER, CONFIG,
             NOTEBOOK, str(shots)], capture_output=True, text=True, timeout=300, cwd=BROWSER_DIR)
    finally:
        if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "labextension", dirs_exist_ok=True)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("sidebar.png", "context-menu.png", "launched.png", "experiment.png",
                 "experiment-completed.png", "inserted-code.png", "cluster.png",
                 "kill-dialog.png", "killed.png"):
        shot = shots / name
        assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = json.loads((shots / "report.json").read_text())

    # The launch made an experiment of the config in the file browser, with its folder as the
    # context, and it ran to the end.
    created = module_master.experiment(report["created_id"])
    assert created["name"] == LAUNCHED
    assert created["state"] == "COMPLETED"
    assert f"{FOLDER}/{CONFIG}" in report["launch_dialog"]
    archive = module_master.api("GET", f"/experiments/{created['id']}/context")
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == [CONFIG, "train.py"]
    # Its row went from ACTIVE to COMPLETED while the panel was open.
    states = report["states_seen"][str(created["id"])]
    assert states[0] in ("ACTIVE", "STOPPING_COMPLETED") and states[-1] == "COMPLETED", states

    # The chart grew while the trial trained, and holds the training loss point for point as
    # the master stores it.
    samples = report["chart_samples"]
    assert samples == sorted(samples) and samples[0] < samples[-1], samples
    assert report["metric"] == "loss"
    [trial] = module_master.trials(created["id"])
    rows = module_master.get(f"/trials/{trial['id']}/metrics")["metrics"]
    steps = [r["steps_completed"] for r in rows if r["group"] == "training"]
    assert steps[-1] == LENGTH
    assert {t["name"]: t["x"] for t in report["traces"]} == {
        f"trial {trial['id']} training": steps}

    # The view showed the trial's log to its end.
    assert report["log_lines"][-1] == "done"
    assert report["log_lines"] == module_master.logs(trial["id"])

    # The checkpoint's link downloads its files; the inserted code loads it, in a new cell
    # below the notebook's own.
    [checkpoint] = module_master.get(f"/experiments/{created['id']}/checkpoints")["checkpoints"]
    assert report["checkpoint_uuid"] == checkpoint["uuid"]
    download = report["download"]
    assert (download["status"], download["type"]) == (200, "application/gzip")
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(download["base64"])),
                      mode="r:gz") as tar:
        state = tar.extractfile(f"{checkpoint['uuid']}/state.json")
        assert state is not None and json.load(state) == {"step": LENGTH}
    assert report["notebook_cells"] == [
        {"type": "code", "source": "print('mine')"},
        {"type": "code",
         "source": f'import det_hub\n\nmodel = det_hub.load_checkpoint("{checkpoint["uuid"]}")'}]

    # The cluster tab showed who holds the slot, and the queue.
    assert f"exp-{running}" in report["slot_text"] and "admin" in report["slot_text"]
    assert "runs-until-killed" in report["queued_job"]

    # The kill confirmed in the dialog reached the master; the panel showed its end.
    assert module_master.experiment(running)["state"] == "CANCELED"
    assert report["states_seen"][str(running)][-1] == "CANCELED"
    assert f"experiment {running}" in report["kill_dialog"].lower()

    # The palette's command offered the config open in the editor (and was cancelled).
    assert report["palette_enabled"] is True
    assert f"{FOLDER}/{CONFIG}" in report["palette_dialog"]
    assert [e["name"] for e in module_master.get("/experiments?limit=1000")["experiments"]
            ].count(LAUNCHED) == 1

    # Polled while shown, silent while collapsed.
    assert len(report["list_requests"]) >= 3
    assert report["requests_while_hidden"] == 0, report["list_requests"]
