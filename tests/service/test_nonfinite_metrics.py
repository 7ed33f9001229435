"""NaN and infinite metrics against a real master: a trial that reports them completes, the
REST API answers strict JSON with Determined's strings, and the SDK reads floats back."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from det_hub import nonfinite
from det_hub.client import Client
from det_hub.testing import MasterProcess

SCRIPT = '''\
import det_hub.core as core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        ctx.train.report_training_metrics(1, {"loss": float("nan"), "grad": float("inf")})
        ctx.train.report_validation_metrics(
            op.length, {"validation_loss": float("nan"), "worst": float("-inf")})
        op.report_completed(1.0)
print("reported", flush=True)
'''


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def strict_get(master: MasterProcess, path: str) -> Any:
    r = requests.get(f"{master.url}/api/v1{path}", timeout=30,
                     headers={"Authorization": f"Bearer {master.token}"})
    assert r.status_code == 200, r.text
    return nonfinite.loads_strict(r.text)


@pytest.mark.slow
def test_a_nan_validation_completes_and_reads_back_as_nan(
        master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text(SCRIPT)
    eid = master.create_ok({
        "name": "nan", "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 3}}}, context=context)
    assert master.wait_state(eid, timeout=90)["state"] == "COMPLETED"
    [trial] = master.trials(eid)
    assert "reported" in master.logs(trial["id"])

    body = strict_get(master, f"/trials/{trial['id']}/metrics")
    assert isinstance(body, dict)
    by_group = {m["group"]: m["metrics"] for m in body["metrics"]}
    assert by_group == {"training": {"loss": "NaN", "grad": "Infinity"},
                        "validation": {"validation_loss": "NaN", "worst": "-Infinity"}}
    got = strict_get(master, f"/trials/{trial['id']}")["trial"]
    assert isinstance(got, dict)
    assert got["latest_validation"]["metrics"] == {"validation_loss": "NaN", "worst": "-Infinity"}
    assert got["best_validation"] is None and got["searcher_metric_value"] is None
    strict_get(master, f"/experiments/{eid}")
    strict_get(master, f"/experiments/{eid}/trials")

    client = Client(master.url, master.token)
    reports = {r.group: r.metrics for r in client.trial_metrics(trial["id"])}
    assert math.isnan(reports["validation"]["validation_loss"])
    assert reports["validation"]["worst"] == -math.inf
    assert math.isnan(reports["training"]["loss"]) and reports["training"]["grad"] == math.inf
    # A NaN is never a best validation: the trial has none.
    assert client.get_trial(trial["id"]).searcher_metric_value is None


def test_fast_loads_keeps_whole_numbers_past_64_bits_and_reads_big_bodies_quickly() -> None:
    assert nonfinite.fast_loads(b'{"n": 123456789012345678901}') == {"n": 123456789012345678901}
    assert nonfinite.fast_loads(b"[-1234567890123456789, 2]") == [-1234567890123456789, 2]
    assert nonfinite.fast_loads(b"[1234567890123456789, -5.5]") == [1234567890123456789, -5.5]
    assert nonfinite.fast_loads(b'["12345678901234567890123", 1]') == [
        "12345678901234567890123", 1]
    assert math.isnan(nonfinite.fast_loads(b"[NaN]")[0])
    with pytest.raises(ValueError):
        nonfinite.fast_loads(b"{not json")
    # The master reads bodies of up to 160 MB; the check must not hold it for seconds.
    body = b'{"config": "' + b"a1" * 25_000_000 + b'"}'
    start = time.perf_counter()
    assert len(nonfinite.fast_loads(body)["config"]) == 50_000_000
    assert time.perf_counter() - start < 0.6


def test_fast_loads_leaves_long_fractions_to_orjson_and_big_whole_numbers_to_json() -> None:
    """Fractions of 20 digits and more (metrics near zero have them) are no whole numbers:
    orjson reads them, several times faster than json; a big whole number anywhere still
    sends the body to json, whole."""
    for plain in (b"[0.00012345678901234567891]", b"[-0.000123456789012345678901, 2]",
                  b'{"a":1.5e-00000000000000000000001}', b"[1.5E+00000000000000000000001]"):
        assert not nonfinite._past_64_bits(plain), plain
    # A float of 20 digits before its point may take the slow path; it is read right.
    assert nonfinite.fast_loads(b"[12345678901234567890.5, -1234567890123456789012e-3]") == [
        12345678901234567890.5, -1234567890123456789012e-3]
    for big in (b"[12345678901234567890]", b"[-1234567890123456789]",
                b'{"a": 0.000123456789012345678901, "b": 123456789012345678901}',
                b'["x12345678901234567890"]'):
        assert nonfinite._past_64_bits(big), big
    assert nonfinite.fast_loads(b'{"a": 0.000123456789012345678901, "b": 123456789012345678901}'
                                ) == {"a": 0.000123456789012345678901, "b": 123456789012345678901}
    assert nonfinite.fast_loads(b"[0.00012345678901234567891]") == [0.00012345678901234567891]

class Level(enum.IntEnum):
    HIGH = 2


@pytest.mark.parametrize("value", [
    {"steps": [1, 2], "metrics": {"loss": [0.5, 1e-05], "name": ["a\u00e9\n"]}},
    {"none": None, "text": "null", "nested": [[], {}, True, False, -0.0]},
    [123456789012345678901, -1234567890123456789012],  # past 64 bits
    {1: "a", 2.5: "b", None: "c", False: "d"},  # keys json turns into strings
    [Level.HIGH, 3.0, "x"],  # a subclass of int is written as json writes it
])
def test_fast_dumps_writes_what_json_writes(value: Any) -> None:
    written = nonfinite.fast_dumps(value)
    assert json.loads(written) == json.loads(
        json.dumps(value, allow_nan=False, separators=(",", ":")))
    assert b" " not in written  # compact


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf])
def test_fast_dumps_refuses_non_finite_numbers(bad: float) -> None:
    with pytest.raises(ValueError):
        nonfinite.fast_dumps({"loss": [0.5, bad]})


def test_fast_dumps_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(TypeError):
        nonfinite.fast_dumps({"when": dt.datetime(2026, 1, 1)})  # json refuses a date
    with pytest.raises(TypeError):
        nonfinite.fast_dumps({"x": object()})
