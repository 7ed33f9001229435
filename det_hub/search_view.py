"""A search at a glance, as data for charts: its trials' hyperparameters against the searcher
metric. One implementation for the notebook widget (:class:`det_hub.widgets.CompareTrials`),
the dashboard's experiment page and the lab panel (through
``GET /api/v1/experiments/<id>/search-view``): each draws what these functions give with
Plotly.

A row is a trial: ``{"trial_id", "state", "hparams": {dotted name: value}, "metric"}``, its
metric its best searcher-metric value (None before it validated; such rows are not drawn).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any


def flatten(hparams: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested hyperparameters as one mapping of dotted names to values."""
    flat: dict[str, Any] = {}
    for key, value in hparams.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def log_scaled(space: Mapping[str, Any] | None, prefix: str = "") -> set[str]:
    """The dotted names of an experiment's ``hyperparameters`` whose space is ``type: log``:
    their axes are drawn on a log scale."""
    names: set[str] = set()
    for key, spec in (space or {}).items():
        if not isinstance(spec, Mapping):
            continue
        if spec.get("type") == "log":
            names.add(f"{prefix}{key}")
        elif "type" not in spec:  # nested hyperparameters
            names |= log_scaled(spec, f"{prefix}{key}.")
    return names


def drawn(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows with a metric to draw."""
    return [r for r in rows if r["metric"] is not None]


def varying(names: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Those of ``names`` whose value differs between ``rows``."""
    rows = list(rows)
    return [n for n in names if len({repr(r["hparams"].get(n)) for r in rows}) > 1]


def hparam_axes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The hyperparameters given an axis: those whose value differs between the drawn trials
    (all of them when none does), by name."""
    names = sorted({str(name) for r in rows for name in r["hparams"]})
    return varying(names, drawn(rows)) or names


def hparam_columns(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """A trials table's hyperparameters: the names given a column each (those whose value
    differs between the rows, by name), and the others with the value all rows share."""
    names = sorted({str(name) for r in rows for name in r["hparams"]})
    columns = varying(names, rows)
    fixed = {n: rows[0]["hparams"].get(n) for n in names if n not in columns}
    return columns, fixed


def axis(label: str, values: list[Any]) -> dict[str, Any]:
    """One parallel-coordinates dimension: numeric when every value is a number, else the
    distinct values (as text, sorted) on integer ticks."""
    if all(is_number(v) for v in values):
        return {"label": label, "values": [float(v) for v in values]}
    texts = [plain(v) for v in values]
    labels = sorted(set(texts))
    index = {text: i for i, text in enumerate(labels)}
    return {"label": label, "values": [index[t] for t in texts],
            "tickvals": list(range(len(labels))), "ticktext": labels,
            "range": [-0.5, len(labels) - 0.5] if len(labels) == 1 else [0, len(labels) - 1]}


def log_axis(label: str, values: list[float]) -> dict[str, Any]:
    """A parallel-coordinates dimension of positive numbers on a log scale: their base-10
    logarithms, ticked at the powers of ten between them (Plotly's parcoords has no log
    axis)."""
    logs = [math.log10(v) for v in values]
    low, high = math.floor(min(logs)), math.ceil(max(logs))
    return {"label": label, "values": logs, "range": [low, high],
            "tickvals": list(range(low, high + 1)),
            "ticktext": [f"{10.0 ** k:g}" for k in range(low, high + 1)]}


def parallel_coordinates(rows: Sequence[Mapping[str, Any]], metric: str,
                         smaller_is_better: bool,
                         log: Set[str] = frozenset()) -> dict[str, Any]:
    """A Plotly ``parcoords`` trace of the drawn rows: an axis per hyperparameter of
    :func:`hparam_axes` (on a log scale for those named in ``log`` whose values are all
    positive numbers) and a last one for the metric, lines coloured by the metric (the best
    darkest)."""
    shown = drawn(rows)
    metrics = [r["metric"] for r in shown]
    dimensions = []
    for name in hparam_axes(rows):
        values = [r["hparams"].get(name) for r in shown]
        positive = all(is_number(v) and v > 0 for v in values)
        dimensions.append(log_axis(name, [float(v) for v in values])
                          if name in log and positive else axis(name, values))
    dimensions.append({"label": metric, "values": metrics})
    return {"type": "parcoords", "dimensions": dimensions,
            "line": {"color": metrics, "colorscale": "Viridis",
                     "reversescale": smaller_is_better, "showscale": True,
                     "colorbar": {"title": {"text": metric}}},
            "customdata": [r["trial_id"] for r in shown]}


def scatter(rows: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """One hyperparameter against the metric, for the drawn rows: ``{"x", "y", "trial_ids"}``
    (values that are not numbers as text)."""
    shown = drawn(rows)
    return {"x": [plain(r["hparams"].get(name)) for r in shown],
            "y": [r["metric"] for r in shown], "trial_ids": [r["trial_id"] for r in shown]}


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plain(value: Any) -> Any:
    """A value as a chart can place it: numbers as they are, anything else as text."""
    return value if is_number(value) else str(value)


def search_data(experiment: Mapping[str, Any],
                trials: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """An experiment's search at a glance (the experiment page's and the lab panel's), from
    the experiment and its trials as the API shows them: a parallel-coordinates trace of the
    trials' hyperparameters and searcher metric, and each hyperparameter against the metric,
    on a log axis where its space is log. None until two trials have a metric."""
    rows = [{"trial_id": t["id"], "state": t["state"], "hparams": flatten(t["hparams"] or {}),
             "metric": t["searcher_metric_value"]
             if isinstance(t["searcher_metric_value"], (int, float))
             and math.isfinite(t["searcher_metric_value"]) else None} for t in trials]
    if len(drawn(rows)) < 2:
        return None
    metric, smaller = experiment["searcher_metric"], bool(experiment["smaller_is_better"])
    logs = log_scaled((experiment.get("config") or {}).get("hyperparameters"))
    return {"metric": metric, "smaller_is_better": smaller,
            "parallel": parallel_coordinates(rows, metric, smaller, logs),
            "scatters": [{"name": name, "log": name in logs, **scatter(rows, name)}
                         for name in hparam_axes(rows)]}
