"""The REST API's edges: bad input, who may do what, concurrency, and the OpenAPI document."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import tarfile
import threading
from typing import Any

import pytest

from det_hub.service.handlers import api_routes
from det_hub.service.openapi import handler_methods, openapi_path
from det_hub.testing import MasterProcess

from .conftest import steps_config

pytestmark = pytest.mark.slow


def tar_b64(*members: tuple[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


GOOD = "name: x\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"


@pytest.mark.parametrize(("config", "context", "status", "expect"), [
    ("name: [unclosed", None, 400, {"error": "the experiment config is invalid"}),
    (GOOD.replace("metric", "metrc"), None, 400,
     {"path": "searcher.metrc", "message": "unknown key; did you mean 'metric'?"}),
    ("name: x\nsearcher: {name: single, metric: loss}\n", None, 400,
     {"path": "entrypoint", "message": "required"}),
    (GOOD + "resources: {slots_per_trial: 64}\n", None, 400,
     {"path": "resources.slots_per_trial"}),
    (GOOD + "max_restarts: -1\n", None, 400, {"path": "max_restarts", "message": "must be >= 0"}),
    (GOOD, tar_b64(("../escape.py", b"x")), 400,
     {"error": "context member '../escape.py' points outside the context"}),
    (GOOD, tar_b64(("/etc/cron.d/x", b"x")), 400,
     {"error": "context member '/etc/cron.d/x' has an absolute path"}),
    (GOOD, "not base64 !!", 400, {"error": "context: not valid base64"}),
    (GOOD, tar_b64(("big.bin", b"\0" * (97 * 1024 * 1024))), 413,
     {"error": "the context is larger than 96 MiB unpacked (MasterApp.context_max_bytes) "
               "(at member 'big.bin')"}),
])
def test_bad_input_is_refused_clearly_and_creates_nothing(
        master: MasterProcess, config: str, context: str | None, status: int,
        expect: dict[str, str]) -> None:
    r = master.api("POST", "/experiments", json={"config": config, "context": context})
    assert r.status_code == status, r.text
    body = r.json()
    if "path" in expect:
        assert any(all(d.get(k) == v or k == "message" and v in d.get(k, "")
                       for k, v in expect.items()) for d in body["details"]), body
    else:
        assert body["error"] == expect["error"]
    listing = master.get("/experiments")
    assert listing["pagination"]["total"] == 0 and listing["experiments"] == []


def test_requests_without_a_valid_token_are_refused(master: MasterProcess) -> None:
    r = master.api("GET", "/experiments", token="wrong")
    assert r.status_code == 401 and r.json()["error"] == "the token is not valid"
    import requests

    bare = requests.get(master.url + "/api/v1/experiments", timeout=10)
    assert bare.status_code == 401 and "Authorization: Bearer" in bare.json()["error"]
    assert requests.get(master.url + "/api/v1/health", timeout=10).json()["status"] == "ok"


def printed_token(master: MasterProcess, eid: int) -> dict[str, Any]:
    """What a trial of ``print_token`` printed: its allocation token, allocation and trial."""
    def found() -> str | None:
        trials = master.trials(eid)
        lines = master.logs(trials[0]["id"]) if trials else []
        return next((line for line in lines if line.startswith("allocation token ")), None)
    return dict(json.loads(master.wait(found).removeprefix("allocation token ")))


def test_a_trial_token_reaches_only_its_own_trial(master: MasterProcess) -> None:
    ids = [master.create_ok(steps_config(f"t{i}", length=100_000, sleep=0.05,
                                         print_token=True)) for i in range(2)]
    a, b = (printed_token(master, eid) for eid in ids)
    tok = a["token"]
    own, other = a["trial_id"], b["trial_id"]
    metric = {"group": "x", "metrics": [{"steps_completed": 1, "metrics": {"v": 1}}]}
    assert master.api("POST", f"/trials/{own}/metrics", token=tok, json=metric).status_code == 200
    assert master.api("GET", f"/trials/{own}", token=tok).status_code == 200
    for method, path, body in [
        ("POST", f"/trials/{other}/metrics", metric),
        ("GET", f"/trials/{other}", None),
        ("GET", f"/trials/{other}/metrics", None),
        ("GET", f"/trials/{other}/logs", None),
        ("GET", f"/trials/{other}/experiment_best_validation", None),
        ("POST", f"/trials/{other}/progress", {"progress": 0.5}),
        ("POST", "/checkpoints", {"uuid": "00000000-0000-4000-8000-000000000000",
                                  "trial_id": other, "steps_completed": 1}),
        ("GET", f"/allocations/{b['allocation_id']}/signals/preemption?timeout_seconds=0", None),
        ("GET", "/experiments", None),
        ("POST", f"/experiments/{ids[1]}/kill", None),
        ("POST", "/experiments", {"config": GOOD}),
        ("GET", "/users", None),
    ]:
        r = master.api(method, path, token=tok, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["error"]
    # Nothing of the other trial changed.
    assert master.get(f"/trials/{other}/metrics?group=x")["metrics"] == []
    for eid in ids:
        master.api("POST", f"/experiments/{eid}/kill")


def test_only_the_owner_or_an_admin_changes_an_experiment(master: MasterProcess) -> None:
    eid = master.create_ok(steps_config(length=100_000, sleep=0.05))
    made = master.api("POST", "/users", json={"username": "bob"})
    assert made.status_code == 201
    bob = made.json()["token"]
    assert master.api("GET", f"/experiments/{eid}", token=bob).status_code == 200
    r = master.api("POST", f"/experiments/{eid}/kill", token=bob)
    assert r.status_code == 403 and "owner" in r.json()["error"]
    assert master.api("POST", "/users", token=bob, json={"username": "eve"}).status_code == 403
    assert master.api("POST", "/users", json={"username": "bob"}).status_code == 409
    assert master.api("POST", f"/experiments/{eid}/kill").status_code == 200
    assert master.wait_state(eid)["state"] == "CANCELED"


def test_many_concurrent_clients_and_writers(master_any_db: MasterProcess) -> None:
    m = master_any_db
    eid = m.create_ok(steps_config(length=100_000, sleep=0.05))
    trial_id = m.wait(lambda: m.trials(eid))[0]["id"]
    errors: list[str] = []

    def writer(n: int) -> None:
        for k in range(25):
            rows = [{"steps_completed": n * 1000 + k * 20 + i, "metrics": {"w": n}}
                    for i in range(20)]
            r = m.api("POST", f"/trials/{trial_id}/metrics", json={"group": "load",
                                                                   "metrics": rows})
            if r.status_code != 200:
                errors.append(r.text)

    def creator(n: int) -> None:
        for _ in range(3):
            r = m.create(steps_config(f"c{n}"), activate=False)
            if r.status_code != 201:
                errors.append(r.text)
            if m.api("GET", "/experiments?limit=5").status_code != 200:
                errors.append("list failed")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    threads += [threading.Thread(target=creator, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    points = m.get(f"/trials/{trial_id}/metrics?group=load")["metrics"]
    assert len(points) == 8 * 25 * 20
    assert len({p["steps_completed"] for p in points}) == len(points)
    listing = m.get("/experiments?limit=1000")
    assert listing["pagination"]["total"] == 1 + 8 * 3
    assert len({e["id"] for e in listing["experiments"]}) == 25
    m.api("POST", f"/experiments/{eid}/kill")


def test_openapi_document_matches_the_handlers(master: MasterProcess) -> None:
    doc = master.get("/openapi.json")
    assert doc["openapi"].startswith("3.")
    expected = {openapi_path(r[0]): set(handler_methods(r[1])) for r in api_routes}
    assert {p: set(ops) for p, ops in doc["paths"].items()} == expected
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"], (method, path)
            assert op["responses"], (method, path)
    # Every GET without path parameters answers with a documented status (a stream's first,
    # read without waiting for its end).
    for path, ops in doc["paths"].items():
        if "get" in ops and "{" not in path:
            with master.api("GET", path[len("/api/v1"):], stream=True) as r:
                assert str(r.status_code) in ops["get"]["responses"], path
    # A path parameter of a real trial works through the documented path.
    eid = master.create_ok(steps_config(length=5))
    master.wait_state(eid)
    trial_id = master.trials(eid)[0]["id"]
    for path, ops in doc["paths"].items():
        if "get" in ops and path.count("{") == 1 and "{trial_id}" in path:
            r = master.api("GET", path[len("/api/v1"):].replace("{trial_id}", str(trial_id)))
            assert r.status_code == 200, (path, r.text)


def test_sigusr1_writes_every_threads_stack_to_the_log_and_the_master_goes_on(
        master: MasterProcess) -> None:
    """What an operator reads when a master does not answer or does not stop."""
    assert master.proc is not None
    before = len(master.log_path.read_text())
    os.kill(master.proc.pid, signal.SIGUSR1)

    def dumped() -> str | None:
        # The log is read while the dump is still being written: only a whole one counts.
        dump = "\n".join(
            line for line in master.log_path.read_text()[before:].splitlines()
            if line.startswith(("Thread 0x", "Current thread 0x")) or "File " in line)
        return dump if "Current thread 0x" in dump and "asyncio" in dump else None

    # Every thread's stack, the signalled one's marked, within 10 s (the log is in the error).
    master.wait(dumped, timeout=10)
    assert "experiments" in master.get("/experiments")
