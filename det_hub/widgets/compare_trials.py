"""Trials side by side: their hyperparameters against a metric, as parallel coordinates."""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from det_hub.client import Client
from det_hub.search_view import (
    flatten,
    hparam_axes,
    is_number,
    log_scaled,
    parallel_coordinates,
    scatter,
)
from det_hub.widgets._common import client_or_default
from det_hub.widgets.plotly_chart import PlotlyChart


class CompareTrials:
    """A parallel-coordinates chart of an experiment's trials, plus one hyperparameter against
    the metric.

    Each trial is a line through one axis per hyperparameter that varies between trials and a
    last axis for the metric, coloured by the metric. Numbers get numeric axes; any other
    values (strings, booleans, lists) get an axis of integer ticks labelled with the values.
    Nested hyperparameters are named by their dotted path (``optimizer.lr``). Below it, a
    scatter plots the hyperparameter chosen in a dropdown against the metric.

    A trial's metric is its best validation value: the lowest, or the highest when the
    searcher's ``smaller_is_better`` is false. Trials that have not validated yet are listed
    in :attr:`rows` but not drawn.

    Args:
        experiment_id: the experiment.
        metric: the validation metric; the experiment's ``searcher.metric`` by default.
        client: the master's client; one from the environment by default.

    :attr:`figure` is the parallel-coordinates ``Figure``, :attr:`scatter` the other, as
    drawn by the :class:`PlotlyChart` widgets :attr:`chart` and :attr:`scatter_chart`;
    :attr:`rows` holds one dict per trial (``trial_id``, ``state``, ``hparams`` flattened,
    ``metric``). Call :meth:`refresh` to read the trials again.
    """

    def __init__(self, experiment_id: int, metric: str | None = None,
                 client: Client | None = None) -> None:
        self.client = client_or_default(client)
        self.experiment_id = int(experiment_id)
        self.metric = metric or ""
        self.smaller_is_better = True
        self.rows: list[dict[str, Any]] = []
        #: The hyperparameters given an axis, in axis order.
        self.hparam_names: list[str] = []
        #: Those whose space is ``type: log``, drawn on a log axis.
        self.log_scaled: set[str] = set()

        self.figure = go.Figure(layout={
            "margin": {"l": 60, "r": 60, "t": 60, "b": 30}, "height": 400})
        self.scatter = go.Figure(layout={
            "margin": {"l": 60, "r": 20, "t": 30, "b": 40}, "height": 320})
        self.chart = PlotlyChart(layout=self.figure.layout.to_plotly_json())
        self.scatter_chart = PlotlyChart(layout=self.scatter.layout.to_plotly_json())
        self.hparam = widgets.Dropdown(description="x axis", options=[])
        self.hparam.observe(lambda _: self._draw_scatter(), names="value")
        self.reload = widgets.Button(description="refresh", icon="refresh")
        self.reload.on_click(lambda _b: self.refresh())
        self.widget = widgets.VBox([self.reload, self.chart,
                                    self.hparam, self.scatter_chart])
        self.refresh()

    def refresh(self) -> None:
        """Read the experiment's trials and their validation metrics, and redraw."""
        exp = self.client.get_experiment(self.experiment_id)
        searcher = (exp.config or {}).get("searcher") or {}
        if not self.metric:
            self.metric = str(searcher.get("metric") or exp.searcher_metric or "")
        self.smaller_is_better = bool(searcher.get("smaller_is_better", exp.smaller_is_better))
        rows: list[dict[str, Any]] = []
        for trial in sorted(self.client.list_trials(self.experiment_id), key=lambda t: t.id):
            values: list[Any] = [r.metrics.get(self.metric) for r in
                                 self.client.trial_metrics(trial.id, group="validation")]
            numbers = [float(v) for v in values if is_number(v) and math.isfinite(v)]
            best = (min(numbers) if self.smaller_is_better else max(numbers)) if numbers else None
            rows.append({"trial_id": trial.id, "state": trial.state,
                         "hparams": flatten(trial.hparams), "metric": best})
        self.rows = rows
        self.log_scaled = log_scaled((exp.config or {}).get("hyperparameters"))
        self.hparam_names = hparam_axes(rows)
        chosen = self.hparam.value
        self.hparam.options = self.hparam_names
        self.hparam.value = (chosen if chosen in self.hparam_names
                             else (self.hparam_names[0] if self.hparam_names else None))
        self._draw_parallel()
        self._draw_scatter()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # --- internals ----------------------------------------------------------------------
    def _drawn(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["metric"] is not None]

    def _draw_parallel(self) -> None:
        trace = parallel_coordinates(self.rows, self.metric, self.smaller_is_better,
                                     self.log_scaled)
        trace.pop("type")
        better = "lower" if self.smaller_is_better else "higher"
        with self.figure.batch_update():
            self.figure.data = ()
            self.figure.add_parcoords(**trace)
            self.figure.layout.title = {
                "text": f"experiment {self.experiment_id}: {len(self._drawn())} trials by "
                        f"{self.metric} ({better} is better)"}
        self.chart.show(self.figure)

    def _draw_scatter(self) -> None:
        name = self.hparam.value
        points = scatter(self.rows, name) if name else {"x": [], "y": [], "trial_ids": []}
        with self.scatter.batch_update():
            self.scatter.data = ()
            self.scatter.add_scatter(
                x=points["x"], y=points["y"], mode="markers",
                text=[f"trial {t}" for t in points["trial_ids"]],
                marker={"size": 10, "color": points["y"],
                        "colorscale": "Viridis", "reversescale": self.smaller_is_better})
            self.scatter.layout.xaxis.title = {"text": name or ""}
            self.scatter.layout.xaxis.type = "log" if name in self.log_scaled else "-"
            self.scatter.layout.yaxis.title = {"text": self.metric}
        self.scatter_chart.show(self.scatter)
