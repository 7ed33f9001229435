"""Commands on a real master: they run on the cluster's slots as jobs of their own, their
output and exit code come back, they can be killed, an idle one is killed to free its slot,
a priority-preempting pool never preempts one, and a restarted master adopts a running one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from det_hub.testing import MasterProcess, pack

from .test_scheduling import preempting_master, two_slots

pytestmark = pytest.mark.slow

TICKER = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"


def run(master: MasterProcess, config: dict[str, Any], context: Path | None = None) -> int:
    r = master.api("POST", "/commands", json={
        "config": yaml.safe_dump(config), "context": pack(context) if context else None})
    assert r.status_code == 201, r.text
    assert r.json()["command"]["state"] == "QUEUED"
    return int(r.json()["command"]["id"])


def command(master: MasterProcess, cid: int) -> dict[str, Any]:
    return master.get(f"/commands/{cid}")["command"]


def wait_state(master: MasterProcess, cid: int, state: str, timeout: float = 30) -> dict[str, Any]:
    return master.wait(lambda: (c := command(master, cid))["state"] == state and c, timeout)


def messages(master: MasterProcess, cid: int) -> list[str]:
    r = master.api("GET", f"/commands/{cid}/logs")
    return [json.loads(line)["message"] for line in r.text.splitlines()]


def busy_slots(master: MasterProcess) -> list[str]:
    return [s["allocation_id"] for a in master.get("/agents")["agents"] for s in a["slots"]
            if s["allocation_id"]]


def test_a_command_runs_and_its_output_and_exit_code_come_back(
        master: MasterProcess, tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "data.txt").write_text("from the context\n")
    done = master.cli("command", "run", "--context", str(context), "--config",
                      "description=greeting", "sh", "-c",
                      "cat data.txt; echo oops >&2; echo $DET_HUB_TASK_TYPE; exit 3")
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.endswith("from the context") for line in lines), done.stdout
    assert any(line.endswith("oops") for line in lines)
    assert any(line.endswith("COMMAND") for line in lines)
    assert lines[-1].endswith("the command ended: exited with code 3")

    listed = json.loads(master.cli("command", "list", "--json", check=True).stdout)["commands"]
    [cmd] = listed
    assert (cmd["state"], cmd["exit_code"], cmd["description"]) == ("TERMINATED", 3, "greeting")
    assert cmd["entrypoint"][0] == "sh" and cmd["job_id"] == f"cmd-{cmd['id']}"
    assert busy_slots(master) == []

    # Detached, then followed to the end with `command logs -f`; the alias `cmd` works too.
    detached = master.cli("cmd", "run", "-d", "echo", "hello there", check=True)
    cid = int(detached.stdout.strip())
    followed = master.cli("cmd", "logs", "-f", str(cid), check=True)
    assert "hello there" in followed.stdout
    assert command(master, cid)["exit_code"] == 0

    # Bad configs: 400, each problem naming its path; nothing is stored.
    for config, path in (({"entrypoint": ["x"], "resources": {"slots": 0}}, "resources.slots"),
                         ({"entrypoint": "x", "resources": {"resource_pool": "gpu"}},
                          "resources.resource_pool"),
                         ({"entrypoint": "x", "idle_timeout": "5q"}, "idle_timeout"),
                         ({"entrypoint": "x", "resorces": {}}, "resorces"),
                         ({"description": "nothing to run"}, "entrypoint"),
                         ({"entrypoint": "x", "resources": {"slots": 64}}, "resources.slots")):
        r = master.api("POST", "/commands", json={"config": yaml.safe_dump(config)})
        assert r.status_code == 400, (config, r.text)
        assert path in [d["path"] for d in r.json()["details"]], r.text
    assert len(master.get("/commands")["commands"]) == 2


def test_kill_and_the_idle_timeout_stop_a_command_and_free_its_slot(
        master: MasterProcess) -> None:
    sleeper = run(master, {"entrypoint": ["sleep", "300"]})
    running = wait_state(master, sleeper, "RUNNING")
    assert running["ended_at"] is None
    assert [j["job_id"] for j in master.get("/jobs")["jobs"]] == [f"cmd-{sleeper}"]
    assert master.cli("command", "kill", str(sleeper), check=True).stdout.strip() in (
        f"Command {sleeper} is TERMINATING.", f"Command {sleeper} is TERMINATED.")
    killed = wait_state(master, sleeper, "TERMINATED")
    assert killed["exit_reason"] == "killed by its owner or an admin"
    master.wait(lambda: busy_slots(master) == [])

    # Silent after its first line: killed once it has said nothing for 1.5 s.
    quiet = run(master, {"entrypoint": ["sh", "-c", "echo started; sleep 300"],
                         "idle_timeout": 1.5})
    ended = wait_state(master, quiet, "TERMINATED", timeout=20)
    assert ended["exit_reason"] == "killed after 1.5 s idle (no output; its idle_timeout)"
    logs = messages(master, quiet)
    assert logs[0] == "started"
    assert any("its idle_timeout" in m for m in logs)
    master.wait(lambda: busy_slots(master) == [])
    # A chatty command is not idle, however long it runs.
    chatty = run(master, {"entrypoint": ["sh", "-c", TICKER], "idle_timeout": "1s"})
    wait_state(master, chatty, "RUNNING")
    master.wait(lambda: len(messages(master, chatty)) >= 15)
    assert command(master, chatty)["state"] == "RUNNING"
    master.api("POST", f"/commands/{chatty}/kill")
    wait_state(master, chatty, "TERMINATED")


@pytest.fixture
def preempting(tmp_path: Path, sqlite_url: str) -> Iterator[MasterProcess]:
    proc = preempting_master(tmp_path, sqlite_url, timeout=2)
    yield proc
    proc.stop()


def test_a_command_holds_its_slots_and_a_preempting_pool_never_preempts_it(
        preempting: MasterProcess) -> None:
    master = preempting
    cid = run(master, {"entrypoint": ["sh", "-c", TICKER],
                       "resources": {"slots": 2, "priority": 60}})
    wait_state(master, cid, "RUNNING")
    exp = master.create_ok(two_slots("urgent", 10, 5))
    jobs = master.wait(lambda: (js := master.get("/jobs")["jobs"]) and len(js) == 2 and js)
    by_id = {j["job_id"]: j for j in jobs}
    cmd_job, exp_job = by_id[f"cmd-{cid}"], by_id[f"exp-{exp}"]
    assert (cmd_job["type"], cmd_job["preemptible"], cmd_job["state"]) == (
        "COMMAND", False, "SCHEDULED")
    assert (cmd_job["slots_allocated"], cmd_job["task_id"]) == (2, cid)
    assert (exp_job["state"], exp_job["slots_allocated"]) == ("QUEUED", 0)
    # The job queue reorders commands like experiments.
    moved = master.cli("job", "update", f"cmd-{cid}", "--priority", "70", "--json", check=True)
    assert json.loads(moved.stdout)["job"]["priority"] == 70
    assert command(master, cid)["priority"] == 70
    # Well past the pool's 2 s preemption timeout: the command still runs, the trial waits.
    master.wait(lambda: len(messages(master, cid)) >= 25)
    assert command(master, cid)["state"] == "RUNNING"
    assert not any("preempt" in m for m in messages(master, cid))
    assert master.trials(exp)[0]["run_state"] == "QUEUED"
    master.api("POST", f"/commands/{cid}/kill")
    assert master.wait_state(exp)["state"] == "COMPLETED"
    assert command(master, cid)["exit_reason"] == "killed by its owner or an admin"


def test_a_restarted_master_adopts_a_running_command(master: MasterProcess) -> None:
    cid = run(master, {"entrypoint": ["sh", "-c", TICKER]})
    wait_state(master, cid, "RUNNING")
    master.wait(lambda: len(messages(master, cid)) >= 3)
    master.stop()
    master.start()
    assert command(master, cid)["state"] == "RUNNING"
    before = len(messages(master, cid))
    # The same process goes on ticking, and its lines keep coming in order.
    master.wait(lambda: len(messages(master, cid)) >= before + 5)
    ticks = [int(m.split()[1]) for m in messages(master, cid) if m.startswith("tick ")]
    assert ticks == list(range(len(ticks)))
    assert [j["job_id"] for j in master.get("/jobs")["jobs"]] == [f"cmd-{cid}"]
    master.api("POST", f"/commands/{cid}/kill")
    assert wait_state(master, cid, "TERMINATED")["exit_reason"] == \
        "killed by its owner or an admin"
