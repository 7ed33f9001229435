"""bench/short_trials.py, run small through its ``main``: a search that keeps trials queued
beside the running ones (``--queued``), with warm start on, finishes, and every figure in its
JSON is one (each trial counted once, utilisation within 0..1, the searcher's setting as
asked). Nothing here asserts on speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import short_trials  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_search_with_queued_trials_is_measured(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figures.json"
    short_trials.main(["--trials", "6", "--seeds", "1", "--max-length", "64", "--queued", "2",
                       "--master-arg=--LocalAgent.warm_start=True", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "N=6, median of 1" in printed
    [result] = json.loads(out.read_text())
    ours, theirs = result["det_hub"], result["optuna"]
    assert ours["trials"] == theirs["trials"] == 6
    assert 0 < ours["utilisation"] <= 1 and 0 < theirs["utilisation"] <= 1
    assert ours["batches"] >= 6 * result["rungs"][0]
    assert ours["extra"] == 0  # every stop landed at its rung


def test_the_search_keeps_the_queued_trials_beside_the_slots() -> None:
    problem = short_trials.make_problem(short_trials.ProblemSpec("synthetic", 64, 0))
    config = short_trials.searcher_config(problem, 6, 2 + 3, 64)
    assert config["max_concurrent_trials"] == 5


def test_a_negative_queue_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        short_trials.main(["--queued", "-1"])
    assert "--queued at least 0" in capsys.readouterr().err
