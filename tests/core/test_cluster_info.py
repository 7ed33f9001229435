"""Reading the cluster-info file."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ALLOCATION_ID, EXPERIMENT_ID, TRIAL_ID, FakeMaster

import det_hub.core as core
from det_hub.core._http import api_base_url


def test_cluster_info_fields(in_trial: FakeMaster) -> None:
    info = core.get_cluster_info()
    assert info is not None
    assert info.master_url == in_trial.url
    assert info.allocation_id == ALLOCATION_ID
    assert info.task_id == f"trial-{TRIAL_ID}"
    assert info.slot_ids == [0] and info.container_addrs == ["127.0.0.1"]
    assert info.latest_checkpoint is None
    assert info.trial is not None
    assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (
        TRIAL_ID,
        EXPERIMENT_ID,
        123,
    )
    assert info.trial.hparams == {"learning_rate": 0.05, "hidden": 16}
    assert info.trial._config["name"] == "t"
    assert info.trial.user_data == {"url": "x"}
    with core.init() as ctx:
        assert ctx.info == info


def test_bad_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "info.json"
    bad.write_text("{not json")
    monkeypatch.setenv("DET_HUB_CLUSTER_INFO", str(bad))
    with pytest.raises(ValueError, match="info.json: cluster-info file is not valid JSON"):
        core.get_cluster_info()


def test_api_base_url() -> None:
    assert api_base_url("http://h:8080") == "http://h:8080/api/v1"
    assert api_base_url("https://hub/services/det-hub/") == "https://hub/services/det-hub/api/v1"
    assert api_base_url("http://h/api/v1") == "http://h/api/v1"


def test_master_errors_are_parsed(in_trial: FakeMaster) -> None:
    session = core.MasterSession(in_trial.url, "t")
    with pytest.raises(core.MasterError) as err:
        session.get("/nowhere", retry=False)
    assert err.value.status == 404
    assert err.value.error == "no route /nowhere"
    assert err.value.details == []
