"""Numbers past what the database holds, NUL characters and deep nesting are 400s naming what
is wrong, on SQLite and on PostgreSQL alike, and nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det_hub.store import MAX_BIG_INTEGER, MAX_INTEGER
from det_hub.testing import MasterProcess, reap_tasks


@pytest.fixture
def master(tmp_path: Path, db_url: str) -> Iterator[MasterProcess]:
    proc = MasterProcess(tmp_path / "data", db_url)
    proc.start()
    yield proc
    proc.stop()
    reap_tasks(tmp_path)


def _error(r: Any) -> str:
    assert r.status_code == 400, r.text
    return str(r.json()["error"])


def _rows(*steps: int, **metrics: Any) -> dict[str, Any]:
    return {"group": "training", "metrics": [
        {"steps_completed": s, "metrics": metrics or {"loss": 0.5}} for s in steps]}


@pytest.mark.slow
def test_numbers_past_the_database_and_nul_characters_are_refused(
        master: MasterProcess) -> None:
    with master.idle_trial("bounds") as (eid, trial_id):
        metrics = f"/trials/{trial_id}/metrics"

        # Ids in the path, and whole numbers in the query.
        assert _error(master.api("GET", f"/trials/{MAX_INTEGER + 1}")) == (
            f"trial_id: must be at most {MAX_INTEGER}")
        assert master.api("GET", f"/trials/{MAX_INTEGER}").status_code == 404
        assert _error(master.api("GET", f"/experiments/{2**63}/trials")).startswith(
            "experiment_id:")
        assert _error(master.api("GET", f"/experiments?offset={2**63}")).startswith("offset:")
        page = master.get(f"/experiments?offset={MAX_BIG_INTEGER}")
        assert page["experiments"] == []
        assert _error(master.api("GET", f"{metrics}?after={2**64}")).startswith("after:")

        # Steps in a body: the largest the store holds is taken, one more is refused.
        assert master.api("POST", metrics, json=_rows(MAX_BIG_INTEGER)).status_code == 200
        assert _error(master.api("POST", metrics, json=_rows(MAX_BIG_INTEGER + 1))).startswith(
            "metrics[0].steps_completed:")
        refused = master.api("POST", "/checkpoints", json={
            "uuid": "6f1d2d2e-1111-4222-8333-444455556666", "trial_id": MAX_INTEGER + 1,
            "resources": {}})
        assert _error(refused).startswith("trial_id:")

        # NUL: escaped in JSON text, anywhere in a body; a backslash before "u0000" is text.
        nul = json.dumps(_rows(1, note="a\x00b"))
        assert "NUL" in _error(master.api("POST", metrics, data=nul))
        assert master.api("POST", metrics, json=_rows(2, note="a\\u0000b")).status_code == 200
        config = "name: x\x00y\nentrypoint: sleep 1\nsearcher: {name: single, metric: loss}\n"
        assert "NUL" in _error(master.api("POST", "/experiments", json={"config": config}))

        # Nesting: of a metric's value, and of a whole body.
        deep: Any = 1
        for _ in range(40):
            deep = {"x": deep}
        assert _error(master.api("POST", metrics, json=_rows(3, deep=deep))) == (
            "metrics[0].metrics: nested deeper than 32 levels")
        body = '{"group": "training", "metrics": ' + "[" * 100_000 + "]" * 100_000 + "}"
        assert _error(master.api("POST", metrics, data=body)) == (
            "the request body is nested too deeply")

        stored = master.get(f"{metrics}?group=training")["metrics"]
        assert [(m["steps_completed"], m["metrics"]) for m in stored] == [
            (2, {"note": "a\\u0000b"}), (MAX_BIG_INTEGER, {"loss": 0.5})]
        assert len(master.get("/experiments")["experiments"]) == 1
