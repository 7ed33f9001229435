"""The det_hub panel of JupyterLab (labextension/) in a real browser (Debian's Chromium),
against a real master: it lists a running experiment, creates one from a config through the
file browser's context menu, shows it going from RUNNING to COMPLETED without a reload (through
the master's experiment stream, never asking for the list again), draws its metric chart point
for point as the master stores it, shows its log, downloads its checkpoint, inserts the code
that loads it into a notebook and registers it in the model registry, shows who holds the
cluster's slots, pauses and activates the running experiment and then kills it through the
confirmation dialogs, shows an ASHA search's rung table, and holds no stream and asks the master
nothing while it is collapsed. A search's view sorts its trials table by the searcher metric,
filters it, and draws only the ticked trials on its chart, each in its row's colour; two
experiments ticked in the list are compared, best trial by best trial.

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
from typing import Any

import pytest
import requests
import yaml

from det_hub.testing import MasterProcess

from .conftest import BROWSER_DIR, REPO, STEPS, browser_node, jupyterlab, steps_config

pytestmark = pytest.mark.slow

PREBUILT = REPO / "labextension" / "prebuilt"
#: Where the config to launch lies in the server's root, beside the training script.
CURVES = Path(__file__).parent / "contexts" / "curves"
FOLDER = "launch-me"
CONFIG = "steps.yaml"
NOTEBOOK = "scratch.ipynb"
LAUNCHED = "launched-from-lab"
#: Batches of the launched experiment, one report every 2, 0.1 s each: about 6 s of training,
#: so that its chart is seen to grow.
LENGTH = 60
#: The model the panel registers the launched experiment's checkpoint under.
MODEL = "lab-registered"


def asha_config() -> dict[str, Any]:
    """A short adaptive_asha search of the steps script: 3 trials of at most 8 batches, rungs
    at 4 and 8, for the rung table."""
    return {
        "name": "asha-in-lab", "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 2,
                            "lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss",
                     "max_length": {"batches": 8}, "max_trials": 3, "divisor": 2,
                     "max_rungs": 2, "max_concurrent_trials": 2},
        "max_restarts": 0,
    }


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


def curves_search(name: str, trials: int, seed: int) -> dict[str, Any]:
    """A random search of the curves script (its validation_loss depends on x): ``trials``
    trials of 6 batches, each validating every 2, over x and a log-scaled lr."""
    return {
        "name": name, "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                            "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                            "sleep": 0.0, "validate_every": 2},
        "searcher": {"name": "random", "metric": "validation_loss", "max_trials": trials,
                     "max_length": {"batches": 6}, "max_concurrent_trials": 2},
        "reproducibility": {"experiment_seed": seed}, "max_restarts": 0,
    }


def _rgb(colour: str) -> str:
    """A ``#rrggbb`` colour as the browser computes it: ``rgb(r, g, b)``."""
    return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5)))


def test_the_trials_table_sorts_filters_draws_the_ticked_and_compares(
        module_master: MasterProcess, lab: str, tmp_path: Path) -> None:
    node = browser_node()
    search = module_master.create_ok(curves_search("trials-in-lab", 4, 7), context=CURVES)
    other = module_master.create_ok(curves_search("compared-in-lab", 2, 11), context=CURVES)
    for eid in (search, other):
        assert module_master.wait_state(eid, timeout=180)["state"] == "COMPLETED"
    shots = tmp_path / "screenshots"
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "labextension_trials.mjs"), lab, str(search), str(other),
             str(shots)],
            capture_output=True, text=True, timeout=240, cwd=BROWSER_DIR)
    finally:
        if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "labextension-trials",
                            dirs_exist_ok=True)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("trials.png", "trials-chart.png", "compare.png"):
        shot = shots / name
        assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = json.loads((shots / "report.json").read_text())

    trials = module_master.trials(search)
    assert len(trials) == 4
    ids = sorted(t["id"] for t in trials)
    # A column per hyperparameter that differs; the table opens in the master's order.
    assert report["columns"] == ["hparam:lr", "hparam:x"]
    assert report["first_order"] == ids
    # Sorted by the searcher metric, as the master has it, up and down.
    by_metric = [t["id"] for t in sorted(trials, key=lambda t: t["searcher_metric_value"])]
    assert len({t["searcher_metric_value"] for t in trials}) == 4
    assert (report["sorted_up"], report["sort_up_mark"]) == (by_metric, "ascending")
    assert (report["sorted_down"], report["sort_down_mark"]) == (by_metric[::-1], "descending")
    # Filtered by state and by a trial's id (sorted by the metric again, lowest first).
    assert report["state_options"] == ["", "COMPLETED"]
    assert report["completed_rows"] == by_metric
    assert report["query_rows"] == [by_metric[0]]
    assert report["query_count"].startswith("listing 1 of 4 trials")
    assert report["all_rows"] == by_metric
    # Every trial drawn at first; the two best alone once ticked, each in its row's colour,
    # and every trial again once unticked. The curves script validates every 2 of 6 batches.
    def names(drawn: dict[str, Any]) -> list[str]:
        return [t["name"] for t in drawn["traces"]]
    assert names(report["drawn_before"]) == [f"trial {i} validation" for i in ids]
    best_two = sorted(by_metric[:2])
    drawn = report["drawn_ticked"]
    assert names(drawn) == [f"trial {i} validation" for i in best_two]
    assert [t["points"] for t in drawn["traces"]] == [3, 3]
    assert [t["colour"] for t in drawn["traces"]] == [report["swatches"][str(i)]
                                                       for i in best_two]
    assert len({t["colour"] for t in drawn["traces"]}) == 2
    # A trial's colour is its place among the experiment's trials by id, ticked or not.
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    assert report["swatches"] == {str(i): _rgb(palette[n]) for n, i in enumerate(ids)}
    assert {t["name"]: t["colour"] for t in report["drawn_before"]["traces"]} == {
        f"trial {i} validation": _rgb(palette[n]) for n, i in enumerate(ids)}
    assert report["ticked_note"].endswith("the chart draws the 2 ticked")
    assert names(report["drawn_after"]) == names(report["drawn_before"])

    # The comparison: each experiment's best trial, as the master ranks them, on one chart.
    assert report["compare_enabled_with_one"] is False
    assert "jp-mod-expanded" not in report["expanded_by_tick"]
    best = {eid: min(module_master.trials(eid), key=lambda t: t["searcher_metric_value"])["id"]
            for eid in (search, other)}
    pair = sorted((search, other))
    assert report["compare_error"] == 0
    assert [(r["experiment"], r["trial"], r["colour"]) for r in report["compared"]] == [
        (eid, best[eid], _rgb(palette[n])) for n, eid in enumerate(pair)]
    assert "x" in report["compare_columns"] and "Best" in report["compare_columns"]
    assert {t["name"]: t["colour"] for t in report["compare_drawn"]["traces"]} == {
        f"experiment {eid} trial {best[eid]} validation": _rgb(palette[n])
        for n, eid in enumerate(pair)}
    assert report["compare_tab"] == f"Compare {pair[0]}, {pair[1]}"


def test_the_panel_lists_launches_charts_and_kills(module_master: MasterProcess, lab: str,
                                                   tmp_path: Path) -> None:
    node = browser_node()
    # Runs until it is killed from the panel.
    running = module_master.create_ok(steps_config("runs-until-killed", length=100000,
                                                   sleep=0.05))
    module_master.wait(lambda: module_master.trials(running), timeout=30)
    # Activated by the script once the launched experiment has left a slot free.
    asha = module_master.create_ok(asha_config(), activate=False)
    shots = tmp_path / "screenshots"
    env = {**os.environ, "DET_HUB_TEST_MASTER": module_master.url,
           "DET_HUB_TEST_TOKEN": module_master.token}
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "labextension.mjs"), lab, str(running), str(asha), FOLDER,
             CONFIG, NOTEBOOK, MODEL, str(shots)],
            capture_output=True, text=True, timeout=300, cwd=BROWSER_DIR, env=env)
    finally:
        if os.environ.get("DET_HUB_ARTIFACTS") and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "labextension", dirs_exist_ok=True)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("sidebar.png", "context-menu.png", "launched.png", "experiment.png",
                 "experiment-completed.png", "inserted-code.png", "register-dialog.png",
                 "registered.png", "cluster.png", "pause-dialog.png", "paused.png", "rungs.png",
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
    # Its row went from active (queued, starting or running) to COMPLETED while the panel was
    # open.
    states = report["states_seen"][str(created["id"])]
    assert states[0] in ("QUEUED", "STARTING", "RUNNING", "STOPPING_COMPLETED"), states
    assert states[-1] == "COMPLETED", states

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

    # The checkpoint was registered as version 1 of a new model, named in the dialog (which
    # suggested the experiment's name).
    assert report["register_suggested"] == LAUNCHED
    assert MODEL in report["register_hint"] and "new model" in report["register_hint"]
    versions = module_master.get(f"/models/{MODEL}/versions")["model_versions"]
    assert [(v["version"], v["checkpoint_uuid"]) for v in versions] == [
        (1, checkpoint["uuid"])]
    assert (report["registered_version"], report["registered_text"]) == (1, f"{MODEL} v1")

    # The cluster tab showed who holds the slot, and the queue.
    assert f"exp-{running}" in report["slot_text"] and "admin" in report["slot_text"]
    assert "runs-until-killed" in report["queued_job"]

    # Paused, then activated through the dialogs: the master had each state, the list showed it.
    assert report["rest_states"] == [["pause", "PAUSED"], ["activate", "RUNNING"]]
    assert f"experiment {running}" in report["pause_dialog"].lower()
    assert f"experiment {running}" in report["activate_dialog"].lower()
    states = report["states_seen"][str(running)]
    assert states[0] in ("QUEUED", "STARTING", "RUNNING"), states
    assert "RUNNING" in states[states.index("PAUSED"):], states

    # The ASHA search's view showed the master's rung table, row for row.
    assert module_master.experiment(asha)["state"] == "COMPLETED"
    table = module_master.get(f"/experiments/{asha}/searcher")["searcher"]["rungs"]
    expected = [
        {"bracket": b["index"], "rung": r["index"],
         "figures": [str(r["length"]), str(r["reported"]), str(r["promoted"])]}
        for b in table["brackets"] for r in b["rungs"]]
    multi = len(table["brackets"]) > 1
    shown = [{"bracket": row["bracket"], "rung": row["rung"],
              "figures": row["cells"][1 + multi:4 + multi]} for row in report["rungs"]]
    assert shown == expected
    assert sum(int(f[1]) for f in (row["figures"] for row in shown)) >= 3, shown
    assert report["rung_headers"][multi:multi + 4] == ["Rung", "Length", "Reported", "Promoted"]
    # Its search view is the master's: a line per trial with a metric and a chart for the one
    # hyperparameter that varies. The steps script's loss does not depend on lr, so every
    # trial validates alike: importance has nothing to share out, and the panel says why.
    view = module_master.get(f"/experiments/{asha}/search-view")["search"]
    assert module_master.get(f"/experiments/{asha}/hyperparameter-importance")[
        "importance"] == []
    assert report["search"] == {
        "lines": len(view["parallel"]["customdata"]), "scatters": ["lr"], "importance": [],
        "note": "Importance needs trials whose validation_loss differs and whose "
                "hyperparameters differ."}
    assert report["search"]["lines"] == 3

    # The kill confirmed in the dialog reached the master; the panel showed its end.
    assert module_master.experiment(running)["state"] == "CANCELED"
    assert report["states_seen"][str(running)][-1] == "CANCELED"
    assert f"experiment {running}" in report["kill_dialog"].lower()

    # The palette's command offered the config open in the editor (and was cancelled).
    assert report["palette_enabled"] is True
    assert f"{FOLDER}/{CONFIG}" in report["palette_dialog"]
    assert [e["name"] for e in module_master.get("/experiments?limit=1000")["experiments"]
            ].count(LAUNCHED) == 1

    # The list followed the master's stream while shown, and never asked for the list again;
    # collapsed, it held no stream and asked nothing, and shown again it followed at once.
    assert report["list_requests"] == []
    assert report["stream_requests"], report
    assert report["streams_open_when_hidden"] == 0
    assert report["requests_while_hidden"] == 0, report["stream_requests"]
    assert report["streams_open_when_shown"] == 1
