"""A live Plotly chart of one metric of one or more trials."""

from __future__ import annotations

import functools
import math
import queue
import threading
from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets

from det_hub import nonfinite
from det_hub.client import Client
from det_hub.lttb import lttb_indices
from det_hub.widgets._common import Background, client_or_default
from det_hub.widgets.plotly_chart import PlotlyChart
from det_hub.widgets.smoothing import ema

#: Seconds the painter waits for more rows before drawing what it has.
_PAINT_WAIT = 0.05

#: One colour per trial, on both of its traces (Plotly's default colours).
PALETTE = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692",
           "#b6e880", "#ff97ff", "#fecb52")


class _Series:
    """One trace's points: the raw curve, kept to at most twice ``max_points``.

    ``shown`` counts the leading points the chart holds as they are here: the chart gets the
    points past it appended, or the whole trace again once it is 0.
    """

    def __init__(self, trial_id: int, group: str) -> None:
        self.trial_id, self.group = trial_id, group
        self.steps: list[float] = []
        self.values: list[float] = []
        self.shown = 0

    def cut(self, steps: float) -> bool:
        """Drop the points past ``steps`` (rolled back by the master); whether any went."""
        keep = next((i for i, s in enumerate(self.steps) if s > steps), len(self.steps))
        if keep == len(self.steps):
            return False
        del self.steps[keep:], self.values[keep:]
        self.shown = 0
        return True

    def add(self, step: float, value: float, max_points: int) -> None:
        if self.steps and step < self.steps[-1]:
            # A trial resumed from an earlier checkpoint reports those steps again.
            cut = next(i for i, s in enumerate(self.steps) if s >= step)
            del self.steps[cut:], self.values[cut:]
            self.shown = 0
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > 2 * max_points:
            # Keeps memory and redraws bounded on a long run, with the curve's shape.
            keep = lttb_indices(self.steps, self.values, max_points)
            self.steps = [self.steps[i] for i in keep]
            self.values = [self.values[i] for i in keep]
            self.shown = 0


class MetricsPlot:
    """A live Plotly chart of one metric, a trace per trial and group, with a log-scale toggle
    and a smoothing slider.

    Making one returns at once: a background thread reads each trial's stored curve from the
    master (downsampled, keeping the shape of ``metric``'s curve, at most ``max_points`` per
    trial and group) and draws it, then follows the experiment's metric stream, appending
    points as trials report them; new trials of an experiment come in too. Until the stored
    curves are drawn, and when reading them fails, a line above the chart says so (and
    :meth:`wait` raises the error).

    Args:
        experiment_or_trial_ids: an experiment id (all of its trials, new ones included), or a
            list of trial ids.
        metric: the metric to draw, e.g. ``loss`` or ``validation_loss``.
        client: the master's client; one from the environment by default.
        max_points: points per trace fetched at first, and the most a trace keeps.
        start: start reading and following at once; else call :meth:`start`.

    Display the plot itself (the last line of a cell, or ``display(plot)``): the controls and
    the chart. :attr:`chart` is the chart widget, :attr:`figure` a ``plotly`` ``Figure`` of
    what it shows now, :meth:`points` a trace's raw points.
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
        if not metric:
            raise ValueError("MetricsPlot: metric must name a metric, e.g. 'loss'")
        self.client = client_or_default(client)
        self.metric = metric
        self.max_points = max_points
        self._experiment_id: int | None = None
        self._trial_ids: list[int] = []
        if isinstance(experiment_or_trial_ids, int):
            self._experiment_id = int(experiment_or_trial_ids)
            what = f"experiment {self._experiment_id}"
        else:
            self._trial_ids = sorted({int(t) for t in experiment_or_trial_ids})
            if not self._trial_ids:
                raise ValueError("MetricsPlot: no trial ids given")
            what = "trial" + ("s " if len(self._trial_ids) > 1 else " ") + \
                ", ".join(map(str, self._trial_ids))
        self._what = what
        self._lock = threading.RLock()
        self._series: dict[tuple[int, str], _Series] = {}
        #: The chart's trace of each series, in the order they were first drawn.
        self._trace_of: dict[tuple[int, str], int] = {}
        self._colour_of: dict[int, str] = {}
        #: Stream events waiting to be drawn: ``("metrics", row)`` and ``("rolled_back", ...)``.
        self._pending: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        # The rows to follow, per experiment: None for all of its trials.
        self._follow: dict[int, set[int] | None] = {}
        # Where each experiment's stream starts, and the last row id drawn per trial: the
        # stream's rows at or below it are drawn already.
        self._after: dict[int, int] = {}
        self._last_row: dict[int, int] = {}
        self._readers: dict[int, Background] = {}
        #: Set once the stored curves are drawn (or reading them failed: see :attr:`error`).
        self.loaded = threading.Event()
        #: The error that stopped reading the stored curves or following, if one did.
        self.error: BaseException | None = None

        self.chart = PlotlyChart(layout={
            "title": {"text": metric}, "xaxis": {"title": {"text": "batches"}},
            "yaxis": {"title": {"text": metric}, "type": "linear"},
            "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "height": 380,
            "legend": {"orientation": "h", "y": -0.18}},
            status=f"loading the stored {metric} of {what} ...")
        self.log_scale = widgets.ToggleButton(value=False, description="log scale",
                                              icon="line-chart")
        self.smoothing = widgets.FloatSlider(value=0.0, min=0.0, max=0.99, step=0.01,
                                             description="smoothing", continuous_update=False)
        self.log_scale.observe(self._on_log_scale, names="value")
        self.smoothing.observe(lambda _: self.redraw(), names="value")
        self.widget = widgets.VBox([widgets.HBox([self.log_scale, self.smoothing]), self.chart])

        self._loader = Background(f"det_hub metrics of {what}", self._load)
        self._painter = Background("det_hub metrics painter", self._paint)
        if start:
            self.start()

    # --- public -------------------------------------------------------------------------
    def start(self) -> None:
        """Read the stored curves, if that is still to do, and follow the stream (again) from
        the last row drawn."""
        if not self._readers and not self._loader.running:
            # Not read yet, stopped while reading, or reading failed: (again) from the start.
            self.loaded.clear()
            self.error = None
            self._loader.start()
        for reader in self._readers.values():
            reader.start()
        self._painter.start()

    def stop(self) -> None:
        """Stop following; the chart keeps what it has."""
        self._loader.stop()
        for reader in list(self._readers.values()):
            reader.stop()
        self._painter.stop()

    def wait(self, timeout: float | None = None) -> None:
        """Wait until the stored curves are drawn.

        Raises:
            TimeoutError: they were not within ``timeout`` seconds.
            MasterError, MasterUnreachable: reading them failed (the error is also shown
                above the chart).
        """
        if not self.loaded.wait(timeout):
            raise TimeoutError(f"the stored {self.metric} of {self._what} was not drawn "
                               f"within {timeout} s")
        if self.error is not None:
            raise self.error

    @property
    def following(self) -> bool:
        """Whether the stored curves are still being read or a stream is still followed (it
        ends with the experiment)."""
        return self._loader.running or any(r.running for r in list(self._readers.values()))

    @property
    def figure(self) -> Any:
        """What the chart shows now, as a ``plotly.graph_objects.Figure`` (a copy: changing it
        changes nothing on screen)."""
        return self.chart.figure()

    def points(self, trial_id: int, group: str = "training") -> tuple[list[float], list[float]]:
        """The raw (unsmoothed) steps and values held for one trial and group."""
        with self._lock:
            s = self._series.get((trial_id, group))
            return (list(s.steps), list(s.values)) if s else ([], [])

    def redraw(self) -> None:
        """Redraw every trace from the points held, with the current smoothing."""
        with self._lock:
            for s in self._series.values():
                s.shown = 0
            self._draw(set(self._series))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # --- reading ------------------------------------------------------------------------
    def _load(self, stop: threading.Event) -> None:
        """The first fill, then a stream reader per experiment."""
        self.chart.failed = False
        try:
            if self._experiment_id is not None:
                experiment_of = {t.id: self._experiment_id
                                 for t in self.client.list_trials(self._experiment_id)}
                follow: dict[int, set[int] | None] = {self._experiment_id: None}
            else:
                experiment_of, follow = {}, {}
                for tid in self._trial_ids:
                    eid = self.client.get_trial(tid).experiment_id
                    experiment_of[tid] = eid
                    chosen = follow.setdefault(eid, set())
                    assert chosen is not None
                    chosen.add(tid)
            # Trials without rows are read again once every other has been: a row a trial
            # stores meanwhile is then either read or newer than every row read before, so
            # the stream below, from the oldest last row, has it.
            last: dict[int, int] = {}
            for again in (False, True):
                for tid in sorted(experiment_of):
                    if stop.is_set():
                        return
                    if again and last.get(tid):
                        continue
                    last[tid] = self._fill(tid)
            after = {eid: min((last[t] for t, e in experiment_of.items()
                               if e == eid and last[t]), default=0) for eid in follow}
        except Exception as exc:
            self._failed(f"cannot read the stored {self.metric} of {self._what}", exc)
            self.loaded.set()
            raise
        with self._lock:
            self._follow, self._after = follow, after
            self.chart.status = ""
        self.loaded.set()
        for eid in follow:
            reader = Background(f"det_hub metrics of experiment {eid}",
                                functools.partial(self._read, eid))
            self._readers[eid] = reader
            if not stop.is_set():
                reader.start()

    def _fill(self, trial_id: int) -> int:
        """Draw one trial's stored curve; the id of its last row (0 for none)."""
        reports = self.client.downsampled_metrics(trial_id, self.metric,
                                                  max_points=self.max_points)
        with self._lock:
            changed: set[tuple[int, str]] = set()
            last = self._last_row.get(trial_id, 0)
            for r in reports:
                row_id = r.raw.get("id")
                if isinstance(row_id, int):
                    if row_id <= last:
                        continue
                    last = row_id
                if self._add(trial_id, r.group, r.steps_completed, r.metrics):
                    changed.add((trial_id, r.group))
            self._last_row[trial_id] = last
            self._draw(changed)
            return last

    def _read(self, experiment_id: int, stop: threading.Event) -> None:
        follow = self._follow[experiment_id]
        try:
            for name, data in self.client.stream_experiment_events(
                    experiment_id, self._after[experiment_id], stop=stop):
                if name == "metrics":
                    self._after[experiment_id] = max(self._after[experiment_id], data["id"])
                if name in ("metrics", "rolled_back") and (
                        follow is None or data["trial_id"] in follow):
                    self._pending.put((name, data))
        except Exception as exc:
            self._failed(f"stopped following experiment {experiment_id}", exc)
            raise

    def _failed(self, what: str, exc: BaseException) -> None:
        self.error = exc
        self.chart.status = f"det_hub: {what}: {exc}"
        self.chart.failed = True

    # --- drawing ------------------------------------------------------------------------
    def _paint(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                rows = [self._pending.get(timeout=0.2)]
            except queue.Empty:
                if self.loaded.is_set() and not self.following and self._pending.empty():
                    return
                continue
            stop.wait(_PAINT_WAIT)  # let a burst of rows gather into one redraw
            while not self._pending.empty():
                rows.append(self._pending.get_nowait())
            with self._lock:
                changed: set[tuple[int, str]] = set()
                for name, r in rows:
                    tid = r["trial_id"]
                    if name == "rolled_back":
                        changed |= {key for key, s in self._series.items()
                                    if key[0] == tid and s.cut(r["steps_completed"])}
                        continue
                    if r["id"] <= self._last_row.get(tid, 0):
                        continue  # drawn from the stored curve already
                    self._last_row[tid] = r["id"]
                    if self._add(tid, r["group"], r["steps_completed"],
                                 nonfinite.decode(r["metrics"])):
                        changed.add((tid, r["group"]))
                self._draw(changed)

    def _add(self, trial_id: int, group: str, step: int, metrics: dict[str, Any]) -> bool:
        value = metrics.get(self.metric)
        # NaN and infinities cannot be drawn (nor sent to the page as JSON).
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            return False
        key = (trial_id, group)
        if key not in self._series:
            self._series[key] = _Series(trial_id, group)
        self._series[key].add(step, float(value), self.max_points)
        return True

    def _draw(self, keys: set[tuple[int, str]]) -> None:
        """Send the chart what changed in these series: their new points, or the whole trace
        where earlier points changed (under ``_lock``)."""
        weight = self.smoothing.value
        with self.chart.batch():
            for key in sorted(keys):
                s = self._series[key]
                ys = ema(s.values, weight) if weight else s.values
                index = self._trace_of.get(key)
                # A lone training point is drawn with a marker, a longer curve without.
                lone = s.group != "validation" and s.shown == 1 and len(s.steps) > 1
                if index is None or s.shown == 0 or lone:
                    if index is None:
                        index = self._trace_of[key] = len(self._trace_of)
                    self.chart.set_trace(index, self._trace(s, ys))
                elif s.shown < len(s.steps):
                    self.chart.extend_trace(index, s.steps[s.shown:], ys[s.shown:])
                s.shown = len(s.steps)

    def _trace(self, s: _Series, ys: list[float]) -> dict[str, Any]:
        colour = self._colour_of.setdefault(
            s.trial_id, PALETTE[len(self._colour_of) % len(PALETTE)])
        validation = s.group == "validation"
        return {"type": "scatter", "name": f"trial {s.trial_id} {s.group}",
                "x": list(s.steps), "y": list(ys),
                # A lone point shows only as a marker.
                "mode": "lines+markers" if validation or len(s.steps) == 1 else "lines",
                "line": {"dash": "dot" if validation else "solid", "color": colour},
                "marker": {"color": colour}}

    def _on_log_scale(self, change: dict[str, Any]) -> None:
        layout = dict(self.chart.plot_layout)
        layout["yaxis"] = {**layout.get("yaxis", {}), "type": "log" if change["new"] else "linear"}
        self.chart.plot_layout = layout
