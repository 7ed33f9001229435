"""The attack suite: a trial of bob's, next to a running trial of alice's, goes after the
master's secrets and alice's work, on every agent kind; every probe fails, and bob's own
metrics and checkpoints still work.

What bob's trial tries (``contexts/probe/probe.py``): reading the admin token, the cookie
secret, the database, the hub's password, alice's task directory and checkpoints; listing the
data directory; reading every ``/proc/*/environ``; finding the master's or the hub's variables
in its own environment (a canary variable is set in the master's environment only); and using
every token it found to make itself an admin and to post a metric into alice's trial.

Where the master runs as root (as in CI), bob is linked to a Unix account of his own and alice
is not, so bob's trial runs as that uid and alice's as ``nobody``. The non-root variant runs the
master as an unprivileged uid, with bubblewrap in an unprivileged user namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det_hub.agents.local import FOLLOW_ON_PREFIX, FORKED_TASK_LINK, ZYGOTE_PREFIX
from det_hub.testing import (
    HubProcess,
    MasterProcess,
    pack,
    remove_agent_containers,
    required_env,
    write_docker_config,
)

PROBE = Path(__file__).parent / "contexts" / "probe"
STEPS = Path(__file__).resolve().parents[1] / "e2e" / "contexts" / "steps"
CANARY = "DET_HUB_TEST_MASTER_CANARY"
#: Bob's own Unix account where the master can switch users.
BOB_UID = 23456
#: The uid a non-root master runs as.
MASTER_UID = 23457
#: Variables a task may have: its own, the system's few, and what the agent and its
#: experiment give it.
ALLOWED_ENV = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "PYTHONUNBUFFERED", "PYTHONPATH",
               "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "TMPDIR", "HOSTNAME"}

Api = Callable[..., requests.Response]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def allowed_variable(name: str) -> bool:
    return name in ALLOWED_ENV or name.startswith(("DET_HUB_", "LC_"))


def victim_experiment() -> dict[str, Any]:
    """Alice's long trial: it checkpoints every 5 batches until it is killed."""
    return {"name": "victim", "entrypoint": "python3 train.py",
            "hyperparameters": {"sleep": 0.05, "report_every": 5, "checkpoint_every": 5},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": 1_000_000}},
            "max_restarts": 0}


def probe_experiment(hparams: dict[str, Any]) -> dict[str, Any]:
    return {"name": "probe", "entrypoint": "python3 probe.py",
            "hyperparameters": {k: {"type": "const", "val": v} for k, v in hparams.items()},
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": 1}},
            "environment": {"environment_variables": ["BOBS_OWN=1"]},
            "max_restarts": 0}


def wait(what: Callable[[], Any], timeout: float, why: str) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {why}")


def create(api: Api, token: str, config: dict[str, Any], context: Path) -> int:
    made = api("POST", "/experiments", token,
               json={"config": yaml.safe_dump(config), "context": pack(context)})
    assert made.status_code == 201, made.text
    return int(made.json()["experiment"]["id"])


def trial_of(api: Api, token: str, eid: int) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        trials = api("GET", f"/experiments/{eid}/trials", token).json()["trials"]
        return trials[0] if trials else None
    return dict(wait(found, 60, f"a trial of experiment {eid}"))


Targets = Callable[[], tuple[dict[str, str], dict[str, str]]]


def attack(api: Api, admin: str, alice: str, bob: str, targets: Targets) -> dict[str, Any]:
    """Alice's trial runs and checkpoints; bob's probe runs beside it, told where alice's
    things are (``targets()``: files to read, directories to list), and completes. Answers
    what the probes returned, with bob's and alice's trials."""
    victim = create(api, alice, victim_experiment(), STEPS)
    alice_trial = trial_of(api, alice, victim)
    wait(lambda: api("GET", f"/trials/{alice_trial['id']}", alice).json()["trial"].get(
        "latest_checkpoint"), 90, "alice's first checkpoint")
    try:
        files, listings = targets()
        # The probes are real: what bob is told to read is there, on the host.
        host_has = {name: os.path.exists(path) for name, path in files.items()}
        eid = create(api, bob, probe_experiment({
            "files": files, "listings": listings, "victim_trial": alice_trial["id"],
            "canaries": [CANARY]}), PROBE)
        done = wait(lambda: (e := api("GET", f"/experiments/{eid}", bob).json()["experiment"])[
            "state"] in ("COMPLETED", "CANCELED", "ERROR") and e, 120, "bob's probe")
        bob_trial = trial_of(api, bob, eid)
        logs = [json.loads(line)["message"] for line in
                api("GET", f"/trials/{bob_trial['id']}/logs", bob).text.splitlines()]
        assert done["state"] == "COMPLETED", logs[-30:]
        [line] = [m for m in logs if m.startswith("PROBES ")]
        probes: dict[str, Any] = json.loads(line.removeprefix("PROBES "))
        probes["host_has"] = host_has
        probes["bob_trial"] = bob_trial
        probes["alice_trial"] = alice_trial
        return probes
    finally:
        api("POST", f"/experiments/{victim}/kill", admin)


def assert_contained(probes: dict[str, Any], api: Api, admin: str, bob: str, *,
                     listing_ok: Callable[[str, list[str]], bool]) -> None:
    """Every probe failed, and bob's own work was stored."""
    assert all(probes["host_has"].values()), probes["host_has"]
    assert {name: r for name, r in probes["files"].items() if r["ok"]} == {}
    for name, result in probes["listings"].items():
        assert not result["ok"] or listing_ok(name, result["value"]), (name, result)
    assert probes["proc"]["tokens"] == []
    # Its own processes only: the sandbox's init, the probe and nothing of anyone else.
    assert len(probes["proc"]["pids"]) <= 4, probes["proc"]
    assert probes["leaked_env"] == []
    assert [k for k in probes["env"] if not allowed_variable(k)] == ["BOBS_OWN"]
    assert probes["used"] == []
    assert probes["own_token_on_victim"] == 403
    # Nothing reached alice's trial or the users.
    victim = api("GET", f"/trials/{probes['alice_trial']['id']}/metrics?group=validation",
                 admin).json()["metrics"]
    assert all(m["metrics"].get("validation_loss") != -999 for m in victim)
    assert "mallory" not in {u["username"] for u in api("GET", "/users", admin).json()["users"]}
    # Bob's own work went through.
    trial_id = probes["bob_trial"]["id"]
    mine = api("GET", f"/trials/{trial_id}/metrics?group=validation", bob).json()["metrics"]
    assert [m["metrics"]["validation_loss"] for m in mine] == [0.5]
    trial = api("GET", f"/trials/{trial_id}", bob).json()["trial"]
    assert trial["state"] == "COMPLETED" and trial["latest_checkpoint"]


def master_files(data: Path) -> dict[str, str]:
    return {"admin_token": str(data / "admin-token"), "cookie_secret": str(data / "cookie-secret"),
            "database": str(data / "det_hub.db")}


def local_listing_ok(data: Path) -> Callable[[str, list[str]], bool]:
    """What bob may see of the data directory on the local agent: his own directories."""
    def ok(name: str, entries: list[str]) -> bool:
        if name == "data":
            return set(entries) <= {"work", "checkpoints", "caches"}
        if name in ("checkpoints", "caches"):
            return entries == ["bob"]
        if name == "work":
            return len(entries) == 1  # his own task's directory
        return False
    return ok


def local_targets(data: Path) -> tuple[dict[str, str], dict[str, str]]:
    """What bob's trial tries to reach of the master's and of alice's running trial: her
    runner's directory (her log), and where her files are: the same directory, or (forked
    from a zygote) her own in the zygote's, whose home and /tmp she uses."""
    alice_dir, alice_files = alice_task_dirs(data)
    files = {**master_files(data), "master_log": str(data / "master.log"),
             "alice_cluster_info": f"{alice_files}/cluster_info.json",
             "alice_train_py": f"{alice_files}/run/train.py",
             "alice_log": f"{alice_dir}/task.log"}
    listings = {"data": str(data), "work": str(data / "work"),
                "checkpoints": str(data / "checkpoints"), "caches": str(data / "caches"),
                "alice_dir": alice_dir, "alice_files": alice_files,
                "alice_checkpoints": str(data / "checkpoints" / "alice")}
    if alice_files != alice_dir:
        zygote = Path(alice_files).parent.parent
        listings.update(alice_zygote=str(zygote), alice_home=str(zygote / "home"),
                        alice_tmp=str(zygote / "tmp"))
    return files, listings


def users(master: MasterProcess) -> tuple[str, str]:
    tokens = []
    for name in ("alice", "bob"):
        made = master.api("POST", "/users", json={"username": name})
        assert made.status_code == 201, made.text
        tokens.append(made.json()["token"])
    return tokens[0], tokens[1]


def master_api(master: MasterProcess) -> Api:
    return lambda method, path, token, **kw: master.api(method, path, token=token, **kw)


def alice_task_dirs(data: Path) -> tuple[str, str]:
    """Alice's task's directories, the only allocation's under work/ before bob's starts:
    its runner's, and where its files are (its ``task`` link's target where a zygote forked
    it; the zygote and a follower are beside them)."""
    def allocations() -> list[Path]:
        return [p for p in (data / "work").iterdir()
                if not p.name.startswith((ZYGOTE_PREFIX, FOLLOW_ON_PREFIX))
                and ((p / FORKED_TASK_LINK).is_symlink() or (p / "run").is_dir())]

    [found] = wait(allocations, 30, "alice's task directory")
    link = found / FORKED_TASK_LINK
    return str(found), str(link.resolve() if link.is_symlink() else found)


def run_local_attack(master: MasterProcess, *, link_bob: bool) -> dict[str, Any]:
    alice, bob = users(master)
    if link_bob:
        linked = master.api("PATCH", "/users/bob", json={"agent_user_group": {
            "agent_uid": BOB_UID, "agent_gid": BOB_UID, "agent_user": "bob",
            "agent_group": "bob"}})
        assert linked.status_code == 200, linked.text
    api = master_api(master)
    data = master.data_dir
    def targets() -> tuple[dict[str, str], dict[str, str]]:
        files, listings = local_targets(data)
        files["master_log"] = str(master.log_path)
        return files, listings

    probes = attack(api, master.token, alice, bob, targets)
    assert_contained(probes, api, master.token, bob, listing_ok=local_listing_ok(data))
    return probes


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CANARY, "the master's own secret")


@needs_root
def test_local_agent_as_root(tmp_path: Path, canary: None) -> None:
    master = MasterProcess(tmp_path / "data", f"sqlite:///{tmp_path / 'data' / 'det_hub.db'}")
    master.start()
    try:
        probes = run_local_attack(master, link_bob=True)
    finally:
        master.stop()
    assert probes["uid"] == BOB_UID and probes["gid"] == BOB_UID
    # Files bob's trial wrote in his checkpoint storage are his.
    [ckpt] = [p for p in (tmp_path / "data" / "checkpoints" / "bob").iterdir()
              if p.name != "tensorboard"]
    assert (ckpt / "state.json").stat().st_uid == BOB_UID


def unprivileged(uid: int) -> list[str]:
    """A command prefix that runs what follows as ``uid`` (no groups, no capabilities).

    Where this Python lives below ``/root`` (a pyenv build), which other accounts cannot
    enter, a private mount namespace shows ``/root`` as an empty 0755 directory holding just
    that build: the unprivileged master can start Python, and sees nothing else of root's.
    """
    drop = f"exec setpriv --reuid={uid} --regid={uid} --clear-groups \"$@\""
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/root/"):
        return ["sh", "-c", drop, "sh"]
    keep = base.split("/")[2]  # /root/<keep>/...
    script = (f"mkdir -p /run/det-hub-keep && mount --bind /root/{keep} /run/det-hub-keep && "
              "mount -t tmpfs -o mode=0755 tmpfs /root && "
              f"mkdir /root/{keep} && mount --move /run/det-hub-keep /root/{keep} && {drop}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


@pytest.fixture
def operator_home() -> Iterator[Path]:
    """A home of the non-root master's account, outside pytest's root-only folders."""
    home = Path(tempfile.mkdtemp(prefix="det-hub-operator-"))
    os.chown(home, MASTER_UID, MASTER_UID)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@needs_root
def test_local_agent_as_a_non_root_master(operator_home: Path, canary: None) -> None:
    home = operator_home
    data = home / "data"
    env = {**os.environ, "HOME": str(home)}
    master = MasterProcess(data, f"sqlite:///{data / 'det_hub.db'}",
                           prefix=unprivileged(MASTER_UID), env=env)
    master.log_path = home / "master.log"
    master.start()
    try:
        assert (data / "admin-token").stat().st_uid == MASTER_UID
        probes = run_local_attack(master, link_bob=False)
    finally:
        master.stop()
    # Unprivileged, the master cannot switch users: the sandbox alone keeps bob in.
    assert probes["uid"] == MASTER_UID


@pytest.fixture
def docker_master(tmp_path: Path, canary: None) -> Iterator[MasterProcess]:
    host, image = required_env("DET_HUB_TEST_DOCKER_HOST", "DET_HUB_TEST_IMAGE")
    config = write_docker_config(tmp_path / "det_hub_config.py", [host], image, ["sec-a"])
    master = MasterProcess(tmp_path / "data", f"sqlite:///{tmp_path / 'data' / 'det_hub.db'}",
                           ["--config", str(config)])
    master.start()
    yield master
    master.stop()
    remove_agent_containers([host], ["sec-a"])


@pytest.mark.slow
def test_docker_agent(docker_master: MasterProcess) -> None:
    master = docker_master
    alice, bob = users(master)
    linked = master.api("PATCH", "/users/bob", json={"agent_user_group": {
        "agent_uid": BOB_UID, "agent_gid": BOB_UID}})
    assert linked.status_code == 200, linked.text
    data = master.data_dir
    api = master_api(master)
    # Task directories live in the containers; the host's data directory is what to go after.
    probes = attack(api, master.token, alice, bob, lambda: (master_files(data), {
        "data": str(data), "checkpoints": str(data / "checkpoints"),
        "alice_checkpoints": str(data / "checkpoints" / "alice")}))
    # The container shows only bob's own directories of the host's data directory.
    assert_contained(probes, api, master.token, bob, listing_ok=local_listing_ok(data))
    assert probes["uid"] == BOB_UID
    [ckpt] = [p for p in (data / "checkpoints" / "bob").iterdir() if p.name != "tensorboard"]
    assert (ckpt / "state.json").stat().st_uid == BOB_UID


@needs_root
def test_det_hub_up(tmp_path: Path, canary: None) -> None:
    if shutil.which("configurable-http-proxy", path=os.pathsep.join(
            [str(Path(sys.executable).parent.parent / "node_modules" / ".bin"),
             os.environ.get("PATH", "")])) is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    data = tmp_path / "hub"
    hub = HubProcess(data)
    try:
        admin, alice, bob = (hub.token(name) for name in ("admin", "alice", "bob"))

        def api(method: str, path: str, token: str, **kw: Any) -> requests.Response:
            return hub.call(method, path, token, **kw)

        def targets() -> tuple[dict[str, str], dict[str, str]]:
            files, listings = local_targets(data)
            del files["master_log"]  # det-hub up logs to up.log
            files.update(hub_password=str(data / "hub-password"),
                         hub_database=str(data / "jupyterhub.sqlite"),
                         hub_cookie_secret=str(data / "jupyterhub_cookie_secret"),
                         hub_config=str(data / "jupyterhub_config.py"),
                         up_log=str(data / "up.log"))
            return files, listings

        probes = attack(api, admin, alice, bob, targets)
        assert_contained(probes, api, admin, bob, listing_ok=local_listing_ok(data))
    finally:
        hub.stop()
