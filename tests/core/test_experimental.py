"""``core_context.experimental``: linking the trial to the checkpoint or model version it
uses, posted to the master with the allocation token; only logged outside a cluster."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import TOKEN, TRIAL_ID, FakeMaster

import det_hub.core as core
from det_hub.client import Checkpoint, ModelVersion
from det_hub.core._experimental import ExperimentalCoreContext, LocalExperimentalCoreContext

UUID = "0b8f2a52-6c1e-4d0c-9a57-3f0e4c1b2a9d"
VERSION = ModelVersion.from_json({
    "id": 4, "model_id": 1, "model_name": "mnist cnn", "version": 2,
    "checkpoint_uuid": UUID, "checkpoint": {"uuid": UUID, "trial_id": 3, "experiment_id": 1,
                                            "state": "COMPLETED"}})


def _posts(master: FakeMaster) -> list[dict[str, Any]]:
    return [r for r in master.state.requests
            if r["path"] == f"/trials/{TRIAL_ID}/source_info"]


def test_reports_post_the_checkpoint_and_the_model_version(in_trial: FakeMaster) -> None:
    with core.init() as ctx:
        assert isinstance(ctx.experimental, ExperimentalCoreContext)
        ctx.experimental.report_task_using_checkpoint(Checkpoint.from_json({"uuid": UUID}))
        ctx.experimental.report_task_using_checkpoint(UUID)
        ctx.experimental.report_task_using_model_version(VERSION)
    posts = _posts(in_trial)
    assert [(r["method"], r["body"]) for r in posts] == [
        ("POST", {"checkpoint_uuid": UUID}),
        ("POST", {"checkpoint_uuid": UUID}),
        ("POST", {"checkpoint_uuid": UUID, "model_name": "mnist cnn", "model_version": 2}),
    ]
    assert {r["auth"] for r in posts} == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize(("call", "arg", "error", "match"), [
    ("report_task_using_checkpoint", 7, TypeError, "Checkpoint or its uuid string, not int"),
    ("report_task_using_checkpoint", " ", ValueError, "uuid is empty"),
    ("report_task_using_model_version", UUID, TypeError, "ModelVersion .* not str"),
    ("report_task_using_model_version", Checkpoint.from_json({"uuid": UUID}), TypeError,
     "not Checkpoint"),
])
def test_what_is_not_a_checkpoint_or_version_is_refused_before_sending(
        in_trial: FakeMaster, call: str, arg: Any, error: type[Exception], match: str) -> None:
    with core.init() as ctx, pytest.raises(error, match=match):
        getattr(ctx.experimental, call)(arg)
    assert _posts(in_trial) == []


def test_a_refusal_of_the_master_is_raised(in_trial: FakeMaster) -> None:
    session = core.MasterSession(in_trial.url, TOKEN, retry_deadline=1)
    experimental = ExperimentalCoreContext(session, TRIAL_ID + 1)  # a path the stand-in lacks
    with pytest.raises(core.MasterError) as caught:
        experimental.report_task_using_checkpoint(UUID)
    assert caught.value.status == 404


def test_reports_are_posted_with_retries() -> None:
    """Repeating a report is harmless (the master stores a link once), so it is retried."""

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[str, Any, bool]] = []

        def post(self, path: str, body: Any = None, *, retry: bool = False) -> Any:
            self.calls.append((path, body, retry))
            return {}

    recorder = Recorder()
    experimental = ExperimentalCoreContext(recorder, 12)  # type: ignore[arg-type]
    experimental.report_task_using_model_version(VERSION)
    assert recorder.calls == [("/trials/12/source_info", {
        "checkpoint_uuid": UUID, "model_name": "mnist cnn", "model_version": 2}, True)]


def test_outside_a_cluster_reports_are_logged_and_never_raise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("DET_HUB_CLUSTER_INFO", raising=False)
    with (
        caplog.at_level(logging.INFO, logger="det_hub.core"),
        core.init(checkpoint_storage=tmp_path) as ctx,
    ):
        assert isinstance(ctx.experimental, LocalExperimentalCoreContext)
        ctx.experimental.report_task_using_checkpoint(UUID)
        ctx.experimental.report_task_using_model_version(VERSION)
        ctx.experimental.report_task_using_checkpoint(None)  # type: ignore[arg-type]
        ctx.experimental.report_task_using_model_version("v2")  # type: ignore[arg-type]
    messages = [(r.levelno, r.getMessage()) for r in caplog.records
                if r.getMessage().startswith("report_task_using")]
    assert [level for level, _ in messages] == [logging.INFO] * 4
    assert UUID in messages[0][1] and "nothing is stored" in messages[0][1]
    assert f"model 'mnist cnn' version 2 (checkpoint {UUID})" in messages[1][1]
    assert "None" in messages[2][1] and "'v2'" in messages[3][1]
