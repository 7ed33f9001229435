"""Notebook widgets over a det_hub master: live Plotly metric charts, an experiment monitor,
trial comparison, a checkpoint browser and an experiment launcher.

Needs ``ipywidgets`` 8, ``plotly`` and ``anywidget``: ``pip install 'det_hub[widgets]'``. The
charts are :class:`PlotlyChart` widgets, which the page draws with Plotly.js, loaded once per
page from the notebook server (det_hub's server extension) or, failing that, from the kernel.
Every widget takes a :class:`det_hub.client.Client`, or makes one from ``DET_HUB_MASTER`` and
``DET_HUB_TOKEN``.
"""

from det_hub.widgets.checkpoint_browser import CheckpointBrowser
from det_hub.widgets.compare_trials import CompareTrials
from det_hub.widgets.experiment_launcher import ExperimentLauncher
from det_hub.widgets.experiment_monitor import ExperimentMonitor
from det_hub.widgets.metrics_plot import MetricsPlot
from det_hub.widgets.plotly_chart import PlotlyChart
from det_hub.widgets.smoothing import ema

__all__ = ["CheckpointBrowser", "CompareTrials", "ExperimentLauncher", "ExperimentMonitor",
           "MetricsPlot", "PlotlyChart", "ema"]
