"""A live Plotly chart of one metric of one or more trials."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from det_hub import nonfinite
from det_hub.client import Client
from det_hub.lttb import lttb_indices
from det_hub.widgets._common import Background, client_or_default
from det_hub.widgets.smoothing import ema

#: Seconds the painter waits for more rows before drawing what it has.
_PAINT_WAIT = 0.05


class _Series:
    """One trace's points: the raw curve, kept to at most twice ``max_points``."""

    def __init__(self, trial_id: int, group: str) -> None:
        self.trial_id, self.group = trial_id, group
        self.steps: list[float] = []
        self.values: list[float] = []

    def cut(self, steps: float) -> bool:
        """Drop the points past ``steps`` (rolled back by the master); whether any went."""
        keep = next((i for i, s in enumerate(self.steps) if s > steps), len(self.steps))
        if keep == len(self.steps):
            return False
        del self.steps[keep:], self.values[keep:]
        return True

    def add(self, step: float, value: float, max_points: int) -> None:
        if self.steps and step < self.steps[-1]:
            # A trial resumed from an earlier checkpoint reports those steps again.
            cut = next(i for i, s in enumerate(self.steps) if s >= step)
            del self.steps[cut:], self.values[cut:]
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > 2 * max_points:
            # Keeps memory and redraws bounded on a long run, with the curve's shape.
            keep = lttb_indices(self.steps, self.values, max_points)
            self.steps = [self.steps[i] for i in keep]
            self.values = [self.values[i] for i in keep]


class MetricsPlot:
    """A Plotly ``FigureWidget`` of one metric, a trace per trial and group, kept live.

    The chart is filled from the master's downsampled metrics (LTTB on ``metric``, at most
    ``max_points`` per trial and group), then follows the experiment's event stream from a
    background thread, appending points as trials report them. A toggle switches the y axis to
    a log scale and a slider smooths the curves (exponential moving average).

    Args:
        experiment_or_trial_ids: an experiment id (all of its trials, new ones included), or a
            list of trial ids.
        metric: the metric to draw, e.g. ``loss`` or ``validation_loss``.
        client: the master's client; one from the environment by default.
        max_points: points per trace fetched at first, and the most a trace keeps.
        start: follow the stream at once; else call :meth:`start`.

    ``plot.figure`` is the ``FigureWidget``; display ``plot`` itself for the controls too.
    """

    def __init__(
        self,
        experiment_or_trial_ids: int | Iterable[int],
        metric: str = "loss",
        client: Client | None = None,
        *,
        max_points: int = 1000,
        start: bool = True,
    ) -> None:
        self.client = client_or_default(client)
        self.metric = metric
        self.max_points = max_points
        self._lock = threading.RLock()
        self._series: dict[tuple[int, str], _Series] = {}
        #: Stream events waiting to be drawn: ``("metrics", row)`` and ``("rolled_back", ...)``.
        self._pending: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        # The rows to follow, per experiment: None for all of its trials.
        self._follow: dict[int, set[int] | None] = {}
        # The last row id drawn per experiment, where its stream resumes.
        self._after: dict[int, int] = {}
        experiment_of: dict[int, int] = {}
        if isinstance(experiment_or_trial_ids, int):
            eid = int(experiment_or_trial_ids)
            self._follow[eid] = None
            experiment_of = {t.id: eid for t in self.client.list_trials(eid)}
        else:
            for tid in experiment_or_trial_ids:
                eid = self.client.get_trial(int(tid)).experiment_id
                experiment_of[int(tid)] = eid
                self._follow.setdefault(eid, set()).add(int(tid))  # type: ignore[union-attr]
        self._after = dict.fromkeys(self._follow, 0)

        self.figure = go.FigureWidget(layout={
            "title": {"text": metric}, "xaxis": {"title": {"text": "steps completed"}},
            "yaxis": {"title": {"text": metric}, "type": "linear"},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "height": 380})
        self.log_scale = widgets.ToggleButton(value=False, description="log scale",
                                              icon="line-chart")
        self.smoothing = widgets.FloatSlider(value=0.0, min=0.0, max=0.99, step=0.01,
                                             description="smoothing", continuous_update=False)
        self.log_scale.observe(self._on_log_scale, names="value")
        self.smoothing.observe(lambda _: self.redraw(), names="value")
        self.widget = widgets.VBox([widgets.HBox([self.log_scale, self.smoothing]), self.figure])

        self._load(experiment_of)
        self._readers = [Background(f"det_hub metrics of experiment {eid}",
                                    functools.partial(self._read, eid))
                         for eid in self._follow]
        self._painter = Background("det_hub metrics painter", self._paint)
        if start:
            self.start()

    # --- public -------------------------------------------------------------------------
    def start(self) -> None:
        """Follow the event stream (again) from the last row drawn."""
        for reader in self._readers:
            reader.start()
        self._painter.start()

    def stop(self) -> None:
        """Stop following; the chart keeps what it has."""
        for reader in self._readers:
            reader.stop()
        self._painter.stop()

    @property
    def following(self) -> bool:
        """Whether a stream is still being followed (it ends with the experiment)."""
        return any(r.running for r in self._readers)

    def points(self, trial_id: int, group: str = "training") -> tuple[list[float], list[float]]:
        """The raw (unsmoothed) steps and values held for one trial and group."""
        with self._lock:
            s = self._series.get((trial_id, group))
            return (list(s.steps), list(s.values)) if s else ([], [])

    def redraw(self) -> None:
        """Redraw every trace from the points held, with the current smoothing."""
        with self._lock, self.figure.batch_update():
            for key in sorted(self._series):
                self._draw(key)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # --- internals ----------------------------------------------------------------------
    def _load(self, experiment_of: dict[int, int]) -> None:
        """The first fill: each trial's downsampled curve, in one request per trial."""
        for tid, eid in sorted(experiment_of.items()):
            reports = self.client.downsampled_metrics(tid, self.metric,
                                                      max_points=self.max_points)
            for r in reports:
                row_id = r.raw.get("id")
                if isinstance(row_id, int):
                    self._after[eid] = max(self._after[eid], row_id)
                self._add(tid, r.group, r.steps_completed, r.metrics)
        self.redraw()

    def _add(self, trial_id: int, group: str, step: int, metrics: dict[str, Any]) -> bool:
        value = metrics.get(self.metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        key = (trial_id, group)
        if key not in self._series:
            self._series[key] = _Series(trial_id, group)
        self._series[key].add(step, float(value), self.max_points)
        return True

    def _draw(self, key: tuple[int, str]) -> None:
        s = self._series[key]
        name = f"trial {s.trial_id} {s.group}"
        ys = ema(s.values, self.smoothing.value) if self.smoothing.value else s.values
        trace = next((t for t in self.figure.data if t.name == name), None)
        if trace is None:
            dash = "dot" if s.group == "validation" else "solid"
            self.figure.add_scatter(x=list(s.steps), y=ys, name=name, mode="lines+markers"
                                    if s.group == "validation" else "lines",
                                    line={"dash": dash})
        else:
            trace.x, trace.y = list(s.steps), ys

    def _on_log_scale(self, change: dict[str, Any]) -> None:
        self.figure.layout.yaxis.type = "log" if change["new"] else "linear"

    def _read(self, experiment_id: int, stop: threading.Event) -> None:
        follow = self._follow[experiment_id]
        for name, data in self.client.stream_experiment_events(
                experiment_id, self._after[experiment_id], stop=stop):
            if name == "metrics":
                self._after[experiment_id] = max(self._after[experiment_id], data["id"])
            if name in ("metrics", "rolled_back") and (
                    follow is None or data["trial_id"] in follow):
                self._pending.put((name, data))

    def _paint(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                rows = [self._pending.get(timeout=0.2)]
            except queue.Empty:
                if not self.following and self._pending.empty():
                    return
                continue
            stop.wait(_PAINT_WAIT)  # let a burst of rows gather into one redraw
            while not self._pending.empty():
                rows.append(self._pending.get_nowait())
            with self._lock:
                changed: set[tuple[int, str]] = set()
                for name, r in rows:
                    if name == "rolled_back":
                        changed |= {key for key, s in self._series.items()
                                    if key[0] == r["trial_id"] and s.cut(r["steps_completed"])}
                    elif self._add(r["trial_id"], r["group"], r["steps_completed"],
                                   nonfinite.decode(r["metrics"])):
                        changed.add((r["trial_id"], r["group"]))
                with self.figure.batch_update():
                    for key in sorted(changed):
                        self._draw(key)
