"""Tasks prepared ahead of their start (a warm interpreter in the task's own sandbox) run as a
fresh start would, serve their own allocation only, and the cluster starts the next queued
trial the moment a slot frees up, without waiting for its next round."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from det_hub.agents import ExitStatus, TaskSpec
from det_hub.agents import local as local_agent
from det_hub.agents.local import LocalAgent, LocalTaskHandle
from det_hub.service.bus import AllocationExited, EventBus
from det_hub.service.cluster import Cluster, LaunchSpec
from det_hub.service.unix_accounts import task_account
from det_hub.states import AllocationState
from det_hub.store import Store
from det_hub.testing import targz

#: Who the tasks run as where the master runs as root (an unprivileged account).
NOBODY = (65534, 65534)
OTHER = (65533, 65533)

#: Says what the task sees, as lines that a cold and a warm start must print alike.
SCRIPT = """
import os, sys
preloaded = "det_hub.core" in sys.modules
env = {k: v for k, v in os.environ.items() if k != "DET_HUB_CLUSTER_INFO"}
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__, __name__)
print("cwd", os.getcwd(), sorted(os.listdir(".")))
print("env", sorted(env.items()))
print("ids", os.getuid(), os.getgid())
print("affinity", sorted(os.sched_getaffinity(0)))
print("info", open(os.environ["DET_HUB_CLUSTER_INFO"]).read())
print("to stderr", file=sys.stderr)
if os.environ.get("RAISE"):
    raise RuntimeError("the task failed")
print("preloaded", preloaded)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def wait_exit(handle: LocalTaskHandle, timeout: float = 30.0) -> ExitStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = handle.exit_status()
        if status is not None:
            return status
        time.sleep(0.02)
    raise AssertionError(f"{handle.allocation_id} did not finish")


def task(allocation_id: str, env: dict[str, str], slot: int, *, run_as: tuple[int, int] = NOBODY,
         argv: tuple[str, ...] = ("python3", "train.py", "--lr", "0.1"),
         info: str = '{"slot": 0}') -> TaskSpec:
    env = {"DET_HUB_ALLOCATION_TOKEN": f"token-of-{allocation_id}",
           "DET_HUB_ALLOCATION_ID": allocation_id,
           "DET_HUB_CLUSTER_INFO": f"/unused/{allocation_id}", **env}
    return TaskSpec(allocation_id, list(argv), env, targz({"train.py": SCRIPT}), [slot],
                    {"cluster_info.json": info}, run_as=run_as)


def with_info(spec: TaskSpec, agent: LocalAgent) -> TaskSpec:
    """The spec with DET_HUB_CLUSTER_INFO naming its real file, as the cluster sets it."""
    env = {**spec.env, "DET_HUB_CLUSTER_INFO": agent.file_path(spec.allocation_id,
                                                               "cluster_info.json")}
    return TaskSpec(spec.allocation_id, spec.argv, env, spec.context, spec.slot_ids,
                    spec.files, run_as=spec.run_as)


def run(agent: LocalAgent, spec: TaskSpec) -> tuple[ExitStatus, list[tuple[str, str]]]:
    handle = agent.launch(with_info(spec, agent))
    status = wait_exit(handle)
    lines = [(line.stdtype, line.message.replace(spec.allocation_id, "ALLOC"))
             for line in handle.read_logs()]
    agent.reap(handle)
    return status, lines


def prepared_and_ready(agent: LocalAgent, spec: TaskSpec, timeout: float = 30.0) -> None:
    """Prepare ``spec`` and wait until its interpreter has done its imports (it blocks on
    the go pipe's read then)."""
    assert agent.prepare(with_info(spec, agent))
    handle = agent._spares[spec.allocation_id].handle
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(_waits_for_go(pid) for pid in _descendants(handle.pid or 0)):
            return
        time.sleep(0.05)
    raise AssertionError(f"{spec.allocation_id}'s prepared interpreter never got ready")


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        kids = [int(p) for p in children.read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in _descendants(k)]


def _waits_for_go(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    # A prepared interpreter, or a child a zygote forked (the zygote itself waits in epoll).
    return (b"det_hub.exec.warm_start" in cmdline or b"det_hub.exec.zygote" in cmdline) \
        and "pipe" in wchan


@pytest.fixture
def agent(tmp_path: Path) -> LocalAgent:
    return LocalAgent(work_root=tmp_path / "work", use_gpus=False, warm_start=True)


@pytest.fixture
def cold_agent(agent: LocalAgent) -> LocalAgent:
    """An agent without warm start on the same work root: every task it runs starts afresh,
    the reference a warm task's lines must equal."""
    return LocalAgent(work_root=agent.work_root, use_gpus=False, warm_start=False)


@pytest.mark.parametrize("extra", [{}, {"EXIT": "3"}, {"RAISE": "1"}],
                         ids=["exit-0", "exit-3", "uncaught"])
def test_a_prepared_task_runs_as_a_fresh_one(agent: LocalAgent, extra: dict[str, str]) -> None:
    slots = [s.id for s in agent.slots]
    cold = task("5.cold", {"MY_VAR": "hi", **extra}, slots[-1])
    warm = task("5.warm", {"MY_VAR": "hi", **extra}, slots[-1])
    # Prepared on the first slot with an outdated cluster info; started on the last.
    prepared_and_ready(agent, task("5.warm", {"MY_VAR": "hi", **extra}, slots[0],
                                   info="outdated"))
    cold_status, cold_lines = run(agent, cold)
    warm_status, warm_lines = run(agent, warm)
    assert warm_status == cold_status
    assert warm_status.exit_code == {"EXIT": 3, "RAISE": 1}.get(next(iter(extra), ""), 0)
    assert (("stdout", "preloaded True") in warm_lines) == (not extra.get("RAISE"))
    assert (("stdout", "preloaded False") in cold_lines) == (not extra.get("RAISE"))

    def same(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return sorted(line for line in lines if not line[1].startswith("preloaded "))

    # argv, sys.path[0], __file__, cwd, environment, user, streams, and a traceback that
    # shows the task's frames only: all as a fresh start has them.
    assert same(warm_lines) == same(cold_lines)
    assert ("stdout", f"affinity {sorted(agent.slots[-1].cpus)}") in warm_lines
    assert ("stdout", 'info {"slot": 0}') in warm_lines
    if extra.get("RAISE"):
        assert ("stderr", "RuntimeError: the task failed") in warm_lines


def test_a_prepared_task_is_killed_as_a_fresh_one(agent: LocalAgent) -> None:
    def sleeper(allocation_id: str) -> TaskSpec:
        return TaskSpec(allocation_id, ["python3", "sleep.py"], {}, targz(
            {"sleep.py": "import time\nprint('up', flush=True)\ntime.sleep(60)\n"}),
            [agent.slots[0].id], {"cluster_info.json": "{}"}, run_as=NOBODY)

    statuses = []
    for spec, warm in ((sleeper("6.cold"), False), (sleeper("6.warm"), True)):
        if warm:
            prepared_and_ready(agent, spec)
        handle = agent.launch(spec)
        deadline = time.monotonic() + 30
        while not handle.read_logs():
            assert time.monotonic() < deadline, "the task never said it was up"
            time.sleep(0.02)
        agent.kill(handle)
        statuses.append(wait_exit(handle))
        agent.reap(handle)
    assert statuses[0] == statuses[1]
    assert statuses[1].signal == "SIGTERM"

#: Leaves work for the interpreter's end: files never closed (by Python and by C), a thread
#: still writing, a daemon thread still reading, an atexit function, output without a
#: newline, and an exit message.
ENDING_SCRIPT = """
import atexit, ctypes, gzip, os, sys, threading, time
notes = open("left-open.txt", "w")
notes.write("written, never closed")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fputs(b"written by C, never closed", ctypes.c_void_p(libc.fopen(b"by-c.txt", b"w")))
packed = gzip.open("left-open.gz", "wt")
packed.write("compressed, never closed")
import gc
gc.freeze()  # the task's own freeze: the files left open are among the frozen objects
def late():
    time.sleep(0.3)
    with open("thread.txt", "w") as f:
        f.write("the thread finished")
threading.Thread(target=late).start()
# A daemon thread waits for an answer that never comes (an HTTP long poll): its response's
# file is locked by the read, and the end must not wait for it.
import http.client, socket
silent = socket.create_server(("127.0.0.1", 0))
def long_poll():
    asking = http.client.HTTPConnection(*silent.getsockname())
    asking.request("GET", "/preemption")
    asking.getresponse()
threading.Thread(target=long_poll, daemon=True).start()
held = silent.accept()
# A proxy whose object is gone (boto3 keeps such): touching it raises ReferenceError.
import weakref
class Gone: pass
dead = weakref.proxy(Gone())
atexit.register(lambda: print("atexit ran after", open("thread.txt").read()))
sys.stdout.write("no newline")
sys.exit(os.environ.get("MESSAGE") or int(os.environ.get("EXIT", "0")))
"""


ENDING_CONTEXT = targz({"end.py": ENDING_SCRIPT})


@pytest.mark.parametrize("how", ["prepared", "forked", "followed"])
@pytest.mark.parametrize("extra", [{}, {"EXIT": "7"}, {"MESSAGE": "stopped: no data"}],
                         ids=["exit-0", "exit-7", "message"])
def test_a_prepared_task_ends_as_a_fresh_one(agent: LocalAgent, cold_agent: LocalAgent,
                                             extra: dict[str, str], how: str) -> None:
    """A warm task skips the interpreter's teardown, and nothing the task can see of an end
    is lost with it: prepared in a sandbox of its own, forked from a zygote as the first
    trial on its slots, or forked to follow that one."""
    ends = []
    if how != "prepared":
        extra = {**extra, "DET_HUB_TRIAL_ID": "12"}
    runs = [("12.cold", cold_agent), ("12.warm", agent)]
    if how == "followed":
        runs.append(("13.warm", agent))
    for name, runner in runs:
        spec = TaskSpec(name, ["python3", "end.py"], extra, ENDING_CONTEXT,
                        [agent.slots[0].id], {"cluster_info.json": "{}"}, run_as=NOBODY)
        warm = runner is agent
        if warm and how == "prepared":
            prepared_and_ready(agent, spec)
        elif name == "13.warm":
            follow_on_ready(agent, agent.slots[0].id)
        handle = runner.launch(spec)
        status = wait_exit(handle)
        lines = sorted((line.stdtype, line.message) for line in handle.read_logs())
        runner.reap(handle)
        forked = handle.root / local_agent.FORKED_TASK_LINK
        run_dir = (Path(os.readlink(forked)) if forked.is_symlink() else handle.root) / "run"
        assert forked.is_symlink() == (warm and how != "prepared")
        # The first trial forked runs in its allocation's directory; a follower in its own.
        assert handle.root.name.startswith("next-") == (name == "13.warm")
        with gzip.open(run_dir / "left-open.gz", "rt") as f:  # a trailer, or it raises
            packed = f.read()
        ends.append((status, lines, (run_dir / "left-open.txt").read_text(), packed,
                     (run_dir / "by-c.txt").read_text()))
    # The same status and output. The files too, but for the warm tasks only: a fresh
    # interpreter whose daemon thread still runs may end without flushing them (here it did).
    assert all(end[:2] == ends[0][:2] for end in ends[1:])
    status, lines, notes, packed, by_c = ends[-1]
    assert status.exit_code == (1 if "MESSAGE" in extra else int(extra.get("EXIT", "0")))
    assert notes == "written, never closed" and packed == "compressed, never closed"
    assert by_c == "written by C, never closed"
    assert ("stdout", "no newlineatexit ran after the thread finished") in lines
    assert (("stderr", "stopped: no data") in lines) == ("MESSAGE" in extra)



def test_a_prepared_interpreter_never_serves_another_task(agent: LocalAgent) -> None:
    mine = task("7.a", {"MY_VAR": "alice's"}, agent.slots[0].id)
    prepared_and_ready(agent, mine)
    spare = agent._spares["7.a"].handle
    # Another allocation does not take it, even with the same command and context.
    status, lines = run(agent, task("7.b", {"MY_VAR": "bob's"}, agent.slots[0].id))
    assert status.exit_code == 0 and ("stdout", "preloaded False") in lines
    assert "7.a" in agent._spares and spare.alive()
    # The prepared task's own allocation with another user (or anything else of its sandbox
    # changed) starts afresh; the prepared interpreter is gone with its directory.
    status, lines = run(agent, task("7.a", {"MY_VAR": "alice's"}, agent.slots[0].id,
                                    run_as=OTHER))
    assert "7.a" not in agent._spares
    assert status.exit_code == 0 and ("stdout", "preloaded False") in lines
    if os.geteuid() == 0:
        assert ("stdout", f"ids {OTHER[0]} {OTHER[1]}") in lines


def test_an_environment_changed_since_preparing_starts_fresh_in_its_own_sandbox(
        agent: LocalAgent) -> None:
    prepared_and_ready(agent, task("8.a", {"MY_VAR": "before"}, agent.slots[0].id))
    status, lines = run(agent, task("8.a", {"MY_VAR": "after"}, agent.slots[0].id))
    assert status.exit_code == 0
    assert ("stdout", "preloaded False") in lines
    env = next(m for s, m in lines if m.startswith("env "))
    assert "('MY_VAR', 'after')" in env and "before" not in env


def test_the_early_environment_holds_no_token_and_a_dropped_task_leaves_nothing(
        agent: LocalAgent) -> None:
    spec = task("9.a", {}, agent.slots[0].id)
    prepared_and_ready(agent, spec)
    handle = agent._spares["9.a"].handle
    waiting = [p for p in _descendants(handle.pid or 0) if _waits_for_go(p)]
    assert waiting
    if os.geteuid() == 0 or os.stat(f"/proc/{waiting[0]}").st_uid == os.geteuid():
        environ = Path(f"/proc/{waiting[0]}/environ").read_bytes()
        assert b"MY_VAR" not in environ and b"token-of-9.a" not in environ
        assert b"DET_HUB_ALLOCATION_TOKEN" not in environ
    agent.discard_prepared("9.a")
    assert not handle.root.exists() and not handle.alive()
    assert "9.a" not in agent._spares


def test_nothing_is_prepared_unless_warm_start_is_on(tmp_path: Path) -> None:
    cold = LocalAgent(work_root=tmp_path / "work", use_gpus=False, warm_start=False)
    assert not cold.prepare(task("11.a", {}, 0, argv=(sys.executable, "t.py")))
    assert not cold._spares and not cold.task_root("11.a").exists()


def test_only_python_entrypoints_are_prepared(agent: LocalAgent) -> None:
    assert not agent.prepare(task("10.a", {}, 0, argv=("bash", "-c", "true")))
    assert not agent.prepare(task("10.b", {}, 0, argv=("python3", "-c", "pass")))
    assert not agent._spares and not agent.task_root("10.a").exists()


async def _until(what: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_freed_slot_starts_the_next_queued_trial_without_waiting_for_a_round(
        sqlite_url: str, tmp_path: Path) -> None:
    """One slot, two trials queued, a cluster whose rounds are 30 s apart: the second trial
    starts (prepared, det_hub.core already imported) as soon as the first one ends."""
    store = await Store.open(sqlite_url)
    user = await store.create_user("alice")
    experiment = await store.create_experiment(
        name="e", owner_id=user.id, config={}, original_config="", context=None,
        state="ACTIVE", searcher_metric="loss", smaller_is_better=True)
    trials = [await store.create_trial(experiment_id=experiment.id, request_id=f"r{i}",
                                       hparams={}, seed=1, state="ACTIVE") for i in range(2)]
    bus = EventBus()
    exits: dict[str, float] = {}

    async def on_exit(event: AllocationExited) -> None:
        exits[event.alloc.id] = time.monotonic()

    bus.subscribe(AllocationExited, on_exit)
    agent = LocalAgent(work_root=tmp_path / "work", use_gpus=False, max_cpu_slots=1,
                       warm_start=True)
    cluster = Cluster(store, agent, bus, poll_interval=30.0, heartbeat_interval=30.0)
    cluster.start()
    script = ("import sys, time\nprint('preloaded', 'det_hub.core' in sys.modules, "
              "time.time(), flush=True)\n")
    try:
        allocs = [await cluster.request(LaunchSpec(
            owner="alice", slots=1, cluster_info={}, context=targz({"t.py": script}), env={},
            argv=["python3", "t.py"], trial_id=t.id, experiment_id=experiment.id,
            run_as=task_account() if os.geteuid() == 0 else None)) for t in trials]
        await _until(lambda: len(exits) == 2)
        logs = {a.id: [line.message for line in await store.get_logs(t.id)]
                for a, t in zip(allocs, trials, strict=True)}
    finally:
        await cluster.stop()
        await store.close()
    first, second = allocs
    # The second trial's process printed long before a round of the loop could have run it.
    [line] = logs[second.id]
    match = re.fullmatch(r"preloaded (True|False) ([0-9.]+)", line)
    assert match, line
    assert match.group(1) == "True"  # it was prepared while the first one ran
    assert exits[second.id] - exits[first.id] < 10.0
    assert second.state == AllocationState.TERMINATED


def follow_on_ready(agent: LocalAgent, slot: int, timeout: float = 30.0) -> LocalTaskHandle:
    """Wait until the task prepared to follow the trial on ``slot`` has done its imports."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spare = agent._follow_ons.get((slot,))
        # A forked task waits in its zygote's sandbox, not under its own runner.
        under = spare and (spare.zygote.handle if spare.zygote else spare.handle)
        if under and any(_waits_for_go(pid) for pid in _descendants(under.pid or 0)):
            return spare.handle
        time.sleep(0.05)
    raise AssertionError(f"no interpreter got ready to follow on slot {slot}")


#: One experiment's context, the same bytes for each of its trials (an archive made again
#: a second later differs in its times).
TRIAL_CONTEXT = targz({"train.py": SCRIPT})


def trial_task(allocation_id: str, trial_id: int, slot: int, *, experiment: str | None = None,
               **kwargs: Any) -> TaskSpec:
    """A trial's task; of experiment ``experiment`` where given, else of :func:`task`'s."""
    spec = task(allocation_id, {"DET_HUB_TRIAL_ID": str(trial_id), "MY_VAR": "hi"}, slot,
                **kwargs)
    if experiment is not None:
        spec = dataclasses.replace(spec, env={**spec.env, "DET_HUB_EXPERIMENT_ID": experiment})
    return dataclasses.replace(spec, context=TRIAL_CONTEXT)


def run_as_trial(agent: LocalAgent, spec: TaskSpec) -> tuple[ExitStatus, list[tuple[str, str]],
                                                               LocalTaskHandle]:
    """Run a trial's task to its end; its lines with its allocation and directory (and its
    trial id) written alike for every trial."""
    handle = agent.launch(with_info(spec, agent))
    status = wait_exit(handle)
    # A forked task's working directory is in its zygote's directory, its home the zygote's.
    forked = handle.root / local_agent.FORKED_TASK_LINK
    zygote = Path(os.readlink(forked)).parent.parent if forked.is_symlink() else None

    def alike(message: str) -> str:
        if zygote is not None:
            message = (message.replace(f"{zygote}/tasks", str(agent.work_root))
                       .replace(f"{zygote}/home", f"{handle.root}/home"))
        return message

    lines = [(line.stdtype, alike(line.message).replace(spec.allocation_id, "ALLOC")
              .replace(handle.root.name, "ALLOC")
              .replace(f"'DET_HUB_TRIAL_ID', '{spec.env['DET_HUB_TRIAL_ID']}'", "TRIAL"))
             for line in handle.read_logs()]
    agent.reap(handle)
    return status, lines, handle


def test_the_next_trial_on_a_slot_starts_from_the_interpreter_prepared_as_the_last_began(
        agent: LocalAgent, cold_agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    first_status, first_lines, _ = run_as_trial(cold_agent, trial_task("21.a", 21, slot))
    # The first trial on the slot: forked from the zygote it starts there, in its own name.
    forked_status, forked_lines, forked = run_as_trial(agent, trial_task("20.a", 20, slot))
    assert forked.root == agent.task_root("20.a") and forked_status == first_status
    ready = follow_on_ready(agent, slot)
    assert ready.root.name.startswith("next-") and ("stdout", "preloaded False") in first_lines
    assert ("stdout", "preloaded True") in forked_lines
    status, lines, second = run_as_trial(agent, trial_task("22.a", 22, slot,
                                                           info='{"trial": 22}'))
    # The prepared interpreter ran it, in the directory it was prepared in; the allocation's
    # own directory name leads there, and the trial read its own id and cluster info.
    assert second.root == ready.root and agent.task_root("22.a").resolve() == ready.root
    assert ("stdout", "preloaded True") in lines and ("stdout", 'info {"trial": 22}') in lines
    env = next(m for _, m in lines if m.startswith("env "))
    assert "TRIAL" in env and "token-of-ALLOC" in env
    assert status == first_status

    def same(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return sorted(line for line in lines
                      if not line[1].startswith(("preloaded ", "info ")))

    # argv, sys.path[0], __file__, cwd, environment, user and streams as a fresh start's.
    assert same(lines) == same(first_lines) == same(forked_lines)
    # A restarted master finds the trial through its allocation's name; its end removes the
    # directory and the link.
    adopted = agent.attach("22.a", 0, second.pid)
    assert adopted is not None and adopted.root == ready.root
    assert adopted.exit_status() == status
    agent.cleanup("22.a")
    assert not ready.root.exists() and not agent.task_root("22.a").is_symlink()
    # The next one is ready again.
    assert follow_on_ready(agent, slot).root != ready.root
    agent.discard_all_prepared()
    assert not agent._follow_ons


@pytest.mark.parametrize("change", ["user", "code", "slots"])
def test_a_prepared_follower_serves_only_the_same_experiments_next_trial(
        agent: LocalAgent, change: str) -> None:
    slot = agent.slots[0].id
    run_as_trial(agent, trial_task("23.a", 23, slot))
    ready = follow_on_ready(agent, slot)
    other = trial_task("24.a", 24, slot, run_as=OTHER if change == "user" else NOBODY)
    if change == "code":
        other = dataclasses.replace(other, context=targz({"train.py": SCRIPT + "\n# v2\n"}))
    elif change == "slots":
        other = dataclasses.replace(other, slot_ids=[s.id for s in agent.slots])
    zygote = zygote_on(agent, slot)
    status, lines, handle = run_as_trial(agent, other)
    assert status.exit_code == 0
    # Not the follower, nor its zygote's: a zygote of its own, retired where it would not
    # fit the slots the trial's experiment then has there.
    assert handle.root == agent.task_root("24.a") and not handle.root.is_symlink()
    assert not str(os.readlink(handle.root / local_agent.FORKED_TASK_LINK)).startswith(
        str(zygote.handle.root))
    # The follower is gone with its directory, and so is the zygote that forked it.
    deadline = time.monotonic() + 10
    while ready.root.exists() or ready.alive() or zygote.handle.root.exists():
        assert time.monotonic() < deadline, "the follower or its zygote outlived their use"
        time.sleep(0.05)
    agent.discard_all_prepared()
    assert not any(p.name.startswith("next-") for p in agent.work_root.iterdir())


@pytest.mark.parametrize("code", ["same", "changed"])
def test_the_users_next_experiment_is_forked_from_the_zygote_with_its_own_code(
        agent: LocalAgent, code: str) -> None:
    """The same user's trial of another experiment, run alike, is forked from the zygote on
    its slots (no interpreter's start): with its own context unpacked, and its own
    experiment's id; the follower prepared for the last experiment's next trial is dropped."""
    slot = agent.slots[0].id
    first = trial_task("25.a", 25, slot, experiment="8")
    status, before, _ = run_as_trial(agent, first)
    assert status.exit_code == 0
    ready = follow_on_ready(agent, slot)
    zygote = zygote_on(agent, slot)
    other = trial_task("26.a", 26, slot, experiment="9")
    if code == "changed":
        other = dataclasses.replace(other, context=targz(
            {"train.py": "print('the second experiment')\n" + SCRIPT}))
    status, lines, handle = run_as_trial(agent, other)
    assert status.exit_code == 0
    assert str(os.readlink(handle.root / local_agent.FORKED_TASK_LINK)).startswith(
        str(zygote.handle.root) + "/tasks/")
    assert zygote_on(agent, slot) is zygote and zygote.handle.alive()
    env = next(m for s, m in lines if m.startswith("env "))
    assert "('DET_HUB_EXPERIMENT_ID', '9')" in env and ("stdout", "preloaded True") in lines
    assert (("stdout", "the second experiment") in lines) == (code == "changed")
    # Its working directory holds its own code, not the archive it was unpacked from.
    cwd = next(m for s, m in lines if m.startswith("cwd "))
    assert "context.tar" not in cwd
    deadline = time.monotonic() + 10
    while ready.root.exists() or ready.alive():
        assert time.monotonic() < deadline, "the last experiment's follower outlived its use"
        time.sleep(0.05)
    agent.discard_all_prepared()


def test_a_follower_nobody_takes_is_dropped_once_its_slots_have_been_free_a_while(
        agent: LocalAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_agent, "FOLLOW_ON_IDLE_S", 0.3)
    slot = agent.slots[0].id
    spec = trial_task("25.a", 25, slot)
    handle = agent.launch(with_info(spec, agent))
    ready = follow_on_ready(agent, slot)
    time.sleep(0.6)  # its slot is taken until its task is reaped: kept
    wait_exit(handle)
    assert ready.alive() and agent._follow_ons
    agent.reap(handle)  # the slot is free from here on
    deadline = time.monotonic() + 10
    while ready.root.exists() or agent._follow_ons:
        assert time.monotonic() < deadline, "the follower was not dropped"
        time.sleep(0.05)
    assert not ready.alive()


def test_only_trials_get_a_follower_and_a_new_agent_removes_the_unused_ones(
        agent: LocalAgent, tmp_path: Path) -> None:
    slot = agent.slots[0].id
    run(agent, task("26.a", {}, slot))  # no trial id: a command, nothing follows it
    time.sleep(0.3)
    assert not agent._follow_ons
    # What a stopped master left: a follower no allocation took, and one an allocation took.
    work = agent.work_root
    for name in ("next-0000", "next-1111"):
        (work / name / "run").mkdir(parents=True)
    os.symlink("next-1111", work / "27.a")
    LocalAgent(work_root=work, use_gpus=False, warm_start=True)
    assert not (work / "next-0000").exists()
    assert (work / "next-1111" / "run").is_dir() and (work / "27.a").is_symlink()


# Zygotes: the task to follow a trial is forked from an interpreter kept on its slots.

def zygote_on(agent: LocalAgent, slot: int) -> local_agent._Zygote:
    zygote = agent._zygotes.get((slot,))
    assert zygote is not None, f"no zygote on slot {slot}"
    return zygote


def _named(pid: int, name: bytes) -> bool:
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_trials_that_follow_each_other_on_a_slot_are_forked_from_one_zygote(
        agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    _, first_lines, first = run_as_trial(agent, trial_task("31.a", 31, slot))
    zygote = zygote_on(agent, slot)
    # The first trial was forked from it too, in its allocation's own directory.
    assert first.root == agent.task_root("31.a")
    assert Path(os.readlink(first.root / local_agent.FORKED_TASK_LINK)).parent.parent == \
        zygote.handle.root
    forked = []
    for n in (32, 33, 34):
        ready = follow_on_ready(agent, slot)
        assert agent._follow_ons[(slot,)].zygote is zygote
        status, lines, handle = run_as_trial(agent, trial_task(f"{n}.a", n, slot,
                                                               info=f'{{"trial": {n}}}'))
        assert handle.root == ready.root and status.exit_code == 0
        assert ("stdout", "preloaded True") in lines
        assert ("stdout", f'info {{"trial": {n}}}') in lines
        # Its own working directory, holding its context and nothing of the trial before.
        assert ("stdout", "cwd " + f"{agent.work_root}/ALLOC/run ['train.py']") in lines
        forked.append([line for line in lines if not line[1].startswith("info ")])
        agent.cleanup(f"{n}.a")
    # Every one from the same zygote, which is still there for the next.
    assert zygote_on(agent, slot) is zygote and zygote.handle.alive()
    # (sorted: a task's standard output and error are two pipes, read in either order)
    first_forked = sorted(line for line in first_lines if not line[1].startswith("info "))
    assert sorted(forked[0]) == sorted(forked[1]) == sorted(forked[2]) == first_forked
    agent.discard_all_prepared()
    deadline = time.monotonic() + 10
    while zygote.handle.root.exists() or zygote.handle.alive():
        assert time.monotonic() < deadline, "the retired zygote did not end"
        time.sleep(0.05)


#: An entry that imports a module of its context, saying whether that module's bytecode was
#: there before, and whether Python took it as it was (it writes it again where it is stale).
BYTECODE_ENTRY = """
import os, sys
pyc = os.path.join("__pycache__", f"helper.{sys.implementation.cache_tag}.pyc")
before = os.stat(pyc).st_mtime_ns if os.path.exists(pyc) else None
import helper
print("bytecode ahead", before is not None, "taken", before == os.stat(pyc).st_mtime_ns,
      "helper says", helper.ANSWER)
"""
BYTECODE_CONTEXT = targz({"train.py": BYTECODE_ENTRY, "helper.py": "ANSWER = 6 * 7\n"})


def test_forked_trials_start_with_the_bytecode_an_earlier_trial_wrote(
        agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    said = []
    for n in (71, 72, 73, 74):
        if n > 71:
            follow_on_ready(agent, slot)
        spec = dataclasses.replace(trial_task(f"{n}.a", n, slot), context=BYTECODE_CONTEXT)
        status, lines, _ = run_as_trial(agent, spec)
        assert status.exit_code == 0, lines
        [line] = [m for kind, m in lines if m.startswith("bytecode ahead")]
        said.append(line)
    # The first two compile helper (the second was forked as the first began, before any
    # bytecode was written); from the third on, each starts with the first one's, and Python
    # takes it as it is.
    assert said == ["bytecode ahead False taken False helper says 42"] * 2 + \
        ["bytecode ahead True taken True helper says 42"] * 2
    agent.discard_all_prepared()


def test_another_experiments_trials_never_start_with_bytecode_of_other_code(
        agent: LocalAgent) -> None:
    """The zygote keeps the bytecode its children wrote by experiment: a trial of the user's
    next experiment, whose helper module differs from the last one's in its text only (the
    same name, size and time), runs its own helper, and starts with the bytecode of its own
    experiment's earlier trials."""
    slot = agent.slots[0].id
    said = []
    contexts = {answer: targz({"train.py": BYTECODE_ENTRY, "helper.py": f"ANSWER = {answer!r}\n"})
                for answer in ("ab", "ba")}
    for n, experiment, answer in ((81, "8", "ab"), (82, "8", "ab"), (83, "8", "ab"),
                                  (84, "9", "ba"), (85, "9", "ba"), (86, "9", "ba")):
        if n > 81:
            follow_on_ready(agent, slot)
        spec = dataclasses.replace(trial_task(f"{n}.a", n, slot, experiment=experiment),
                                   context=contexts[answer])
        status, lines, _ = run_as_trial(agent, spec)
        assert status.exit_code == 0, lines
        [line] = [m for kind, m in lines if m.startswith("bytecode ahead")]
        said.append(line)
    # Each runs its own experiment's helper. The next experiment's first trial compiles it
    # (the last one's bytecode, planted, would be taken as its own: the same size and time),
    # and its last starts with what an earlier trial of its own wrote. (Whether a second trial
    # does depends on whether the first ended before the second was forked.)
    assert [line.rsplit(" says ", 1)[1] for line in said] == ["ab"] * 3 + ["ba"] * 3
    assert said[0] == said[3].replace("ba", "ab") == \
        "bytecode ahead False taken False helper says ab"
    assert said[2] == said[5].replace("ba", "ab") == \
        "bytecode ahead True taken True helper says ab"
    agent.discard_all_prepared()


#: An entry that says whether torch was imported before it ran, then imports it itself.
TORCH_ENTRY = ("import sys\nprint('torch ahead', 'torch' in sys.modules)\n"
               "import torch\nprint('torch', torch.tensor([2.0]).sum().item())\n")
TORCHLESS_ENTRY = "import sys\nprint('torch ahead', 'torch' in sys.modules)\n"


@pytest.mark.parametrize(("argv", "files", "ahead"), [
    (("python3", "train.py"), {"train.py": TORCH_ENTRY}, True),
    (("python3", "-m", "pkg.train"), {"pkg/__init__.py": "", "pkg/train.py": TORCH_ENTRY},
     True),
    (("python3", "train.py"), {"train.py": TORCHLESS_ENTRY}, False),
], ids=["script", "module", "no-torch"])
def test_a_zygote_imports_torch_ahead_of_an_entrypoint_that_imports_it(
        agent: LocalAgent, argv: tuple[str, ...], files: dict[str, str], ahead: bool) -> None:
    pytest.importorskip("torch")
    slot = agent.slots[0].id
    # The zygote's context stays packed: the agent reads the entry's file from the archive.
    spec = dataclasses.replace(trial_task("61.a", 61, slot, argv=argv), context=targz(files))
    status, lines, handle = run_as_trial(agent, spec)
    assert status.exit_code == 0, lines
    assert ("stdout", f"torch ahead {ahead}") in lines
    if ahead:
        assert ("stdout", "torch 2.0") in lines
    zygote = zygote_on(agent, slot)
    assert any(_named(p, b"--preload-torch")
               for p in _descendants(zygote.handle.pid or 0)) == ahead
    assert list((zygote.handle.root / "run").iterdir()) == []
    agent.discard_all_prepared()


SLEEPER = ("import os, subprocess, time\nnap = os.environ.get('NAP', '60')\n"
           "subprocess.Popen(['sleep', nap])\nprint('up', flush=True)\ntime.sleep(float(nap))\n")


def sleeper_trial(allocation_id: str, slot: int, nap: str | None = None) -> TaskSpec:
    """A trial that starts a child and sleeps with it (60 s, or ``nap``: its environment
    then differs from the zygote's, and the forked child executes it afresh)."""
    return TaskSpec(allocation_id, ["python3", "sleep.py"],
                    {"DET_HUB_TRIAL_ID": "41", **({"NAP": nap} if nap else {})},
                    SLEEPER_CONTEXT, [slot], {"cluster_info.json": "{}"}, run_as=NOBODY)


SLEEPER_CONTEXT = targz({"sleep.py": SLEEPER})


def until_up(handle: LocalTaskHandle) -> None:
    deadline = time.monotonic() + 30
    while not any(line.message == "up" for line in handle.read_logs()):
        assert time.monotonic() < deadline, "the task never said it was up"
        time.sleep(0.02)


def sleeps_left(root_pid: int) -> list[int]:
    return [p for p in _descendants(root_pid) if _named(p, b"sleep\x0060")]


@pytest.mark.parametrize("force", [False, True], ids=["SIGTERM", "SIGKILL"])
def test_a_forked_task_is_killed_as_a_fresh_one_with_what_it_started(
        agent: LocalAgent, force: bool) -> None:
    slot = agent.slots[0].id
    statuses = []
    for name in ("41.a", "41.b"):  # started afresh, then forked
        handle = agent.launch(sleeper_trial(name, slot))
        until_up(handle)
        agent.kill(handle, force=force)
        if force:
            deadline = time.monotonic() + 10
            while handle.alive():
                assert time.monotonic() < deadline, "the runner outlived SIGKILL"
                time.sleep(0.02)
            statuses.append(handle.exit_status())
        else:
            statuses.append(wait_exit(handle))
        agent.reap(handle)
        if name == "41.a":
            follow_on_ready(agent, slot)
            zygote = zygote_on(agent, slot)
    # The same end as a fresh start's: SIGTERM's status, or none after SIGKILL.
    assert statuses[0] == statuses[1]
    assert (statuses[1] is None) if force else statuses[1].signal == "SIGTERM"
    # What the task started is gone with it, and the zygote stays for the next trial.
    deadline = time.monotonic() + 10
    while sleeps_left(zygote.handle.pid or 0):
        assert time.monotonic() < deadline, "the task's child outlived it"
        time.sleep(0.05)
    assert zygote.handle.alive()
    agent.discard_all_prepared()


def test_a_forked_task_outlives_the_agent_that_started_it_and_is_adopted(
        agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    spec = dataclasses.replace(trial_task("51.a", 51, slot), argv=["python3", "slow.py"],
                               context=SLOW_CONTEXT)
    run_as_trial(agent, spec)
    follow_on_ready(agent, slot)
    zygote = zygote_on(agent, slot)
    handle = agent.launch(with_info(dataclasses.replace(spec, allocation_id="52.a"), agent))
    until_up(handle)
    # The master stops: its zygotes are retired while one of their trials runs.
    agent.discard_all_prepared()
    later = LocalAgent(work_root=agent.work_root, use_gpus=False, warm_start=True)
    adopted = later.attach("52.a", 0, handle.pid)
    assert adopted is not None and adopted.root == handle.root
    status = wait_exit(adopted)
    assert status.exit_code == 0
    assert [line.message for line in adopted.read_logs()] == ["up", "done"]
    later.cleanup("52.a")
    assert not handle.root.exists() and not later.task_root("52.a").is_symlink()
    # With its last trial ended, the retired zygote ends, and its directory goes.
    deadline = time.monotonic() + 10
    while zygote.handle.alive() or zygote.handle.root.exists():
        assert time.monotonic() < deadline, "the retired zygote did not end"
        time.sleep(0.05)


SLOW_CONTEXT = targz({"slow.py": "import time\nprint('up', flush=True)\ntime.sleep(1.5)\n"
                                 "print('done')\n"})


def test_a_task_whose_zygote_dies_under_it_is_never_read_as_a_success(
        agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    run_as_trial(agent, sleeper_trial("61.a", slot, nap="0"))
    follow_on_ready(agent, slot)
    zygote = zygote_on(agent, slot)
    handle = agent.launch(sleeper_trial("61.b", slot))
    until_up(handle)
    zygote.handle.signal(signal.SIGKILL)  # the zygote's runner and sandbox, all at once
    status = wait_exit(handle)
    assert status.exit_code != 0 and status.signal == "SIGKILL"
    assert status.reason == "the task's zygote ended before it did"
    agent.reap(handle)
    # The next trial there starts afresh, from a new zygote's follower or from scratch.
    status, lines, _ = run_as_trial(agent, trial_task("62.a", 62, slot))
    assert status.exit_code == 0
    agent.discard_all_prepared()


def test_another_task_on_its_slots_retires_the_zygote(agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    run_as_trial(agent, trial_task("71.a", 71, slot))
    ready = follow_on_ready(agent, slot)
    zygote = zygote_on(agent, slot)
    other = dataclasses.replace(trial_task("72.a", 72, slot),
                                context=targz({"train.py": SCRIPT + "\n# another experiment\n"}))
    status, lines, _ = run_as_trial(agent, other)
    assert status.exit_code == 0
    deadline = time.monotonic() + 10
    while zygote.handle.alive() or zygote.handle.root.exists() or ready.root.exists():
        assert time.monotonic() < deadline, "the zygote outlived its slots' new task"
        time.sleep(0.05)
    # The new task's experiment has a zygote of its own there now.
    assert zygote_on(agent, slot) is not zygote
    agent.discard_all_prepared()


def test_a_context_with_a_startup_hook_is_never_forked(agent: LocalAgent) -> None:
    slot = agent.slots[0].id
    context = targz({"train.py": "import os\nprint('hooked', os.environ.get('HOOKED'))\n",
                     "startup-hook.sh": "export HOOKED=$((${HOOKED:-0} + 1))\n"})
    for n in (81, 82):
        spec = dataclasses.replace(trial_task(f"{n}.a", n, slot), context=context)
        status, lines, _ = run_as_trial(agent, spec)
        assert status.exit_code == 0 and ("stdout", "hooked 1") in lines
        spare = agent._follow_ons.get((slot,))
        assert spare is None or spare.zygote is None
        follow_on_ready(agent, slot)
    assert not agent._zygotes
    agent.discard_all_prepared()


def test_a_new_agent_removes_the_zygotes_no_allocation_uses(tmp_path: Path) -> None:
    work = tmp_path / "work"
    for name in ("zygote-00", "zygote-11"):
        (work / name / "tasks" / "next-a" / "run").mkdir(parents=True)
        (work / name / "tasks" / "next-b" / "run").mkdir(parents=True)
    # An allocation a forked task of zygote-11 ran for: its runner's directory and the link.
    (work / "next-b").mkdir()
    os.symlink(work / "zygote-11" / "tasks" / "next-b", work / "next-b" / "task")
    os.symlink("next-b", work / "91.a")
    LocalAgent(work_root=work, use_gpus=False, warm_start=True)
    assert not (work / "zygote-00").exists()
    assert (work / "zygote-11" / "tasks" / "next-b" / "run").is_dir()
    assert not (work / "zygote-11" / "tasks" / "next-a").exists()
