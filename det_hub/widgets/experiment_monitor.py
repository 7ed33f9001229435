"""An experiment at a glance, kept live: state, progress, trials, ASHA rungs and controls."""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as widgets

from det_hub.client import Client, MasterError
from det_hub.states import ExperimentState
from det_hub.widgets._common import Background, client_or_default
from det_hub.widgets._common import format_number as _number
from det_hub.widgets._common import html_table as _table

#: Seconds between refreshes for validation rows alone.
_MIN_REFRESH = 0.5
_ASHA = ("adaptive_asha", "async_halving", "asha")


class ExperimentMonitor:
    """A widget showing one experiment and letting its owner pause, activate or kill it.

    It shows the state, a progress bar, a table of trials (hyperparameters, steps, best
    searcher metric, state) and, for ASHA searches, the master's rung table. A background
    thread follows the experiment's event stream and refreshes on every state change and
    validation; it falls back to polling if the stream cannot be had, and stops once the
    experiment is over.

    Args:
        experiment_id: the experiment.
        client: the master's client; one from the environment by default.
        start: follow the experiment at once; else call :meth:`start`.
        poll: seconds between refreshes when polling.

    The shown data is readable as :attr:`state`, :attr:`progress`, :attr:`trial_rows` and
    :attr:`rung_rows`; :attr:`message` holds the outcome of the last button press.
    """

    def __init__(
        self,
        experiment_id: int,
        client: Client | None = None,
        *,
        start: bool = True,
        poll: float = 2.0,
    ) -> None:
        self.client = client_or_default(client)
        self.experiment_id = int(experiment_id)
        self.poll = poll
        self.state = ""
        self.progress = 0.0
        self.trial_rows: list[dict[str, Any]] = []
        self.rung_rows: list[dict[str, Any]] | None = None
        self.message = ""
        self._lock = threading.Lock()
        self._metric = ""
        self._smaller_is_better = True
        self._asha = False

        self.title = widgets.HTML()
        self.progress_bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0,
                                                  description="progress")
        self.trials_table = widgets.HTML()
        self.rungs_table = widgets.HTML()
        self.status = widgets.HTML()
        self.buttons = {
            "pause": widgets.Button(description="pause", icon="pause"),
            "activate": widgets.Button(description="activate", icon="play"),
            "kill": widgets.Button(description="kill", icon="stop", button_style="danger"),
        }
        for action, button in self.buttons.items():
            button.on_click(lambda _b, action=action: self.act(action))
        self.widget = widgets.VBox([
            self.title, self.progress_bar, widgets.HBox(list(self.buttons.values())),
            self.status, self.trials_table, self.rungs_table])
        self.refresh()
        self._follower = Background(f"det_hub monitor of experiment {experiment_id}",
                                    self._follow)
        if start:
            self.start()

    # --- public -------------------------------------------------------------------------
    def start(self) -> None:
        """Follow the experiment (again)."""
        self._follower.start()

    def stop(self) -> None:
        """Stop following; what is shown stays."""
        self._follower.stop()

    @property
    def following(self) -> bool:
        return self._follower.running

    def act(self, action: str) -> None:
        """Pause, activate or kill the experiment (what the buttons do), then refresh."""
        calls = {"pause": self.client.pause_experiment,
                 "activate": self.client.activate_experiment,
                 "kill": self.client.kill_experiment}
        try:
            calls[action](self.experiment_id)
            self.message = f"{action}: done"
        except MasterError as error:
            self.message = f"{action}: {error}"
        self.status.value = html.escape(self.message)
        self.refresh()

    def refresh(self) -> None:
        """Read the experiment, its trials and, for ASHA, its rungs, and redraw."""
        exp = self.client.get_experiment(self.experiment_id)
        trials = self.client.list_trials(self.experiment_id)
        searcher = (exp.config or {}).get("searcher") or {}
        self._metric = str(searcher.get("metric") or exp.searcher_metric or "")
        self._smaller_is_better = bool(searcher.get("smaller_is_better", True))
        self._asha = searcher.get("name") in _ASHA
        rungs = None
        if self._asha:
            rungs = _rung_rows(self.client.get_searcher(self.experiment_id).get("rungs"))
        rows = [{
            "id": t.id, "state": t.state, "hparams": t.hparams,
            "steps_completed": t.steps_completed, "progress": t.progress,
            "best_metric": _best(t.best_validation, self._metric, t.searcher_metric_value),
        } for t in sorted(trials, key=lambda t: t.id)]
        with self._lock:
            self.state, self.progress = exp.state, float(exp.progress or 0.0)
            self.trial_rows, self.rung_rows = rows, rungs
            self._render(exp.name)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # --- internals ----------------------------------------------------------------------
    def _render(self, name: str) -> None:
        self.title.value = (f"<b>experiment {self.experiment_id}</b> {html.escape(name)}: "
                            f"<code>{html.escape(self.state)}</code>")
        self.progress_bar.value = min(max(self.progress, 0.0), 1.0)
        state = ExperimentState(self.state)
        terminal = state.terminal
        self.buttons["pause"].disabled = terminal or not state.active
        self.buttons["activate"].disabled = terminal or self.state != "PAUSED"
        self.buttons["kill"].disabled = terminal
        metric = self._metric or "metric"
        self.trials_table.value = _table(
            ["trial", "state", "hyperparameters", "steps", f"best {metric}"],
            [[r["id"], r["state"], _hparams(r["hparams"]), r["steps_completed"],
              _number(r["best_metric"])] for r in self.trial_rows])
        if self.rung_rows is None:
            self.rungs_table.value = ""
        else:
            self.rungs_table.value = "<b>ASHA rungs</b>" + _table(
                ["bracket", "rung", "length", "reported", "promoted", f"best {metric}"],
                [[r["bracket"], r["rung"], r["length"], r["reported"], r["promoted"],
                  _number(r["best_metric"])] for r in self.rung_rows])

    def _follow(self, stop: threading.Event) -> None:
        last = 0.0
        try:
            for name, data in self.client.stream_experiment_events(
                    self.experiment_id, stop=stop, heartbeat=1.0):
                # A state event comes only on a change (at most twice a second); rows are the
                # chart's business, but a validation may change a best metric.
                if name == "metrics" and (data.get("group") != "validation"
                                          or time.monotonic() - last < _MIN_REFRESH):
                    continue
                self.refresh()
                last = time.monotonic()
        except MasterError:
            # A master without the stream (or one refusing it): poll instead.
            while not stop.wait(self.poll):
                self.refresh()
                if self.state in ("COMPLETED", "CANCELED", "ERROR"):
                    return
        if not stop.is_set():
            self.refresh()


def _best(best_validation: dict[str, Any] | None, metric: str, value: float | None) -> Any:
    if value is not None:
        return value
    if best_validation:
        return (best_validation.get("metrics") or {}).get(metric)
    return None


def _rung_rows(rungs: Any) -> list[dict[str, Any]] | None:
    """The master's rung table flattened to one row per bracket and rung."""
    if not isinstance(rungs, dict):
        return None
    rows = []
    for bracket in rungs.get("brackets") or []:
        for rung in bracket.get("rungs") or []:
            rows.append({"bracket": bracket.get("index"), "rung": rung.get("index"),
                         "length": rung.get("length"), "reported": rung.get("reported"),
                         "promoted": rung.get("promoted"),
                         "best_metric": rung.get("best_metric"),
                         "training": rung.get("training")})
    return rows


def _hparams(hparams: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_number(v)}" for k, v in sorted(hparams.items()))
