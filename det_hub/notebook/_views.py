"""How the magics show experiments: HTML tables in notebooks, plain text elsewhere.

The objects returned by the magics carry their own ``_repr_html_`` and ``_repr_pretty_``, so
that IPython picks the richest form the frontend shows, and the objects stay usable as data:
an :class:`ExperimentList` is a list of experiments, an :class:`ExperimentView` is an
:class:`~det_hub.client.Experiment`.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from det_hub.client import Experiment, Listing, Trial
from det_hub.console import best_trial, trial_rows
from det_hub.console import render as r

LIST_HEADERS = ["ID", "Owner", "Name", "State", "Progress", "Trials", "Pool", "Started",
                "Duration"]


def text_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table; an empty one still shows its headers."""
    return tabulate(list(rows), headers=list(headers), tablefmt="simple", disable_numparse=True)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table with every cell escaped."""
    return tabulate(list(rows), headers=list(headers), tablefmt="html", disable_numparse=True)


def experiment_row(e: Experiment) -> list[Any]:
    """One experiment as a row under :data:`LIST_HEADERS`, as ``det-hub experiment list``."""
    return [e.id, e.owner or r.NONE, e.name or r.NONE, e.state, r.fmt_percent(e.progress),
            e.num_trials, e.resource_pool or r.NONE, r.fmt_time(e.created_at),
            r.fmt_duration(e.created_at, e.ended_at)]


class ExperimentList(Listing[Experiment]):
    """Experiments as ``%det_experiment list`` found them; shown as a table."""

    @classmethod
    def of(cls, listing: Listing[Experiment]) -> ExperimentList:
        """The same experiments and page information as ``listing``."""
        return cls(list(listing), listing.raw, listing.pagination)

    def _footer(self) -> str:
        if self.total > len(self):
            return f"Showing {len(self)} of {self.total}; ask for more with --limit"
        return ""

    def to_text(self) -> str:
        """The experiments as a plain-text table."""
        text = text_table(LIST_HEADERS, (experiment_row(e) for e in self))
        return text + (f"\n{self._footer()}" if self._footer() else "")

    def _repr_html_(self) -> str:
        footer = f"<p>{html.escape(self._footer())}</p>" if self._footer() else ""
        return html_table(LIST_HEADERS, (experiment_row(e) for e in self)) + footer

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.to_text())


@dataclasses.dataclass(frozen=True)
class ExperimentView(Experiment):
    """An :class:`~det_hub.client.Experiment`, with its trials when they were fetched, shown
    as a summary (and a trials table) rather than as a dataclass."""

    trials: list[Trial] | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, experiment: Experiment, trials: Iterable[Trial] | None = None) -> ExperimentView:
        """``experiment`` with ``trials`` attached."""
        values = {f.name: getattr(experiment, f.name) for f in dataclasses.fields(Experiment)}
        return cls(**values, trials=None if trials is None else list(trials))

    def _fields(self) -> list[tuple[str, Any]]:
        searcher = self.config.get("searcher")
        searcher_name = searcher.get("name") if isinstance(searcher, dict) else None
        direction = "smaller is better" if self.smaller_is_better else "larger is better"
        metric = f"{self.searcher_metric} ({direction})" if self.searcher_metric else r.NONE
        return [
            ("ID", self.id), ("Name", r.or_none(self.name)), ("Owner", r.or_none(self.owner)),
            ("State", self.state), ("Progress", r.fmt_percent(self.progress)),
            ("Searcher", r.or_none(searcher_name)), ("Metric", metric),
            ("Trials", self.num_trials if self.trials is None else len(self.trials)),
            ("Started", r.fmt_time(self.created_at)), ("Ended", r.fmt_time(self.ended_at)),
            ("Duration", r.fmt_duration(self.created_at, self.ended_at)),
        ]

    def _best_line(self) -> str:
        best = best_trial(self, self.trials or [])
        if best is None:
            return ""
        return (f"Best {self.searcher_metric or 'metric'}: "
                f"{r.fmt_value(best.searcher_metric_value)} (trial {best.id}, "
                f"{r.fmt_mapping(best.hparams)})")

    def to_text(self) -> str:
        """The experiment as ``name: value`` lines, then its trials as a table."""
        text = tabulate([(f"{k}:", v) for k, v in self._fields()], tablefmt="plain",
                        disable_numparse=True)
        if self.trials is not None:
            text += "\n\nTrials:\n" + text_table(*trial_rows(self.trials))
            if self._best_line():
                text += "\n\n" + self._best_line()
        return text

    def _repr_html_(self) -> str:
        title = html.escape(f"Experiment {self.id}" + (f": {self.name}" if self.name else ""))
        parts = [f"<h4>{title}</h4>",
                 tabulate([(k, v) for k, v in self._fields()], tablefmt="html",
                          disable_numparse=True)]
        if self.trials is not None:
            parts += ["<h5>Trials</h5>", html_table(*trial_rows(self.trials))]
            if self._best_line():
                parts.append(f"<p>{html.escape(self._best_line())}</p>")
        return "\n".join(parts)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.to_text())
