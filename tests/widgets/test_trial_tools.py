"""CompareTrials, CheckpointBrowser and ExperimentLauncher against a real master."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from det_hub.client import Client
from det_hub.testing import MasterProcess
from det_hub.widgets import CheckpointBrowser, CompareTrials, ExperimentLauncher

pytestmark = pytest.mark.slow

CONTEXTS = Path(__file__).resolve().parents[1] / "e2e" / "contexts"

#: A grid over a numeric and a categorical hyperparameter of the curves script, whose
#: validation_loss after 4 batches is (x - 0.3) ** 2 + 1 / 4.
GRID = {
    "name": "grid", "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0, "count": 3},
                        "opt": {"type": "categorical", "vals": ["sgd", "adam"]},
                        "sleep": 0.0},
    "searcher": {"name": "grid", "metric": "validation_loss", "max_length": {"batches": 4}},
    "max_restarts": 0,
}

#: The steps script checkpointing at 2 and 4 batches and, after validating, at 5.
CHECKPOINTED = {
    "name": "checkpointed", "entrypoint": "python3 train.py",
    "hyperparameters": {"sleep": 0.0, "report_every": 1, "checkpoint_every": 2},
    "searcher": {"name": "single", "metric": "validation_loss",
                 "max_length": {"batches": 5}},
    "max_restarts": 0,
}


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture(scope="module")
def finished(master: MasterProcess) -> dict[str, int]:
    """Both experiments, started together and run to the end."""
    ids = {"grid": master.create_ok(GRID, context=CONTEXTS / "curves"),
           "checkpointed": master.create_ok(CHECKPOINTED)}
    for eid in ids.values():
        assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    return ids


@pytest.fixture
def client(master: MasterProcess) -> Iterator[Client]:
    with Client(master.url, master.token) as c:
        yield c


def test_compare_trials_draws_hparams_against_the_best_metric(
        finished: dict[str, int], client: Client) -> None:
    compare = CompareTrials(finished["grid"], client=client)
    assert compare.metric == "validation_loss" and compare.smaller_is_better
    assert len(compare.rows) == 6
    for row in compare.rows:
        assert row["state"] == "COMPLETED"
        assert row["metric"] == pytest.approx((row["hparams"]["x"] - 0.3) ** 2 + 0.25)
    # "sleep" is the same for every trial: no axis for it.
    assert compare.hparam_names == ["opt", "x"]

    [parcoords] = compare.figure.data
    opt, x, metric = parcoords.dimensions
    assert (opt.label, x.label, metric.label) == ("opt", "x", "validation_loss")
    assert list(opt.ticktext) == ["adam", "sgd"] and list(opt.tickvals) == [0, 1]
    hparams = [r["hparams"] for r in compare.rows]
    assert list(opt.values) == [["adam", "sgd"].index(h["opt"]) for h in hparams]
    assert list(x.values) == [h["x"] for h in hparams]
    assert sorted(set(x.values)) == [0.0, 0.5, 1.0]
    assert list(metric.values) == [r["metric"] for r in compare.rows]
    assert list(parcoords.line.color) == list(metric.values)
    assert parcoords.line.reversescale is True  # the best (smallest) gets the bright end

    # The scatter follows the dropdown: categorical values as text, numbers as numbers.
    assert compare.hparam.options == ("opt", "x")
    assert compare.hparam.value == "opt"
    [points] = compare.scatter.data
    assert list(points.x) == [h["opt"] for h in hparams]
    compare.hparam.value = "x"
    [points] = compare.scatter.data
    assert list(points.x) == [h["x"] for h in hparams]
    assert list(points.y) == list(metric.values)
    assert compare.scatter.layout.xaxis.title.text == "x"

    compare.refresh()
    assert compare.hparam.value == "x" and len(compare.figure.data) == 1

    # A metric no trial reported: rows without values, nothing drawn.
    other = CompareTrials(finished["grid"], metric="accuracy", client=client)
    assert len(other.rows) == 6 and all(r["metric"] is None for r in other.rows)
    assert list(other.figure.data[0].dimensions[-1].values) == []


def test_checkpoint_browser_lists_downloads_and_loads(
        finished: dict[str, int], client: Client, tmp_path: Path) -> None:
    browser = CheckpointBrowser(finished["checkpointed"], client=client)
    rows = browser.rows
    assert [r["steps_completed"] for r in rows] == [5, 4, 2]
    assert len({r["trial_id"] for r in rows}) == 1 and all(r["size"] > 0 for r in rows)
    # The default retention (the trial's best and latest) deleted the earlier two.
    assert [r["state"] for r in rows] == ["COMPLETED", "DELETED", "DELETED"]
    # Only the last checkpoint is at a step with a validation.
    assert rows[0]["metrics"] == {"validation_loss": pytest.approx(0.2)}
    assert rows[1]["metrics"] == {} and rows[2]["metrics"] == {}
    assert all(r["uuid"] in browser.table.value for r in rows)
    assert "validation_loss=0.2" in browser.table.value
    assert browser.selected == rows[0]["uuid"]
    assert list(browser.buttons) == ["download", "load", "delete", "register", "refresh"]
    uuid = rows[0]["uuid"]

    browser.directory.value = str(tmp_path / "downloads")
    browser.buttons["download"].click()
    target = tmp_path / "downloads" / uuid
    assert browser.message == f"downloaded {uuid} to {target}"
    assert json.loads((target / "state.json").read_text()) == {"step": 5}

    browser.buttons["load"].click()
    assert isinstance(browser.loaded, Path)
    assert json.loads((browser.loaded / "state.json").read_text()) == {"step": 5}
    assert browser.message == f"loaded {uuid}: {type(browser.loaded).__name__} {browser.loaded}"

    # A deleted checkpoint cannot be used, and says why.
    browser.select.value = rows[1]["uuid"]
    assert browser.buttons["download"].disabled and browser.buttons["load"].disabled
    assert browser.load() is None and browser.loaded is not None
    assert browser.message == (f"load: checkpoint {rows[1]['uuid']} is DELETED, its files are "
                               "not there to use")

    # A download into a path under a regular file fails with the reason.
    browser.select.value = uuid
    assert not browser.buttons["download"].disabled
    (tmp_path / "a-file").write_text("")
    browser.directory.value = str(tmp_path / "a-file")
    assert browser.download() is None
    assert browser.message.startswith("download: ")


def _write(directory: Path, name: str, config: Any) -> None:
    (directory / name).write_text(config if isinstance(config, str) else yaml.safe_dump(config))


def test_experiment_launcher_creates_the_edited_experiment(
        master: MasterProcess, client: Client, tmp_path: Path) -> None:
    config = {
        "name": "from-file", "entrypoint": "python3 train.py",
        "hyperparameters": {
            "sleep": 0.0, "report_every": 2,
            "checkpoint_every": {"type": "categorical", "vals": [1000, 3]},
            "lr": {"type": "double", "minval": 0.1, "maxval": 0.2},
            "layers": {"type": "int", "minval": 1, "maxval": 4},
            "model": {"kind": {"type": "const", "val": "mlp"}, "widths": [8, 4]},
        },
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 6}},
        "max_restarts": 0,
    }
    _write(tmp_path, "steps.yaml", config)
    _write(tmp_path, "notes.txt", "not a config")
    launcher = ExperimentLauncher(client=client, directory=tmp_path)
    assert launcher.config_file.options == ("steps.yaml",)
    assert launcher.name.value == "from-file"
    fields = {f.name: f for f in launcher.fields}
    assert sorted(fields) == ["checkpoint_every", "layers", "lr", "model.kind", "model.widths",
                              "report_every", "sleep"]

    fields["report_every"].inputs["val"].value = 3
    fields["checkpoint_every"].inputs["val"].value = 1  # pin vals[1]
    fields["lr"].inputs["minval"].value = 0.5
    fields["lr"].inputs["maxval"].value = 0.6
    fields["layers"].inputs["minval"].value = 2
    fields["layers"].inputs["maxval"].value = 2
    fields["model.kind"].inputs["val"].value = "cnn"
    fields["model.widths"].inputs["val"].value = "[16, 8]"
    launcher.name.value = "edited"
    launcher.context.value = str(CONTEXTS / "steps")
    launcher.launch_button.click()

    exp = launcher.launched
    assert exp is not None, launcher.message
    assert launcher.message == f"launched experiment {exp.id} (edited)"
    assert master.experiment(exp.id)["name"] == "edited"
    trial = master.wait(lambda: master.trials(exp.id))[0]
    hp = trial["hparams"]
    assert hp["report_every"] == 3 and hp["checkpoint_every"] == 3 and hp["layers"] == 2
    assert 0.5 <= hp["lr"] <= 0.6
    assert hp["model"] == {"kind": "cnn", "widths": [16, 8]}
    assert master.wait_state(exp.id)["state"] == "COMPLETED"
    steps = [c["steps_completed"] for c in
             master.get(f"/experiments/{exp.id}/checkpoints")["checkpoints"]]
    assert sorted(steps) == [3, 6, 6]  # every 3 batches, and once more after validating


def test_experiment_launcher_reports_bad_configs_and_creates_nothing(
        master: MasterProcess, client: Client, tmp_path: Path) -> None:
    _write(tmp_path, "bad.yaml", {"name": "bad", "entrypoint": "python3 train.py",
                                  "hyperparameters": {"lr": {"type": "double", "minval": 1.0,
                                                             "maxval": 2.0}},
                                  "searcher": {"name": "random", "metric": "loss",
                                               "max_length": {"batches": 5}}})
    _write(tmp_path, "broken.yml", "name: [unclosed\n")
    before = master.get("/experiments?limit=1000")["pagination"]["total"]
    launcher = ExperimentLauncher(client=client, directory=tmp_path)
    assert launcher.config_file.options == ("bad.yaml", "broken.yml")

    # Fixing the range in the form leaves the missing max_trials to be reported.
    launcher.fields[0].inputs["maxval"].value = 0.5
    assert launcher.launch() is None and launcher.launched is None
    assert launcher.message.startswith("launch: the config is not valid:")
    assert "hyperparameters.lr.maxval: must be greater than minval (1.0)" in launcher.message
    assert "searcher.max_trials: required by the random searcher" in launcher.message
    assert "searcher.max_trials" in launcher.status.value

    # A context that does not exist: the client refuses before sending anything.
    launcher.fields[0].inputs["maxval"].value = 3.0
    launcher.config["searcher"]["max_trials"] = 1
    launcher.context.value = str(tmp_path / "missing")
    assert launcher.launch() is None
    assert launcher.message.startswith("launch: ") and "missing" in launcher.message

    launcher.config_file.value = "broken.yml"
    assert launcher.message.startswith(f"cannot read {tmp_path / 'broken.yml'}")
    assert launcher.launch_button.disabled and launcher.fields == []
    assert launcher.launch() is None and launcher.message == "launch: no config loaded"
    assert master.get("/experiments?limit=1000")["pagination"]["total"] == before
