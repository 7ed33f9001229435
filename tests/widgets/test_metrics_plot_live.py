"""MetricsPlot returns at once and draws afterwards: against a real master that is frozen
(SIGSTOP) while the plot is made, a search whose trials have no rows yet, and an experiment
that does not exist. And the chart widget's patches, which carry only what changed."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from det_hub.client import Client, MasterError
from det_hub.plotly_bundle import plotly_js, plotly_version
from det_hub.testing import MasterProcess
from det_hub.widgets import MetricsPlot
from det_hub.widgets.plotly_chart import PlotlyChart

pytestmark = pytest.mark.slow


def wait(what: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture
def client(master: MasterProcess) -> Iterator[Client]:
    with Client(master.url, master.token) as c:
        yield c


def stored(master: MasterProcess, trial_id: int, group: str, metric: str) -> list[int]:
    """The steps of a trial's rows of ``group`` that hold ``metric``, as the master stores
    them."""
    rows = master.get(f"/trials/{trial_id}/metrics")["metrics"]
    return [r["steps_completed"] for r in rows if r["group"] == group and metric in r["metrics"]]


def search(name: str, trials: int, length: int, sleep: float) -> dict[str, Any]:
    """A random search of ``trials`` trials of the steps script (a row every 2 batches)."""
    return {"name": name, "entrypoint": "python3 train.py",
            "hyperparameters": {"sleep": sleep, "report_every": 2,
                                "x": {"type": "int", "minval": 1, "maxval": 1000}},
            "searcher": {"name": "random", "metric": "validation_loss", "max_trials": trials,
                         "max_length": {"batches": length}},
            "max_restarts": 0}


def test_the_plot_is_made_while_the_master_is_frozen_and_draws_its_history_after(
        master: MasterProcess, client: Client) -> None:
    eid = master.create_ok(search("frozen", trials=2, length=60, sleep=0.0))
    assert master.wait_state(eid, timeout=120)["state"] == "COMPLETED"
    trials = sorted(t["id"] for t in master.trials(eid))
    assert master.proc is not None
    made: list[MetricsPlot] = []
    os.kill(master.proc.pid, signal.SIGSTOP)
    try:
        # Made on a thread: were the constructor to wait for the master, the test would
        # see it still running, rather than hang with it.
        maker = threading.Thread(target=lambda: made.append(
            MetricsPlot(eid, metric="loss", client=client)))
        maker.start()
        maker.join(10)
        assert not maker.is_alive(), "MetricsPlot waited for the frozen master"
        [plot] = made
        assert not plot.loaded.is_set()
        assert plot.chart.status == f"loading the stored loss of experiment {eid} ..."
        assert plot.chart.traces == []
    finally:
        os.kill(master.proc.pid, signal.SIGCONT)
    try:
        plot.wait(30)
        assert plot.error is None and plot.chart.status == "" and not plot.chart.failed
        for tid in trials:
            assert plot.points(tid)[0] == stored(master, tid, "training", "loss") \
                == list(range(2, 61, 2))
        # One trace per trial (validation rows hold no "loss"), in the trials' order, a
        # colour each.
        drawn = plot.figure.data
        assert [t.name for t in drawn] == [f"trial {tid} training" for tid in trials]
        assert [list(t.x) for t in drawn] == [list(range(2, 61, 2))] * 2
        assert list(drawn[0].y) == [1.0 / s for s in range(2, 61, 2)]
        assert drawn[0].line.color != drawn[1].line.color
        wait(lambda: not plot.following, timeout=30)
    finally:
        plot.stop()


def test_rows_reported_after_the_plot_is_made_are_drawn_once_each(
        master: MasterProcess, client: Client) -> None:
    """Made before the search's trials report anything: every row of every trial ends up
    in the chart, once and in order, training and validation."""
    eid = master.create_ok(search("live", trials=3, length=40, sleep=0.03))
    plot = MetricsPlot(eid, metric="loss", client=client)
    validation = MetricsPlot(eid, metric="validation_loss", client=client)
    try:
        plot.wait(30)
        validation.wait(30)
        # The stream goes on from where the stored curves ended, and ends with the search.
        wait(lambda: not plot.following and not validation.following, timeout=120)
        assert master.experiment(eid)["state"] == "COMPLETED"
        trials = sorted(t["id"] for t in master.trials(eid))
        assert len(trials) == 3
        for tid in trials:
            steps = stored(master, tid, "training", "loss")
            assert steps == list(range(2, 41, 2))
            wait(lambda tid=tid, steps=steps: plot.points(tid)[0] == steps, timeout=5)
            assert validation.points(tid, "validation") == ([40], [1.0 / 40])
        shown = {t.name: list(t.x) for t in plot.figure.data}
        assert shown == {f"trial {tid} training": list(range(2, 41, 2)) for tid in trials}
        [lone] = [t for t in validation.figure.data if t.name == f"trial {trials[0]} validation"]
        assert lone.mode == "lines+markers"
    finally:
        plot.stop()
        validation.stop()


def test_a_plot_of_an_experiment_that_does_not_exist_says_so(client: Client) -> None:
    plot = MetricsPlot(987654, metric="loss", client=client)
    with pytest.raises(MasterError, match="987654"):
        plot.wait(30)
    assert plot.chart.failed
    assert plot.chart.status.startswith(
        "det_hub: cannot read the stored loss of experiment 987654: ")
    wait(lambda: not plot.following, timeout=5)


def test_plot_controls_change_the_chart(master: MasterProcess, client: Client) -> None:
    eid = master.create_ok(search("controls", trials=1, length=20, sleep=0.0))
    master.wait_state(eid, timeout=120)
    [tid] = [t["id"] for t in master.trials(eid)]
    plot = MetricsPlot(eid, metric="loss", client=client)
    try:
        plot.wait(30)
        plot.log_scale.value = True
        assert plot.chart.plot_layout["yaxis"]["type"] == "log"
        assert plot.figure.layout.yaxis.type == "log"
        plot.log_scale.value = False
        assert plot.chart.plot_layout["yaxis"]["type"] == "linear"
        raw = plot.points(tid)[1]
        plot.smoothing.value = 0.5
        [trace] = plot.chart.traces
        assert trace["y"] != pytest.approx(raw) and trace["y"][0] == pytest.approx(raw[0])
        plot.smoothing.value = 0.0
        assert plot.chart.traces[0]["y"] == raw
    finally:
        plot.stop()


# --- the chart widget, without a frontend ---------------------------------------------------

@pytest.fixture
def chart_messages(monkeypatch: pytest.MonkeyPatch) -> tuple[PlotlyChart, list[Any]]:
    """A chart whose messages to the browser are kept in a list, as (content, buffers)."""
    chart = PlotlyChart(layout={"height": 300})
    sent: list[Any] = []
    monkeypatch.setattr(chart, "send", lambda content, buffers=None: sent.append(
        (content, buffers)))
    return chart, sent


def test_chart_patches_send_what_changed_and_keep_the_whole(
        chart_messages: tuple[PlotlyChart, list[Any]]) -> None:
    chart, sent = chart_messages
    chart.set_trace(0, {"name": "a", "x": [1], "y": [1.0]})
    with chart.batch():
        chart.extend_trace(0, [2, 3], [0.5, 0.25])
        chart.set_trace(1, {"name": "b", "x": [1], "y": [2.0]})
    assert [c for c, _ in sent] == [
        {"patches": [{"op": "set", "index": 0, "trace": {"name": "a", "x": [1], "y": [1.0]}}]},
        {"patches": [{"op": "extend", "index": 0, "start": 1, "x": [2, 3], "y": [0.5, 0.25]},
                     {"op": "set", "index": 1, "trace": {"name": "b", "x": [1], "y": [2.0]}}]}]
    # What a page showing the chart later gets: all of it.
    assert chart.get_state()["traces"] == [{"name": "a", "x": [1, 2, 3], "y": [1.0, 0.5, 0.25]},
                                         {"name": "b", "x": [1], "y": [2.0]}]
    with pytest.raises(IndexError, match="trace 3 of a chart with 2 traces"):
        chart.set_trace(3, {"name": "c"})
    with pytest.raises(ValueError, match="2 x values but 1 y values"):
        chart.extend_trace(0, [4, 5], [1.0])
    # A page that missed a patch asks for everything.
    sent.clear()
    chart._on_browser_message(chart, {"resync": True}, [])
    assert sent == [({"patches": [{"op": "reset", "data": chart.traces}]}, None)]


def test_chart_sends_plotly_js_to_a_page_that_cannot_load_it(
        chart_messages: tuple[PlotlyChart, list[Any]]) -> None:
    chart, sent = chart_messages
    path = plotly_js()
    assert path is not None
    assert chart.plotly_version == plotly_version()
    chart._on_browser_message(chart, {"request": "plotly.js"}, [])
    [(content, buffers)] = sent
    assert content == {"plotly_js": plotly_version()}
    assert buffers == [path.read_bytes()]
