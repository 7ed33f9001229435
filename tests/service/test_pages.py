"""What the pages show, without HTTP: filters, chart traces, job forms, escaping."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from det_hub.service.errors import BadRequest
from det_hub.service.pages import (
    ExperimentFilters,
    job_changes,
    json_script,
    metric_series,
    slot_hours,
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
