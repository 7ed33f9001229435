"""The zygote on its own, outside any sandbox: it forks a child per request, each with the
pipes the request brought, reports each child's end, passes signals on, refuses a request
it cannot serve without stopping, and ends once the agent's socket closes and its children
have ended."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_hub.exec import zygote
from det_hub.exec.zygote import FORK_FDS
from det_hub.testing import targz

SCRIPT = """
import os, sys, time
print("hello", os.environ["WHO"], os.getcwd(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if os.environ.get("NAP"):
    time.sleep(float(os.environ["NAP"]))
sys.exit(int(os.environ.get("EXIT", "0")))
"""


class Forked:
    """One request's pipes, as the agent and the child's runner hold them."""

    def __init__(self, ctl: socket.socket, workdir: Path, context: Path | None) -> None:
        pipes = {name: os.pipe() for name in FORK_FDS}
        theirs = [pipes["stdout"][1], pipes["stderr"][1], pipes["status"][1],
                  pipes["go"][0], pipes["exit"][1], pipes["signal"][0]]
        workdir.mkdir()
        if context is None:  # nothing to unpack: the script is there already
            (workdir / "train.py").write_text(SCRIPT)
        request = {"dir": str(workdir), "context": str(context) if context else None}
        socket.send_fds(ctl, [json.dumps(request).encode()], theirs)
        for fd in theirs:
            os.close(fd)
        self.out, self.err, self.status = (pipes[n][0] for n in ("stdout", "stderr", "status"))
        self.go, self.exit, self.signal = pipes["go"][1], pipes["exit"][0], pipes["signal"][1]

    def start(self, env: dict[str, str]) -> None:
        os.write(self.go, json.dumps({"env": env, "cpus": []}).encode())
        os.close(self.go)

    def returncode(self, timeout: float = 30) -> int:
        ready, _, _ = select.select([self.exit], [], [], timeout)
        assert ready, "no exit status came"
        with os.fdopen(self.exit, "rb") as f:
            return int(json.loads(f.readline())["returncode"])

    def output(self) -> tuple[str, str]:
        with os.fdopen(self.out, "rb") as out, os.fdopen(self.err, "rb") as err:
            return out.read().decode(), err.read().decode()


def start_zygote(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes],
                                                                 socket.socket]:
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "train.py").write_text(SCRIPT)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "det_hub.exec.zygote", "--ctl-fd", str(theirs.fileno()), "--",
         sys.executable, "train.py"], cwd=tmp_path / "own", pass_fds=[theirs.fileno()],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    theirs.close()
    return proc, ours


@contextlib.contextmanager
def serving(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes],
                                                                   socket.socket]]:
    """:func:`start_zygote`'s zygote and socket; at the end the socket is closed, the zygote
    killed if it is still there, and its output read."""
    proc, ctl = start_zygote(tmp_path, env)
    try:
        yield proc, ctl
    finally:
        ctl.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_each_request_is_a_child_with_its_own_pipes_and_directory(tmp_path: Path) -> None:
    env = {"WHO": "early"}
    proc, ctl = start_zygote(tmp_path, env)
    context = tmp_path / "context.tar"
    context.write_bytes(targz({"train.py": SCRIPT}))
    try:
        # A request with too few pipes is refused; the zygote serves the next one.
        null = os.open(os.devnull, os.O_RDONLY)
        socket.send_fds(ctl, [b'{"dir": "/nowhere"}'], [null])
        os.close(null)
        first = Forked(ctl, tmp_path / "a", context)
        second = Forked(ctl, tmp_path / "b", context)
        first.start({**os.environ, **env, "EXIT": "3"})  # differs: executed afresh
        second.start({**os.environ, **env})  # the same: run in the forked interpreter
        assert first.returncode() == 3 and second.returncode() == 0
        assert first.output() == (f"hello early {tmp_path / 'a'}\n", "to stderr\n")
        assert second.output() == (f"hello early {tmp_path / 'b'}\n", "to stderr\n")
        assert sorted(os.listdir(tmp_path / "b")) == ["train.py"]
    finally:
        ctl.close()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"a fork request came with 1 pipes, not 6" in err


def test_signals_reach_the_child_and_a_lost_runner_kills_it(tmp_path: Path) -> None:
    env = {"WHO": "x", "NAP": "60"}
    with serving(tmp_path, env) as (proc, ctl):
        signalled = Forked(ctl, tmp_path / "a", None)
        orphaned = Forked(ctl, tmp_path / "b", None)
        for child in (signalled, orphaned):
            child.start({**os.environ, **env})
        for child in (signalled, orphaned):  # both up
            ready, _, _ = select.select([child.out], [], [], 30)
            assert ready
        os.write(signalled.signal, bytes([signal.SIGTERM]))
        assert signalled.returncode() == -signal.SIGTERM
        os.close(orphaned.signal)  # its runner is gone
        assert orphaned.returncode() == -signal.SIGKILL
        # With the agent's socket closed and no child left, the zygote ends.
        ctl.close()
        deadline = time.monotonic() + 30
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the zygote did not end"
            time.sleep(0.02)
        assert proc.returncode == 0


def test_a_child_waits_for_its_go_and_ends_without_one(tmp_path: Path) -> None:
    proc, ctl = start_zygote(tmp_path, {"WHO": "x"})
    try:
        child = Forked(ctl, tmp_path / "a", None)
        time.sleep(0.3)
        ready, _, _ = select.select([child.out, child.exit], [], [], 0)
        assert not ready  # nothing ran, nothing ended: it waits
        os.close(child.go)  # dropped: no go
        assert child.returncode() == 125
    finally:
        ctl.close()
    proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_bytecode_is_gathered_beside_its_sources_only_and_planted_where_none_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = sys.implementation.cache_tag
    ran = tmp_path / "ran"
    for rel in ("", "pkg", "data"):
        (ran / rel / "__pycache__").mkdir(parents=True)
    (ran / "helper.py").write_text("x = 1\n")
    (ran / "__pycache__" / f"helper.{tag}.pyc").write_bytes(b"helper")
    (ran / "pkg" / "mod.py").write_text("y = 2\n")
    (ran / "pkg" / "__pycache__" / f"mod.{tag}.pyc").write_bytes(b"mod")
    # No source beside it, another Python's, and a link: none is taken.
    (ran / "__pycache__" / f"gone.{tag}.pyc").write_bytes(b"gone")
    (ran / "__pycache__" / "helper.other-99.pyc").write_bytes(b"other")
    (ran / "big.py").write_text("")
    (ran / "__pycache__" / f"big.{tag}.pyc").symlink_to(ran / "__pycache__" / f"helper.{tag}.pyc")
    found = zygote.harvest_bytecode(str(ran))
    assert found == {f"__pycache__/helper.{tag}.pyc": b"helper",
                     f"pkg/__pycache__/mod.{tag}.pyc": b"mod"}
    # Past its bounds it stops: here after one directory.
    monkeypatch.setattr(zygote, "HARVEST_DIRS", 1)
    assert zygote.harvest_bytecode(str(ran)) == {f"__pycache__/helper.{tag}.pyc": b"helper"}

    fresh = tmp_path / "fresh"
    (fresh / "pkg" / "__pycache__").mkdir(parents=True)
    (fresh / "pkg" / "__pycache__" / f"mod.{tag}.pyc").write_bytes(b"its own")
    zygote.plant_bytecode(found, str(fresh))
    assert (fresh / "__pycache__" / f"helper.{tag}.pyc").read_bytes() == b"helper"
    assert (fresh / "pkg" / "__pycache__" / f"mod.{tag}.pyc").read_bytes() == b"its own"


def test_a_childs_end_and_its_runners_end_seen_together_leave_the_zygote_serving(
        tmp_path: Path) -> None:
    """A dropped child (its go pipe closed, then its runner killed) whose exit and lost
    runner the zygote learns of in one wake-up: the zygote reports the exit once and goes on
    serving the children it has. Ending there, it would take them with it."""
    env = {"WHO": "x", "NAP": "60"}
    with serving(tmp_path, env) as (proc, ctl):
        running = Forked(ctl, tmp_path / "a", None)
        running.start({**os.environ, **env})
        ready, _, _ = select.select([running.out], [], [], 30)
        assert ready
        dropped = Forked(ctl, tmp_path / "b", None)
        time.sleep(0.3)  # forked, waiting for its go
        proc.send_signal(signal.SIGSTOP)
        try:
            os.close(dropped.go)
            time.sleep(0.5)  # the child reads its go pipe's end and exits
            os.close(dropped.signal)  # then its runner is killed
        finally:
            proc.send_signal(signal.SIGCONT)
        assert dropped.returncode() == 125
        time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()[1].decode()
        ready, _, _ = select.select([running.exit], [], [], 0)
        assert not ready, "the running child ended with the dropped one"
        os.write(running.signal, bytes([signal.SIGTERM]))
        assert running.returncode() == -signal.SIGTERM
        ctl.close()
        assert proc.wait(timeout=30) == 0
