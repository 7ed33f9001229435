"""Secrets at rest: what ``det-hub master`` and ``det-hub up`` keep in their data directory is
the operator's alone (the directory 0700, its files 0600, its folders 0700, made so from the
start), and no token or password is written to their logs."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from det_hub.hub.up import find_proxy
from det_hub.service.access_log import redact
from det_hub.service.data_dir import make_private_dir
from det_hub.store import Store
from det_hub.testing import HubProcess, MasterProcess, pack

STEPS = Path(__file__).resolve().parents[1] / "e2e" / "contexts" / "steps"

#: Folders whose contents are the tasks' and the checkpoints' (laid out and owned elsewhere):
#: only the folder itself is checked.
OPAQUE = ("work", "checkpoints", "caches")


def _checkpointing_experiment(name: str) -> dict[str, object]:
    """One trial of four batches that checkpoints twice into the master's default storage."""
    return {
        "name": name, "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.0, "report_every": 2, "checkpoint_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 4}},
        "max_restarts": 0,
    }


def modes(data: Path) -> dict[str, int]:
    """The permission bits of the data directory (``"."``) and of everything in it, by path
    relative to it; the contents of :data:`OPAQUE` folders are left out."""
    found = {".": stat.S_IMODE(data.stat().st_mode)}
    for root, dirs, files in os.walk(data):
        here = Path(root)
        for name in [*dirs, *files]:
            found[str((here / name).relative_to(data))] = stat.S_IMODE(
                (here / name).lstat().st_mode)
        if here == data:
            dirs[:] = [d for d in dirs if d not in OPAQUE]
    return found


def not_private(data: Path) -> dict[str, str]:
    """What under ``data`` is not 0700 (folders) or 0600 (files): path -> mode."""
    wrong = {}
    for rel, mode in modes(data).items():
        is_dir = (data / rel).is_dir()
        if mode != (0o700 if is_dir else 0o600):
            wrong[rel + ("/" if is_dir else "")] = f"{mode:04o}"
    return wrong


def umask_of(pid: int) -> int:
    """A running process's umask, from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError(f"no Umask line for process {pid}")


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from the parent links in ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat_line.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that makes files readable by all (0022), as a login shell's often is: what is
    private then is private by the mode it was made with."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.usefixtures("open_umask")
async def test_the_sqlite_store_and_its_wal_files_are_made_private(tmp_path: Path) -> None:
    db = tmp_path / "new" / "det_hub.db"
    store = await Store.open(f"sqlite:///{db}")
    try:
        await store.create_user("someone")
        made = {p.name: f"{stat.S_IMODE(p.stat().st_mode):04o}" for p in db.parent.iterdir()}
    finally:
        await store.close()
    assert made == {"det_hub.db": "0600", "det_hub.db-wal": "0600", "det_hub.db-shm": "0600"}
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


@pytest.mark.usefixtures("open_umask")
def test_make_private_dir_makes_and_tightens(tmp_path: Path) -> None:
    fresh = tmp_path / "a" / "data"
    assert make_private_dir(fresh) == []
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700

    old = tmp_path / "old"
    (old / "work" / "task").mkdir(parents=True)
    (old / "work" / "task" / "theirs").write_text("")
    (old / "admin-token").write_text("x")
    (old / "kept").write_text("")
    (old / "kept").chmod(0o600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (old / "link").symlink_to(elsewhere)
    assert make_private_dir(old) == [f"{old} (was 0755)", "admin-token (was 0644)",
                                     "work (was 0755)"]
    mode = {str(p.relative_to(old)): f"{stat.S_IMODE(p.lstat().st_mode):04o}"
            for p in [old, *old.rglob("*")]}
    # Below the entries of the data directory, modes are their owners' business.
    assert mode == {".": "0700", "admin-token": "0600", "kept": "0600", "link": "0777",
                    "work": "0700", "work/task": "0755", "work/task/theirs": "0644"}
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755  # a link is not followed
    assert make_private_dir(old) == []


def test_the_access_log_leaves_tokens_out_of_uris() -> None:
    assert redact("/proxy/5/lab?token=abc") == "/proxy/5/lab?token=[secret]"
    assert redact("/p?x=1&Token=abc&y=2#f") == "/p?x=1&Token=[secret]&y=2#f"
    assert redact("/p?mytoken=abc&token_hint=1") == "/p?mytoken=abc&token_hint=1"
    assert redact("/api/v1/health") == "/api/v1/health"


@pytest.fixture
def master(tmp_path: Path, open_umask: None) -> Iterator[MasterProcess]:
    """A master not yet started; it inherits a umask of 0022, and must make its own."""
    data = tmp_path / "data"
    proc = MasterProcess(data, f"sqlite:///{data / 'det_hub.db'}")
    proc.default_context = STEPS
    yield proc
    proc.stop()


def test_the_master_keeps_its_data_private_and_logs_where_the_token_is(
        master: MasterProcess) -> None:
    master.start()
    assert master.proc is not None and umask_of(master.proc.pid) == 0o077
    eid = master.create_ok(_checkpointing_experiment("modes"))
    assert master.wait_state(eid)["state"] == "COMPLETED"
    [trial] = master.trials(eid)
    assert any(line.startswith("checkpoint ") for line in master.logs(trial["id"]))

    data = master.data_dir
    found = modes(data)
    for name in ("det_hub.db", "det_hub.db-wal", "det_hub.db-shm", "admin-token",
                 "cookie-secret", "master.log", "work", "checkpoints"):
        assert name in found, sorted(found)
    assert list((data / "work").iterdir()), "the trial had no task directory"
    assert list((data / "checkpoints").iterdir()), "the trial kept no checkpoint"
    assert not_private(data) == {}

    # A failed request's access log line names its URI: a task token in the query stays out.
    refused = requests.get(f"{master.url}/proxy/999/lab?a=1&token=not-logged-42", timeout=10)
    assert refused.status_code >= 400
    master.wait(lambda: "/proxy/999/lab" in master.log_path.read_text(), 10)

    token = (data / "admin-token").read_text().strip()
    log = master.log_path.read_text()
    assert token and token not in log
    assert "not-logged-42" not in log and "/proxy/999/lab?a=1&token=[secret]" in log
    assert f"admin token in {data / 'admin-token'} (mode 0600)" in log
    assert "DET_HUB_TOKEN" not in log


def test_the_master_makes_its_data_directory_private(master: MasterProcess,
                                                     tmp_path: Path) -> None:
    # The log outside, so that nothing but the master makes the data directory.
    master.log_path = tmp_path / "master.log"
    assert not master.data_dir.exists()
    master.start()
    assert stat.S_IMODE(master.data_dir.stat().st_mode) == 0o700
    assert not_private(master.data_dir) == {}
    assert "made private" not in master.log_path.read_text()


def test_an_older_data_directory_is_tightened_at_start(master: MasterProcess) -> None:
    data = master.data_dir
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # whatever this process's umask
    (data / "work").mkdir(mode=0o755)
    (data / "work").chmod(0o755)
    for name, text in (("admin-token", "from-an-older-version\n"), ("master.log", "old\n"),
                       ("det_hub.db", "")):
        (data / name).write_text(text)
        (data / name).chmod(0o644)
    master.start()
    assert not_private(data) == {}
    log = master.log_path.read_text()
    assert f"data directory {data} was readable by other accounts; made private:" in log
    for name in ("admin-token (was 0644)", "work (was 0755)", f"{data} (was 0755)"):
        assert name in log
    # The stale token was replaced, in the file it was in.
    assert master.token != "from-an-older-version" and master.token not in log


@pytest.mark.usefixtures("open_umask")
def test_det_hub_up_keeps_its_data_private_and_logs_no_secret(tmp_path: Path) -> None:
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    data = tmp_path / "hub"
    hub = HubProcess(data)
    try:
        # det-hub up, the hub, its proxy and the master all make their files private.
        below = descendants(hub.proc.pid)
        assert len(below) >= 3, below
        assert {pid: umask_of(pid) for pid in [hub.proc.pid, *below]} == dict.fromkeys(
            [hub.proc.pid, *below], 0o077)
        masters = [pid for pid in below
                   if b"det_hub.cli.main\0master\0" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(masters) == 1, masters
        service_token = environ_of(masters[0])["JUPYTERHUB_API_TOKEN"]

        alice = hub.token("alice")
        made = hub.call("POST", "/experiments", alice, json={
            "config": yaml.safe_dump(_checkpointing_experiment("up modes")),
            "context": pack(STEPS)})
        assert made.status_code == 201, made.text
        eid = made.json()["experiment"]["id"]
        hub.wait(lambda: hub.call("GET", f"/experiments/{eid}", alice).json()["experiment"][
            "state"] in ("COMPLETED", "CANCELED", "ERROR"), 120)
        assert hub.call("GET", f"/experiments/{eid}", alice).json()["experiment"][
            "state"] == "COMPLETED"

        found = modes(data)
        for name in ("jupyterhub_config.py", "hub-password", "jupyterhub.sqlite",
                     "jupyterhub_cookie_secret", "det_hub.db", "admin-token", "cookie-secret",
                     "up.log", "work", "checkpoints"):
            assert name in found, sorted(found)
        assert not_private(data) == {}

        log = hub.log.read_text()
        kept = {"admin token": (data / "admin-token").read_text().strip(),
                   "hub password": hub.password, "service token": service_token,
                   "alice's token": alice}
        assert all(kept.values())
        assert [what for what, value in kept.items() if value in log] == []
        assert f"admin token in {data / 'admin-token'} (mode 0600)" in log
        assert f"with the password in {data / 'hub-password'}" in log
    finally:
        hub.stop()
