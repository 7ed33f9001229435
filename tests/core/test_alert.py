"""``core_context.alert()``: validated here, posted to the master with the allocation token."""

from __future__ import annotations

import logging

import pytest
from conftest import TOKEN, TRIAL_ID, FakeMaster

import det_hub.core as core


def test_alert_posts_title_description_level(in_trial: FakeMaster) -> None:
    with core.init() as ctx:
        ctx.alert(title="loss diverged", description="loss is nan at step 12", level="error")
        ctx.alert("checkpoint saved")
    posts = [r for r in in_trial.state.requests if r["path"] == f"/trials/{TRIAL_ID}/alerts"]
    assert [r["body"] for r in posts] == [
        {"title": "loss diverged", "description": "loss is nan at step 12", "level": "error"},
        {"title": "checkpoint saved", "description": "", "level": "info"},
    ]
    assert {r["auth"] for r in posts} == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"title": "t", "level": "warning"}, ValueError, "level 'warning' is not one of"),
        ({"title": "t", "level": "INFO"}, ValueError, "'info', 'warn'"),
        ({"title": "  "}, ValueError, "title must not be empty"),
        ({"title": 3}, TypeError, "must be strings"),
    ],
)
def test_bad_alerts_are_refused_before_sending(
    in_trial: FakeMaster, kwargs: dict, error: type[Exception], match: str
) -> None:
    with core.init() as ctx, pytest.raises(error, match=match):
        ctx.alert(**kwargs)
    assert in_trial.state.count("POST", f"/trials/{TRIAL_ID}/alerts") == 0


def test_alert_outside_a_cluster_is_logged(
    monkeypatch: pytest.MonkeyPatch, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("DET_HUB_CLUSTER_INFO", raising=False)
    with (
        caplog.at_level(logging.DEBUG, logger="det_hub.core"),
        core.init(checkpoint_storage=tmp_path) as ctx,
    ):
        ctx.alert(title="slow epoch", description="took 2 h", level="warn")
    [record] = [r for r in caplog.records if "alert" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "alert: slow epoch: took 2 h"


def test_profiler_on_says_it_is_not_available(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DET_HUB_CLUSTER_INFO", raising=False)
    with core.init(checkpoint_storage=tmp_path) as ctx:
        with pytest.raises(NotImplementedError, match=r"profiler\.on\(\)"):
            ctx.profiler.on()
        ctx.profiler.off()
