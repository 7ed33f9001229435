"""The local agent's sandbox: its layout (pure), and what a sandboxed task sees for real."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_local import wait_exit  # this folder's own helper

from det_hub.agents import TaskSpec
from det_hub.agents.local import LocalAgent, SandboxUnavailable
from det_hub.agents.sandbox import (
    Mount,
    SandboxLayout,
    bwrap_argv,
    drop_privileges_argv,
    minimal_paths,
    probe,
)
from det_hub.testing import targz

NOBODY = (65534, 65534)
as_root = os.geteuid() == 0


def ops(argv: list[str]) -> list[tuple[str, ...]]:
    """bwrap's arguments as operations: ``("--ro-bind", src, dest)``, ``("--dir", path)``..."""
    arity = {"--ro-bind": 2, "--bind": 2, "--dev-bind": 2, "--symlink": 2, "--perms": 1,
             "--dir": 1, "--tmpfs": 1, "--dev": 1, "--proc": 1, "--chdir": 1}
    out, i = [], 1
    while argv[i] != "--":
        n = arity.get(argv[i], 0)
        out.append(tuple(argv[i:i + 1 + n]))
        i += 1 + n
    return out


def test_minimal_paths_keeps_the_outermost() -> None:
    assert minimal_paths(["/a/b", "/a", "/c/d/", "relative", "", "/c/d/e", "/ab"]) == [
        "/a", "/ab", "/c/d"]


@given(st.lists(st.sampled_from(["/a", "/a/b", "/a/b/c", "/b", "/b/a", "/ab"]), max_size=6))
def test_minimal_paths_covers_every_path_once(paths: list[str]) -> None:
    kept = minimal_paths(paths)
    for p in paths:
        assert sum(p == k or p.startswith(k + "/") for k in kept) == 1


def test_layout_hides_private_paths_and_shows_only_the_tasks_own(tmp_path: Path) -> None:
    data = tmp_path / "data"
    task = data / "work" / "1.a"
    for d in ("run", "home", "tmp"):
        (task / d).mkdir(parents=True)
    (task / "cluster_info.json").write_text("{}")
    (tmp_path / "det_hub_config.py").write_text("c.X = 'secret'")
    layout = SandboxLayout(
        read_only=["/usr", str(tmp_path)],
        hidden=[str(data), "/not/under/anything", str(tmp_path / "det_hub_config.py")],
        mounts=[Mount(str(task / "run"), writable=True),
                Mount(str(task / "cluster_info.json")),
                Mount("/srv/datasets/mnist", "/data/mnist")],
        tmp=str(task / "tmp"), workdir=str(task / "run"), devices=["/dev/nvidia1"])
    steps = ops(bwrap_argv(layout))
    binds = [s for s in steps if s[0] in ("--ro-bind", "--bind", "--tmpfs", "--dev-bind")]
    assert binds == [
        ("--bind", str(task / "tmp"), "/tmp"),  # first: what lies below /tmp goes on top
        ("--bind", str(task / "tmp"), "/var/tmp"),
        ("--ro-bind", str(tmp_path), str(tmp_path)),
        ("--ro-bind", "/usr", "/usr"),
        ("--tmpfs", str(data)),  # hidden after the read-only view that holds it
        ("--ro-bind", "/dev/null", str(tmp_path / "det_hub_config.py")),
        ("--tmpfs", "/dev/shm"),
        ("--dev-bind", "/dev/nvidia1", "/dev/nvidia1"),
        ("--bind", str(task / "run"), str(task / "run")),
        ("--ro-bind", str(task / "cluster_info.json"), str(task / "cluster_info.json")),
        ("--ro-bind", "/srv/datasets/mnist", "/data/mnist"),
    ]
    # Nothing shown is covered by a later mount of a folder above it, but what is hidden on
    # purpose (the data directory, the config).
    mounted = [(i, s[-1]) for i, s in enumerate(binds)]
    for i, dest in mounted:
        above = [d for j, d in mounted if j > i and d != dest and dest.startswith(d + "/")]
        assert above in ([], [str(data)]), (dest, above)
    made = [s[1] for s in steps if s[0] == "--dir"]
    # The way to the task's directory inside the hidden data dir, and to /data, is made
    # traversable; what the read-only view already shows is not made again.
    ancestors = [str(p) for p in reversed(tmp_path.parents) if str(p) not in ("/", "/tmp")]
    assert made == ["/var", *ancestors, str(data / "work"), str(task), "/data"]
    assert ("--chdir", str(task / "run")) in steps
    # A path under nothing bound needs no hiding.
    assert ("--tmpfs", "/not/under/anything") not in steps


def test_drop_privileges_never_to_root() -> None:
    assert drop_privileges_argv(1000, 1000)[:3] == ["setpriv", "--reuid=1000", "--regid=1000"]
    assert "--no-new-privs" in drop_privileges_argv(1000, 1000)
    with pytest.raises(ValueError, match="root"):
        drop_privileges_argv(0, 1000)


def test_probe_names_a_missing_bwrap() -> None:
    assert "not installed" in (probe("no-such-bwrap-here") or "")


# ---------------------------------------------------------------------- the real sandbox

needs_bwrap = pytest.mark.skipif(probe() is not None, reason=f"no sandbox here: {probe()}")


SEE = """
import json, os
seen = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "env": sorted(os.environ), "cwd": sorted(os.listdir(".")),
        "umask": os.umask(0o22)}
for name, path in json.loads(os.environ["LOOK"]).items():
    try:
        seen[name] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
    except OSError as e:
        seen[name] = type(e).__name__
with open("mine.txt", "w") as f:
    f.write("x")
print(json.dumps(seen))
"""


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A data directory with a secret and another task's directory in it."""
    data = tmp_path / "data"
    (data / "work" / "other.task" / "run").mkdir(parents=True)
    (data / "admin-token").write_text("secret")
    (data / "work" / "other.task" / "run" / "theirs.txt").write_text("theirs")
    return data


@needs_bwrap
def test_a_sandboxed_task_sees_its_own_world_only(private: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ONLY_SECRET", "the master's")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "the hub's")
    agent = LocalAgent(work_root=private / "work", private_paths=[private], use_gpus=False)
    look = {"data": str(private), "token": str(private / "admin-token"),
            "other": str(private / "work" / "other.task" / "run"), "work": str(private / "work")}
    handle = agent.launch(TaskSpec("1.a", ["python3", "see.py"], {"LOOK": json.dumps(look),
                                   "DET_HUB_ALLOCATION_TOKEN": "t"}, targz({"see.py": SEE}),
                                   [0], {"cluster_info.json": "{}"}, run_as=NOBODY))
    status = wait_exit(handle)
    lines = [line.message for line in handle.read_logs()]
    assert status.success, lines
    seen = json.loads(lines[-1])
    assert seen["pids"] == [1, 2]  # bubblewrap's init and the task
    assert seen["uid"] == (NOBODY[0] if as_root else os.geteuid())
    assert seen["token"] == "FileNotFoundError"
    assert seen["other"] == "FileNotFoundError"
    assert seen["work"] == ["1.a"] and seen["data"] == ["work"]
    assert seen["cwd"] == ["see.py"]
    assert seen["umask"] == 0o022
    assert "MASTER_ONLY_SECRET" not in seen["env"] and "JUPYTERHUB_API_TOKEN" not in seen["env"]
    assert set(seen["env"]) <= {"LOOK", "DET_HUB_ALLOCATION_TOKEN", "HOME", "PATH", "LANG",
                                "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONUNBUFFERED",
                                "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
                                "DET_HUB_WHEEL_CACHE"} | {k for k in seen["env"]
                                                         if k.startswith("LC_")}
    written = handle.root / "run" / "mine.txt"
    assert written.read_text() == "x"
    if as_root:
        assert written.stat().st_uid == NOBODY[0]
    # The runner's files are the master's alone; the start file with the token is gone.
    assert not handle.spec_path.exists()
    assert (handle.root.stat().st_mode & 0o777) == 0o700
    agent.reap(handle)


@needs_bwrap
def test_a_refused_context_fails_the_task_with_the_reason(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    agent = LocalAgent(work_root=tmp_path / "work", use_gpus=False)
    handle = agent.launch(TaskSpec("2.a", ["python3", "-c", "print('ran')"], {},
                                   buf.getvalue(), [0], run_as=NOBODY))
    status = wait_exit(handle)
    assert status.exit_code == 126 and "outside.txt" in (status.reason or "")
    assert "ran" not in [line.message for line in handle.read_logs()]
    assert not (tmp_path / "work" / "outside.txt").exists()
    assert not (tmp_path / "work" / "2.a" / "outside.txt").exists()


@needs_bwrap
def test_a_killed_sandboxed_task_reports_the_signal(tmp_path: Path) -> None:
    agent = LocalAgent(work_root=tmp_path / "work", use_gpus=False)
    handle = agent.launch(TaskSpec("3.a", [sys.executable, "-c", "import time; "
                                   "print('up', flush=True); time.sleep(60)"], {}, None, [0],
                                   run_as=NOBODY))
    deadline = time.monotonic() + 20
    while not any(line.message == "up" for line in handle.read_logs()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    agent.kill(handle)
    assert wait_exit(handle).signal == "SIGTERM"


def test_without_a_sandbox_only_admins_tasks_run(tmp_path: Path) -> None:
    agent = LocalAgent(work_root=tmp_path / "work", use_gpus=False, bwrap="no-such-bwrap")
    assert not agent.sandboxed and "not installed" in (agent.isolation_warning() or "")
    with pytest.raises(SandboxUnavailable, match="cannot sandbox tasks"):
        agent.launch(TaskSpec("4.a", ["true"], {}, None, [0], run_as=NOBODY))
    if as_root:
        # As root no task runs unsandboxed, an admin's neither: it would run as root.
        with pytest.raises(SandboxUnavailable, match="install bubblewrap"):
            agent.launch(TaskSpec("5.a", ["true"], {}, None, [0], run_as=NOBODY,
                                  owner_is_admin=True))
    else:
        handle = agent.launch(TaskSpec("5.a", ["true"], {}, None, [0], owner_is_admin=True))
        assert wait_exit(handle).success


@pytest.mark.skipif(not as_root, reason="the refusal is of a master running as root")
def test_no_isolation_is_refused_as_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tasks would run as root"):
        LocalAgent(work_root=tmp_path / "work", use_gpus=False, isolation="none")
