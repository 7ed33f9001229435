"""A Plotly chart widget that starts at once and takes updates as patches.

Plotly's own ``FigureWidget`` carries the whole of Plotly.js (about 5 MB) as the module of
every figure: the kernel pays seconds to import it, every figure sends it to the browser
again, and a page that restores a few of them (a notebook reopened) runs past the 2 s that
anywidget gives a model to load its module, which then fails with ``[anywidget] Failed to
initialize model.``. :class:`PlotlyChart` is an anywidget whose module is a few kilobytes;
the browser loads Plotly.js once per page (see ``plotly_chart.js``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from det_hub.plotly_bundle import plotly_js, plotly_version


class PlotlyChart(anywidget.AnyWidget):
    """A Plotly chart of :attr:`traces` (as Plotly's JSON) and :attr:`plot_layout`, drawn in the
    browser.

    The traces change by patches (:meth:`set_trace`, :meth:`extend_trace`, :meth:`reset`),
    which send only what changed; :attr:`traces` always holds them all, so that a page that
    shows the chart later (or again) gets the whole of it. The methods may be called from any
    thread.

    Args:
        traces: the first traces.
        layout: Plotly's layout; assign :attr:`plot_layout` to change it.
        status: a line above the chart (``"loading ..."``); :attr:`failed` shows it as an
            error.
    """

    _esm = Path(__file__).with_name("plotly_chart.js")

    traces: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    #: Named so, as ``layout`` is every widget's box layout.
    plot_layout = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    failed = traitlets.Bool(False).tag(sync=True)
    #: Names the notebook server's copy of Plotly.js in its URL, so that the browser keeps it.
    plotly_version = traitlets.Unicode("").tag(sync=True)

    def __init__(self, traces: Sequence[Mapping[str, Any]] = (),
                 layout: Mapping[str, Any] | None = None, *, status: str = "") -> None:
        # Held while ``traces`` change and while its state is sent: a page restoring the chart
        # gets every patch sent before its state, and none twice.
        self._data_lock = threading.RLock()
        self._held: list[dict[str, Any]] | None = None
        super().__init__(traces=[dict(t) for t in traces], plot_layout=dict(layout or {}),
                         status=status, plotly_version=plotly_version() or "")
        self.on_msg(self._on_browser_message)

    # --- patches ------------------------------------------------------------------------
    @contextmanager
    def batch(self) -> Iterator[None]:
        """Sends the patches made inside as one message."""
        with self._data_lock:
            outer = self._held is None
            if outer:
                self._held = []
            try:
                yield
            finally:
                if outer:
                    held, self._held = self._held, None
                    if held:
                        self.send({"patches": held})

    def reset(self, traces: Sequence[Mapping[str, Any]]) -> None:
        """Replace every trace."""
        with self._data_lock:
            self.traces[:] = [dict(t) for t in traces]
            self._patch({"op": "reset", "data": list(self.traces)})

    def set_trace(self, index: int, trace: Mapping[str, Any]) -> None:
        """Replace trace ``index``, or add it when ``index`` is the number of traces."""
        with self._data_lock:
            if not 0 <= index <= len(self.traces):
                raise IndexError(f"trace {index} of a chart with {len(self.traces)} traces")
            # Patches hold what was sent as it was then: traces are replaced, never changed.
            if index == len(self.traces):
                self.traces.append(dict(trace))
            else:
                self.traces[index] = dict(trace)
            self._patch({"op": "set", "index": index, "trace": self.traces[index]})

    def extend_trace(self, index: int, x: Sequence[Any], y: Sequence[Any]) -> None:
        """Append points to trace ``index``."""
        if len(x) != len(y):
            raise ValueError(f"extend_trace: {len(x)} x values but {len(y)} y values")
        with self._data_lock:
            trace = self.traces[index]
            start = len(trace.get("x", ()))
            self.traces[index] = {**trace, "x": [*trace.get("x", ()), *x],
                                "y": [*trace.get("y", ()), *y]}
            self._patch({"op": "extend", "index": index, "start": start, "x": list(x),
                         "y": list(y)})

    def show(self, figure: Any) -> None:
        """Draw a ``plotly.graph_objects.Figure`` (its traces and layout), replacing all."""
        spec = figure.to_plotly_json()
        with self._data_lock:
            self.plot_layout = dict(spec.get("layout") or {})
            self.reset(spec.get("data") or [])

    def figure(self) -> Any:
        """What the chart shows, as a ``plotly.graph_objects.Figure`` (a copy)."""
        import plotly.graph_objects as go

        with self._data_lock:
            return go.Figure(data=[dict(t) for t in self.traces], layout=dict(self.plot_layout))

    # --- ipywidgets ---------------------------------------------------------------------
    def send_state(self, key: str | list[str] | None = None) -> None:
        with self._data_lock:
            super().send_state(key)

    def _patch(self, patch: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append(patch)
        else:
            self.send({"patches": [patch]})

    def _on_browser_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        if content.get("resync"):
            # The browser missed a patch (it was sent before the page had the chart).
            with self._data_lock:
                self.send({"patches": [{"op": "reset", "data": list(self.traces)}]})
        elif content.get("request") == "plotly.js":
            path = plotly_js()
            if path is None:
                self.send({"plotly_js": None,
                           "error": "the kernel's environment has no plotly package"})
            else:
                self.send({"plotly_js": plotly_version()}, buffers=[path.read_bytes()])


__all__ = ["PlotlyChart"]
