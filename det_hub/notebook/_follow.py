"""Following an experiment from a cell: a live progress line and the tail of its trials' logs.

In a notebook (a kernel with a frontend) one display is updated in place through its
``display_id``; elsewhere, such as a terminal IPython, the progress line is printed when it
changes and log lines are printed as they come.
"""

from __future__ import annotations

import html
import sys
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from det_hub.client import Client, Experiment, Trial
from det_hub.console import format_log_line
from det_hub.console import render as r

#: Seconds between looks at the experiment while following.
POLL_SECONDS = 1.0
#: Log lines kept on screen while following in a notebook.
TAIL_LINES = 20


def progress_line(experiment: Experiment, trials: Iterable[Trial]) -> str:
    """One line on where the experiment stands, e.g.
    ``Experiment 3 (mnist): ACTIVE 40% | trial 5 RUNNING 40/100 batches``."""
    name = f" ({experiment.name})" if experiment.name else ""
    parts = [f"Experiment {experiment.id}{name}: {experiment.state} "
             f"{r.fmt_percent(experiment.progress)}"]
    listed = sorted(trials, key=lambda t: t.id)
    for trial in listed[:3]:
        metric = (f" {experiment.searcher_metric}={r.fmt_value(trial.searcher_metric_value)}"
                  if trial.searcher_metric_value is not None else "")
        parts.append(f"trial {trial.id} {trial.state} {trial.steps_completed} batches{metric}")
    if len(listed) > 3:
        parts.append(f"{len(listed) - 3} more trials")
    return " | ".join(parts)


class _Status:
    """What is on screen: the progress line and the latest log lines."""

    def __init__(self, line: str, tail: Iterable[str]) -> None:
        self.line = line
        self.tail = list(tail)

    def _repr_html_(self) -> str:
        logs = html.escape("\n".join(self.tail))
        pre = f"<pre style='max-height:24em;overflow:auto'>{logs}</pre>" if self.tail else ""
        return f"<div><b>{html.escape(self.line)}</b>{pre}</div>"

    def __repr__(self) -> str:
        return "\n".join([self.line, *self.tail])


class _Screen:
    """Where following shows its output (see the module's docstring)."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._handle: Any = None
        self._last_line = ""

    def log(self, text: str) -> None:
        if self.live:
            self.tail.append(text)
        else:
            print(text, flush=True)

    def progress(self, line: str) -> None:
        if self.live:
            from IPython.display import display

            status = _Status(line, self.tail)
            if self._handle is None:
                self._handle = display(status, display_id=True)
            else:
                self._handle.update(status)
        elif line != self._last_line:
            print(line, flush=True)
        self._last_line = line


def in_notebook() -> bool:
    """Whether the code runs in a kernel whose frontend can update a display in place."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def follow_experiment(client: Client, experiment_id: int, *, live: bool | None = None,
                      poll: float | None = None) -> Experiment:
    """Shows the experiment's progress and its trials' log lines until it ends.

    Ctrl-C (the notebook's interrupt) stops following only; the experiment goes on.

    Args:
        client: The master's client.
        experiment_id: The experiment.
        live: Update one display in place (the default in a notebook), else print.
        poll: Seconds between looks (default :data:`POLL_SECONDS`).

    Returns:
        The experiment as last seen: ended, unless following was interrupted.
    """
    screen = _Screen(in_notebook() if live is None else live)
    seen: dict[int, int] = {}  # trial id -> id of the last log line shown
    finished: set[int] = set()  # trials ended, with every log line shown
    experiment = client.get_experiment(experiment_id)
    try:
        while True:
            # The experiment is read before the logs, so once it is seen ended, the logs
            # read after it are complete.
            experiment = client.get_experiment(experiment_id)
            trials = sorted(client.list_trials(experiment_id), key=lambda t: t.id)
            for trial in trials:
                if trial.id in finished:
                    continue
                for row in client.trial_logs(trial.id, after_id=seen.get(trial.id, 0)):
                    if isinstance(row.get("id"), int):
                        seen[trial.id] = row["id"]
                    prefix = f"[trial {trial.id}] " if len(trials) > 1 else ""
                    screen.log(prefix + format_log_line(row))
                if trial.is_terminal:
                    finished.add(trial.id)
            screen.progress(progress_line(experiment, trials))
            if experiment.is_terminal:
                return experiment
            time.sleep(POLL_SECONDS if poll is None else poll)
    except KeyboardInterrupt:
        print(f"Stopped following experiment {experiment_id}; it keeps running. To stop it: "
              f"%det_experiment kill {experiment_id}", file=sys.stderr)
        return experiment


def print_logs(client: Client, trial_id: int, *, follow: bool) -> None:
    """Prints a trial's log lines; with ``follow``, new ones too until the trial ends (Ctrl-C
    stops following)."""
    try:
        for row in client.trial_logs(trial_id, follow=follow):
            print(format_log_line(row), flush=follow)
    except KeyboardInterrupt:
        if not follow:
            raise
        print(f"Stopped following trial {trial_id}'s logs.", file=sys.stderr)
