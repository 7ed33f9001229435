"""What the pages show, without HTTP: filters, chart traces, job forms, escaping; and how
Plotly.js is served."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application

from det_hub import plotly_bundle
from det_hub.plotly_bundle import PAGES_BUNDLE, pages_plotly_js, plotly_js
from det_hub.service.errors import BadRequest
from det_hub.service.pages import (
    ExperimentFilters,
    PlotlyScript,
    best_trial,
    hparams_text,
    job_changes,
    json_script,
    log_level,
    metric_series,
    plotly_version,
    search_data,
    short_value,
    slot_hours,
    trial_columns,
)


def test_filters_are_read_from_the_query_and_written_back_for_paging() -> None:
    filters = ExperimentFilters.parse({"state": "ACTIVE", "owner": "mine", "name": " mni ",
                                       "offset": "50"})
    assert filters == ExperimentFilters(state="ACTIVE", owner="mine", archived="no",
                                        name="mni", offset=50)
    assert filters.any
    assert filters.query(offset=100) == "state=ACTIVE&owner=mine&name=mni&offset=100"
    # Defaults are left out of the query string.
    assert ExperimentFilters.parse({}).query() == ""
    assert not ExperimentFilters.parse({}).any
    assert ExperimentFilters.parse({"archived": "all"}).query() == "archived=all"


@pytest.mark.parametrize(("args", "message"), [
    ({"state": "SLEEPING"}, "state: 'SLEEPING' is not an experiment state"),
    ({"archived": "maybe"}, "archived: must be no, yes or all"),
    ({"offset": "-1"}, "offset: must be a whole number >= 0"),
])
def test_bad_filters_say_which_argument_is_wrong(args: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        ExperimentFilters.parse(args)
    assert e.value.message == message


def _row(group: str, steps: int, **metrics: Any) -> Any:
    return SimpleNamespace(group=group, steps_completed=steps, metrics=metrics)


def test_metric_series_makes_a_trace_per_trial_group_and_number() -> None:
    series = metric_series({
        7: [_row("training", 5, loss=0.5, lr=0.1), _row("training", 10, loss=0.25, lr=0.1),
            _row("validation", 10, validation_loss=0.3, note="text")],
        3: [_row("training", 5, loss=0.9, flag=True, bad=float("nan"))],
    })
    assert [(s["metric"], s["trial_id"], s["group"]) for s in series] == [
        ("loss", 3, "training"), ("loss", 7, "training"), ("lr", 7, "training"),
        ("validation_loss", 7, "validation")]
    assert series[1]["x"] == [5, 10] and series[1]["y"] == [0.5, 0.25]
    assert metric_series({}) == []


def test_counters_are_marked_for_the_charts_to_hide() -> None:
    series = metric_series({1: [_row("training", 5, loss=0.5, batches=5, records=160,
                                     epochs=0.5)]})
    assert {s["metric"]: s["counter"] for s in series} == {
        "batches": True, "epochs": True, "loss": False, "records": True}


def test_hyperparameters_read_at_four_significant_digits() -> None:
    assert hparams_text({"learning_rate": 0.6439717172103006, "layers": [64, 0.123456],
                         "opt": {"name": "sgd", "momentum": 0.9}, "decay": 1.5e-07,
                         "n": 3, "bias": True}) == (
        "learning_rate=0.644, layers=[64, 0.1235], opt={name=sgd, momentum=0.9}, "
        "decay=1.5e-07, n=3, bias=true")
    assert hparams_text(None) == ""


@pytest.mark.parametrize(("message", "level"), [
    ("INFO:root:epoch 1", "info"), ("[I 12:00:01 det_hub] started", "info"),
    ("loss=0.1 error_rate=0.2", "info"), ("ERROR:root:the data is gone", "error"),
    ("[E 12:00:01 tornado] 500", "error"), ("Traceback (most recent call last):", "error"),
    ("ValueError: bad shape", "error"), ("torch.cuda.OutOfMemoryError: CUDA out of memory", "error"),
    ("WARNING:root:slow", "warning"), ("UserWarning: deprecated", "warning"),
    ("DEBUG:urllib3:GET /", "debug"),
])
def test_a_log_line_reads_at_its_level_whatever_its_stream(message: str, level: str) -> None:
    assert log_level(message) == level


def test_job_forms_are_read_as_the_api_reads_job_changes() -> None:
    assert job_changes({"priority": " 12 "}).given() == {"priority": 12}
    assert job_changes({"weight": "2.5", "priority": ""}).given() == {"weight": 2.5}
    assert job_changes({"ahead_of": "exp-3"}).given() == {"ahead_of": "exp-3"}
    for form, message in (({}, "nothing to change"), ({"priority": "1.5"}, "priority:"),
                          ({"weight": "heavy"}, "weight:"), ({"weight": "inf"}, "weight:"),
                          ({"priority": "3", "ahead_of": "exp-1"}, "priority: cannot")):
        with pytest.raises(BadRequest) as e:
            job_changes(form)
        assert e.value.message.startswith(message), form


def test_json_in_a_script_element_cannot_close_it() -> None:
    value = {"name": "</script><script>alert(1)</script>", "and": "a & b <!--"}
    text = json_script(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


def test_slot_hours_read_well_at_every_scale() -> None:
    assert [slot_hours(h) for h in (0.00042, 0.5, 3.14159, 1234.4)] == [
        "0.0004", "0.5000", "3.14", "1234"]


async def test_plotly_is_sent_compressed_and_kept_a_year_under_its_digest() -> None:
    """The pages' Plotly.js goes out gzip-compressed to browsers that take it; under the URL
    the page asks for (``?v=`` its digest) a browser keeps it, under any other it asks again
    and gets 304 while it has not changed."""
    path = pages_plotly_js()
    version = plotly_version(path)
    if path is None or version is None:
        pytest.skip("the plotly package is not installed")
    raw = path.read_bytes()
    app = Application([(r"/static/plotly\.min\.js", PlotlyScript)])
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app)
    server.add_sockets(sockets)
    url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/static/plotly.min.js"
    client = AsyncHTTPClient()
    try:
        zipped = await client.fetch(f"{url}?v={version}", decompress_response=False,
                                    headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert zipped.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert zipped.headers["Content-Type"].startswith("text/javascript")
        assert gzip.decompress(zipped.body) == raw
        assert len(zipped.body) < len(raw) / 2
        plain = await client.fetch(url, decompress_response=False)
        assert plain.body == raw and "Content-Encoding" not in plain.headers
        assert plain.headers["Cache-Control"] == "no-cache"
        again = await client.fetch(url, raise_error=False, decompress_response=False,
                                   headers={"If-None-Match": plain.headers["Etag"]})
        assert again.code == 304 and not again.body
        stale = await client.fetch(f"{url}?v=0123", decompress_response=False)
        assert stale.headers["Cache-Control"] == "no-cache"
    finally:
        server.stop()


def test_the_pages_load_the_partial_plotly_where_it_is_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages take det_hub's partial bundle from the first panel folder that has it, and
    the full bundle where none has."""
    if plotly_js() is None:
        pytest.skip("the plotly package is not installed")
    folders = [tmp_path / "user", tmp_path / "system"]
    monkeypatch.setattr(plotly_bundle, "_labextension_folders", lambda: folders)
    pages_plotly_js.cache_clear()
    try:
        assert pages_plotly_js() == plotly_js()
        partial = folders[1] / PAGES_BUNDLE
        partial.parent.mkdir(parents=True)
        partial.write_text("globalThis.Plotly = {};")
        pages_plotly_js.cache_clear()
        assert pages_plotly_js() == partial
        assert plotly_version(partial) != plotly_version(plotly_js())
    finally:
        pages_plotly_js.cache_clear()


def test_the_installed_panel_ships_the_partial_plotly() -> None:
    """`make install` builds the panel and with it the partial Plotly.js the pages load: a
    quarter of the full bundle, with the parallel coordinates the search view draws."""
    path, full = pages_plotly_js(), plotly_js()
    assert full is not None, "the plotly package is not installed"
    assert path is not None and path != full, "det_hub's partial Plotly.js is in none of " + \
        ", ".join(str(f / PAGES_BUNDLE) for f in plotly_bundle._labextension_folders())
    script = path.read_bytes()
    assert len(script) < full.stat().st_size / 2
    assert b"parcoords" in script and b"globalThis.Plotly" in script


def test_the_search_view_draws_trials_with_a_metric_on_log_axes_where_the_space_is_log() -> None:
    experiment = {"searcher_metric": "loss", "smaller_is_better": True, "config": {
        "hyperparameters": {"lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                            "opt": {"name": "sgd", "momentum": {"type": "double", "minval": 0,
                                                                "maxval": 1}},
                            "batch": 32}}}

    def trial(tid: int, lr: float, momentum: float, metric: Any) -> dict[str, Any]:
        return {"id": tid, "state": "COMPLETED", "searcher_metric_value": metric,
                "hparams": {"lr": lr, "opt": {"name": "sgd", "momentum": momentum},
                            "batch": 32}}

    assert search_data(experiment, [trial(1, 0.01, 0.5, 0.3)]) is None  # one point: no view
    view = search_data(experiment, [trial(1, 0.01, 0.5, 0.3), trial(2, 0.001, 0.9, 0.2),
                                    trial(3, 0.1, 0.1, None), trial(4, 0.05, 0.2, math.nan)])
    assert view is not None
    # Only what varies gets an axis; trials without a (finite) metric are not drawn.
    assert [d["label"] for d in view["parallel"]["dimensions"]] == ["lr", "opt.momentum", "loss"]
    # lr's space is log: its axis is, ticked at powers of ten.
    lr = view["parallel"]["dimensions"][0]
    assert lr["values"] == [pytest.approx(-2), pytest.approx(-3)]
    assert (lr["tickvals"], lr["ticktext"]) == ([-3, -2], ["0.001", "0.01"])
    assert view["parallel"]["dimensions"][1]["values"] == [0.5, 0.9]
    assert view["parallel"]["customdata"] == [1, 2]
    assert view["parallel"]["line"]["reversescale"] is True  # lower is better: darkest
    assert [(s["name"], s["log"]) for s in view["scatters"]] == [("lr", True),
                                                                 ("opt.momentum", False)]
    assert view["scatters"][1] == {"name": "opt.momentum", "log": False, "x": [0.5, 0.9],
                                   "y": [0.3, 0.2], "trial_ids": [1, 2]}


def test_the_trials_table_has_a_column_per_hyperparameter_that_varies() -> None:
    def trial(lr: float, opt: dict[str, Any]) -> dict[str, Any]:
        return {"hparams": {"lr": lr, "opt": opt, "epochs": 3}}

    columns, fixed = trial_columns([trial(0.1, {"name": "sgd", "m": 0.9}),
                                    trial(0.01, {"name": "sgd", "m": 0.5})])
    assert columns == ["lr", "opt.m"]
    assert fixed == {"epochs": 3, "opt.name": "sgd"}
    # One trial: nothing varies, and everything is shown once above the table.
    assert trial_columns([trial(0.1, {"name": "sgd"})]) == (
        [], {"epochs": 3, "lr": 0.1, "opt.name": "sgd"})
    assert trial_columns([]) == ([], {})
    assert short_value(0.123456789) == "0.1235" and short_value([1e-5, "a"]) == "[1e-05, a]"


def test_the_best_trial_is_the_one_with_the_best_finite_metric() -> None:
    def trial(tid: int, metric: float | None) -> Any:
        return SimpleNamespace(id=tid, searcher_metric_value=metric)

    trials = [trial(1, None), trial(2, 0.5), trial(3, math.nan), trial(4, 0.2), trial(5, 0.2)]
    assert best_trial(trials, smaller_is_better=True).id == 4
    assert best_trial(trials, smaller_is_better=False).id == 2
    assert best_trial([trial(1, None), trial(2, math.inf)], True) is None
