"""MetricsPlot and ExperimentMonitor against a real master while trials run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.client import Client
from det_hub.testing import MasterProcess
from det_hub.widgets import ExperimentMonitor, MetricsPlot, ema
from det_hub.widgets.metrics_plot import _Series

pytestmark = pytest.mark.slow

CONTEXTS = Path(__file__).resolve().parents[1] / "e2e" / "contexts"


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture
def client(master: MasterProcess) -> Iterator[Client]:
    with Client(master.url, master.token) as c:
        yield c


def wait(what: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


def trace(plot: MetricsPlot, name: str) -> Any:
    return next((t for t in plot.figure.data if t.name == name), None)


def test_metrics_plot_grows_live_and_its_controls_change_the_traces(
    master: MasterProcess, client: Client, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=100, sleep=0.05))
    tid = wait(lambda: master.trials(eid))[0]["id"]
    wait(lambda: master.trials(eid)[0]["steps_completed"] >= 10)
    plot = MetricsPlot(eid, metric="loss", client=client)
    try:
        plot.wait(30)
        name = f"trial {tid} training"
        first = len(trace(plot, name).x)
        assert first >= 5, "the first fill comes from the stored metrics"
        # Live points are appended while the trial runs.
        wait(lambda: len(trace(plot, name).x) > first, timeout=30)
        assert master.experiment(eid)["state"] == "RUNNING"
        wait(lambda: not plot.following, timeout=60)
        assert master.experiment(eid)["state"] == "COMPLETED"
        wait(lambda: len(trace(plot, name).x) == 50, timeout=5)
        t = trace(plot, name)
        assert list(t.x) == list(range(2, 101, 2))
        assert list(t.y) == [1.0 / s for s in range(2, 101, 2)]
        # Only training rows hold "loss"; validation rows have none to draw.
        assert trace(plot, f"trial {tid} validation") is None

        plot.log_scale.value = True
        assert plot.figure.layout.yaxis.type == "log"
        plot.log_scale.value = False
        assert plot.figure.layout.yaxis.type == "linear"

        raw = plot.points(tid)[1]
        plot.smoothing.value = 0.6
        smoothed = list(trace(plot, name).y)
        assert smoothed == pytest.approx(ema(raw, 0.6))
        assert smoothed != pytest.approx(raw)
        plot.smoothing.value = 0.0
        assert list(trace(plot, name).y) == raw
    finally:
        plot.stop()


def test_a_rolled_back_tail_leaves_a_curve() -> None:
    """The master rolled back a trial's rows past step 3: the chart's curve drops them."""
    series = _Series(7, "training")
    for step in (2, 4, 6):
        series.add(step, 1 / step, max_points=100)
    assert series.cut(3) and (series.steps, series.values) == ([2], [0.5])
    assert not series.cut(3)


def test_metrics_plot_of_trial_ids_draws_validation_points(
    master: MasterProcess, client: Client, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=20, sleep=0.0))
    master.wait_state(eid)
    tid = master.trials(eid)[0]["id"]
    plot = MetricsPlot([tid], metric="validation_loss", client=client)
    wait(lambda: not plot.following, timeout=10)
    v = trace(plot, f"trial {tid} validation")
    assert list(v.x) == [20] and list(v.y) == [1.0 / 20]
    assert len(plot.figure.data) == 1


def test_experiment_monitor_follows_a_run(
        master: MasterProcess, client: Client, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=60, sleep=0.05))
    monitor = ExperimentMonitor(eid, client=client)
    try:
        tid = wait(lambda: monitor.trial_rows and monitor.trial_rows[0]["id"])
        wait(lambda: monitor.trial_rows[0]["steps_completed"] >= 10, timeout=60)
        assert monitor.state == "RUNNING"
        assert monitor.trial_rows[0]["hparams"] == {"sleep": 0.05, "report_every": 2}
        assert f"<td>{tid}</td>" in monitor.trials_table.value
        wait(lambda: monitor.state == "COMPLETED", timeout=60)
        wait(lambda: not monitor.following, timeout=10)
        row = monitor.trial_rows[0]
        assert row["state"] == "COMPLETED" and row["steps_completed"] == 60
        assert row["best_metric"] == pytest.approx(1.0 / 60)
        assert monitor.progress == 1.0 and monitor.progress_bar.value == 1.0
        assert monitor.rung_rows is None
        assert all(b.disabled for b in monitor.buttons.values())
    finally:
        monitor.stop()


def test_experiment_monitor_buttons_drive_the_experiment(
    master: MasterProcess, client: Client, steps_experiment: Any) -> None:
    eid = master.create_ok(steps_experiment(length=10_000, sleep=0.05), activate=False)
    monitor = ExperimentMonitor(eid, client=client)
    try:
        assert monitor.state == "PAUSED"
        assert monitor.buttons["pause"].disabled and not monitor.buttons["activate"].disabled
        monitor.act("activate")
        assert monitor.state in ("QUEUED", "STARTING", "RUNNING")
        assert monitor.message == "activate: done"
        assert not monitor.buttons["pause"].disabled
        monitor.buttons["kill"].click()
        wait(lambda: monitor.state == "CANCELED", timeout=60)
        monitor.act("pause")
        assert monitor.message.startswith("pause: ") and "CANCELED" in monitor.message
    finally:
        monitor.stop()


def test_experiment_monitor_shows_asha_rungs(master: MasterProcess, client: Client) -> None:
    config = {
        "name": "asha", "entrypoint": "python3 train.py",
        "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0},
                            "sleep": 0.0},
        "searcher": {"name": "adaptive_asha", "metric": "validation_loss", "max_trials": 4,
                     "divisor": 2, "max_rungs": 2, "mode": "aggressive",
                     "max_concurrent_trials": 2, "max_length": {"batches": 8}},
        "reproducibility": {"experiment_seed": 7}, "max_restarts": 0,
    }
    eid = master.create_ok(config, context=CONTEXTS / "curves")
    monitor = ExperimentMonitor(eid, client=client, start=False)
    master.wait_state(eid, timeout=120)
    monitor.refresh()
    assert monitor.state == "COMPLETED"
    assert monitor.rung_rows is not None
    lengths = [r["length"] for r in monitor.rung_rows if r["bracket"] == 0]
    assert lengths == sorted(lengths) and len(lengths) == 2
    assert sum(r["reported"] for r in monitor.rung_rows if r["rung"] == 0) >= 2
    assert "ASHA rungs" in monitor.rungs_table.value
    assert len(monitor.trial_rows) == 4
