"""Notebook widgets over a det_hub master: live Plotly metric charts and an experiment monitor.

Needs ``ipywidgets`` 8, ``plotly`` and ``anywidget`` (Plotly's ``FigureWidget`` is built on
it): ``pip install 'det_hub[widgets]'``. Every widget takes a :class:`det_hub.client.Client`,
or makes one from ``DET_HUB_MASTER`` and ``DET_HUB_TOKEN``.
"""

from det_hub.widgets.experiment_monitor import ExperimentMonitor
from det_hub.widgets.metrics_plot import MetricsPlot
from det_hub.widgets.smoothing import ema

__all__ = ["ExperimentMonitor", "MetricsPlot", "ema"]
