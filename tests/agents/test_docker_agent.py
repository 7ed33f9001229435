"""The Docker agent against real engines (two, standing for two hosts), plus its pure parts.

The engine tests need ``scripts/test-services.sh start`` (see conftest.py); the tests of how
container arguments are built, GPU requests included, and of the parsers need no engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import textwrap
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.types import DeviceRequest, Mount

from det_hub.agents._base import AgentUnreachable, ContainerSpec, ExitStatus, LogLine, TaskSpec
from det_hub.agents.docker import (
    LABEL_AGENT,
    LABEL_ALLOCATION,
    DockerAgent,
    DockerTaskHandle,
    container_create_kwargs,
    container_name,
    exit_status_from_state,
    parse_log_frames,
    parse_timestamp_ns,
)
from det_hub.agents.slots import GpuInfo, SlotInfo, parse_gpu_query
from det_hub.testing import targz

# =============================================================================== helpers


def spec(code: str = "", *, argv: list[str] | None = None, slots: tuple[int, ...] = (0,),
         **kwargs: Any) -> TaskSpec:
    """A task running ``python -c CODE`` (or ``argv``) on ``slots``."""
    return TaskSpec(
        allocation_id=kwargs.pop("allocation_id", f"alloc-{uuid.uuid4().hex[:10]}"),
        argv=argv or ["python", "-c", textwrap.dedent(code)],
        env=kwargs.pop("env", {}),
        context=kwargs.pop("context", None),
        slot_ids=slots,
        **kwargs,
    )


def run_to_end(handle: Any, timeout: float = 30) -> tuple[ExitStatus, list[LogLine]]:
    """Read the task's log while it runs, and once more after it ended."""
    lines: list[LogLine] = []
    deadline = time.monotonic() + timeout
    while (status := handle.exit_status()) is None:
        assert time.monotonic() < deadline, "the task did not end"
        lines += handle.read_logs()
        time.sleep(0.05)
    lines += handle.read_logs()
    return status, lines


def stdout(lines: list[LogLine]) -> list[str]:
    return [line.message for line in lines if line.stdtype == "stdout"]


def wait_for_line(handle: Any, text: str, timeout: float = 30) -> list[LogLine]:
    lines: list[LogLine] = []
    deadline = time.monotonic() + timeout
    while not any(text in line.message for line in lines):
        assert time.monotonic() < deadline, f"no line with {text!r}: {lines}"
        assert handle.exit_status() is None, f"the task ended early: {lines}"
        lines += handle.read_logs()
        time.sleep(0.05)
    return lines


def inspect(agent: DockerAgent, handle: DockerTaskHandle) -> dict[str, Any]:
    result: dict[str, Any] = agent.client().api.inspect_container(handle.container_id)
    return result


# ====================================================================== tasks on one engine


def test_stdout_and_stderr_arrive_apart_in_order_with_timestamps(docker_agent: DockerAgent) -> None:
    before = time.time()
    handle = docker_agent.launch(spec("""
        import sys, time
        for i in range(20):
            print(f"out {i}")
            print(f"err {i}", file=sys.stderr)
            if i % 5 == 4:
                time.sleep(0.2)
    """))
    status, lines = run_to_end(handle)
    after = time.time()

    assert status == ExitStatus(0)
    assert stdout(lines) == [f"out {i}" for i in range(20)]
    assert [line.message for line in lines if line.stdtype == "stderr"] == [
        f"err {i}" for i in range(20)]
    for stream in ("stdout", "stderr"):
        stamps = [line.timestamp for line in lines if line.stdtype == stream]
        assert stamps == sorted(stamps)
        assert before - 1 < stamps[0] and stamps[-1] < after + 1
    # The offset is the last line's time in nanoseconds, and nothing is read twice.
    assert abs(handle.log_offset / 1e9 - max(line.timestamp for line in lines)) < 1e-6
    assert handle.read_logs() == []


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code(docker_agent: DockerAgent, code: int) -> None:
    handle = docker_agent.launch(spec(f"import sys; print('bye'); sys.exit({code})"))
    status, lines = run_to_end(handle)
    assert status == ExitStatus(code)
    assert status.success is (code == 0)
    assert stdout(lines) == ["bye"]
    assert not handle.alive()


def test_kill_ends_the_task_with_sigterm(docker_agent: DockerAgent) -> None:
    handle = docker_agent.launch(spec("import time; print('up'); time.sleep(120)"))
    wait_for_line(handle, "up")
    assert handle.alive()
    docker_agent.kill(handle)
    status, _ = run_to_end(handle, timeout=15)
    assert status == ExitStatus(128 + 15, "SIGTERM")
    assert not handle.alive()
    docker_agent.kill(handle)  # a second kill of an ended task is no error


def test_force_kill_stops_a_task_that_ignores_sigterm(docker_agent: DockerAgent) -> None:
    handle = docker_agent.launch(spec("""
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
        print("up", flush=True)
        time.sleep(120)
    """))
    wait_for_line(handle, "up")
    docker_agent.kill(handle)
    wait_for_line(handle, "ignoring SIGTERM")
    assert handle.alive()
    docker_agent.kill(handle, force=True)
    status, _ = run_to_end(handle, timeout=15)
    assert status == ExitStatus(128 + 9, "SIGKILL")


def test_environment_and_files(docker_agent: DockerAgent) -> None:
    info = {"trial_id": 7, "hparams": {"lr": 0.1}}
    s = spec("""
        import json, os
        print(os.environ["DET_HUB_GREETING"])
        print(json.load(open(os.environ["INFO"]))["hparams"]["lr"])
        print(open(os.environ["NOTE"]).read())
        print(os.environ["PYTHONUNBUFFERED"])
    """, files={"cluster_info.json": json.dumps(info), "notes/readme.txt": "a note"})
    s = TaskSpec(**{**s.__dict__, "env": {
        "DET_HUB_GREETING": "hello from the master",
        "INFO": docker_agent.file_path(s.allocation_id, "cluster_info.json"),
        "NOTE": docker_agent.file_path(s.allocation_id, "notes/readme.txt"),
    }})
    assert docker_agent.file_path(s.allocation_id, "cluster_info.json") == \
        "/run/det_hub/cluster_info.json"
    status, lines = run_to_end(docker_agent.launch(s))
    assert status.success, lines
    assert stdout(lines) == ["hello from the master", "0.1", "a note", "1"]


def test_context_is_unpacked_in_the_working_directory(docker_agent: DockerAgent) -> None:
    context = targz({
        "train.py": "import os, model\nprint(os.getcwd())\nprint(model.NAME)\n"
                    "print(open('data/x.txt').read())\n",
        "model.py": "NAME = 'tiny'\n",
        "data/x.txt": "42",
    })
    status, lines = run_to_end(docker_agent.launch(
        spec(argv=["python3", "train.py"], context=context)))
    assert status.success, lines
    assert stdout(lines) == ["/run/det_hub/run", "tiny", "42"]


def test_bind_mounts_read_only(docker_agent: DockerAgent, tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "dataset.txt").write_text("rows")
    (tmp_path / "rw").mkdir()
    container = ContainerSpec(bind_mounts=[
        {"host_path": str(tmp_path / "ro"), "container_path": "/data", "read_only": True},
        {"host_path": str(tmp_path / "rw"), "container_path": "/out"},
    ])
    status, lines = run_to_end(docker_agent.launch(spec("""
        print(open("/data/dataset.txt").read())
        try:
            open("/data/new.txt", "w")
        except OSError as e:
            print("read-only:", e.errno)
        open("/out/result.txt", "w").write("written")
    """, container=container)))
    assert status.success, lines
    assert stdout(lines) == ["rows", "read-only: 30"]  # EROFS
    assert not (tmp_path / "ro" / "new.txt").exists()
    assert (tmp_path / "rw" / "result.txt").read_text() == "written"


def test_shm_size(docker_agent: DockerAgent) -> None:
    code = "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"
    asked = docker_agent.launch(spec(code, container=ContainerSpec(shm_size=96 << 20)))
    default = docker_agent.launch(spec(code, slots=(1,)))
    for handle, size in ((asked, 96 << 20), (default, docker_agent.shm_size)):
        status, lines = run_to_end(handle)
        assert status.success, lines
        assert stdout(lines) == [str(size)]


def test_cpu_slots_pin_the_container(make_docker_agent: Any) -> None:
    one_core = make_docker_agent()
    assert [s.cpus for s in one_core.slots] == [(0,), (1,)]  # NCPU of the engine host: 2
    code = "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"
    handle = one_core.launch(spec(code, slots=(1,)))
    assert inspect(one_core, handle)["HostConfig"]["CpusetCpus"] == "1"
    status, lines = run_to_end(handle)
    assert status.success and stdout(lines) == ["[1] 1"]

    two_cores = make_docker_agent(cpu_slot_cores=2)
    assert [s.cpus for s in two_cores.slots] == [(0, 1)]
    status, lines = run_to_end(two_cores.launch(spec(code, slots=(0,))))
    assert status.success and stdout(lines) == ["[0, 1] 2"]


def test_labels_and_name(docker_agent: DockerAgent) -> None:
    s = spec("print('x')", slots=(0, 1))
    handle = docker_agent.launch(s)
    attrs = inspect(docker_agent, handle)
    assert attrs["Config"]["Labels"] == {
        LABEL_ALLOCATION: s.allocation_id, LABEL_AGENT: docker_agent.agent_id,
        "det_hub.slots": "0,1"}
    assert attrs["Name"] == "/" + container_name(docker_agent.agent_id, s.allocation_id)
    assert attrs["HostConfig"]["NetworkMode"] == "host"
    assert handle.where == attrs["Id"][:12]
    run_to_end(handle)


def test_reap_and_cleanup_remove_the_container(docker_agent: DockerAgent) -> None:
    api = docker_agent.client().api
    handle = docker_agent.launch(spec("import sys; sys.exit(5)"))
    status, _ = run_to_end(handle)
    docker_agent.reap(handle)
    assert api.containers(all=True, filters={"id": handle.container_id}) == []
    assert handle.exit_status() == status == ExitStatus(5)  # still known after the reap
    assert handle.read_logs() == []

    s = spec("print('left behind')")
    run_to_end(docker_agent.launch(s))
    docker_agent.cleanup(s.allocation_id)
    assert docker_agent.attach(s.allocation_id, 0, None) is None
    docker_agent.cleanup(s.allocation_id)  # nothing left: no error


def test_a_context_that_cannot_be_unpacked_fails_the_task_before_it_runs(
        docker_agent: DockerAgent) -> None:
    # The task unpacks its context itself (det_hub.exec.task_start), as its own user.
    status, lines = run_to_end(docker_agent.launch(spec(
        "print('never')", context=b"this is not a tar archive")))
    assert status.exit_code == 126
    messages = [line.message for line in lines]
    assert "never" not in messages
    assert any("the context cannot be unpacked" in m for m in messages), messages


def test_a_task_runs_as_its_user_and_unpacks_its_context_as_them(
        docker_agent: DockerAgent) -> None:
    code = ("import os; print(os.getuid(), os.getgid(), os.stat('train.py').st_uid, "
            "os.environ['HOME'], os.access(os.environ['HOME'], os.W_OK))")
    status, lines = run_to_end(docker_agent.launch(spec(
        argv=["python3", "train.py"], context=targz({"train.py": code}),
        run_as=(23456, 23457))))
    assert status.success, lines
    assert stdout(lines) == ["23456 23457 23456 /run/det_hub/home True"]


def test_a_failed_launch_leaves_nothing(docker_agent: DockerAgent) -> None:
    api = docker_agent.client().api
    with pytest.raises(ValueError, match=r"no slot\(s\) \[9\]"):
        docker_agent.launch(spec("print('x')", slots=(9,)))
    with pytest.raises(Exception, match="(?i)no such image|not found"):
        docker_agent.launch(spec("print('x')", container=ContainerSpec(
            images={"cpu": "det-hub-test/missing:nope"})))
    assert api.containers(all=True, filters={"label": f"{LABEL_AGENT}={docker_agent.agent_id}"}) == []


# ============================================================== master restart: attach again


def test_attach_from_a_new_agent_resumes_the_log(make_docker_agent: Any) -> None:
    first = make_docker_agent()
    s = spec("""
        import time
        for i in range(40):
            print(f"line {i}", flush=True)
            time.sleep(0.05)
    """)
    handle = first.launch(s)
    seen = wait_for_line(handle, "line 5")
    offset = handle.log_offset

    # A master restart: a new agent object with the same id, only the stored offset to go on.
    second = make_docker_agent(agent_id=first.agent_id)
    again = second.attach(s.allocation_id, offset, None)
    assert again is not None and again.container_id == handle.container_id
    assert again.pid is not None and again.alive()
    status, rest = run_to_end(again)
    assert status == ExitStatus(0)
    assert stdout(seen) + stdout(rest) == [f"line {i}" for i in range(40)]


def test_attach_to_a_finished_task_gives_its_exit_status(make_docker_agent: Any) -> None:
    first = make_docker_agent()
    s = spec("import sys; print('done'); sys.exit(3)")
    run_to_end(first.launch(s))
    handle = make_docker_agent(agent_id=first.agent_id).attach(s.allocation_id, 0, 1234)
    assert handle is not None
    assert handle.exit_status() == ExitStatus(3)
    assert not handle.alive()
    assert stdout(handle.read_logs()) == ["done"]


def test_attach_to_an_unknown_allocation_gives_none(docker_agent: DockerAgent) -> None:
    assert docker_agent.attach("no-such-allocation", 0, None) is None


def test_an_engine_that_does_not_answer(make_docker_agent: Any, tmp_path: Path) -> None:
    agent = make_docker_agent(f"unix://{tmp_path}/no-engine.sock")
    assert agent.slots == []
    with pytest.raises(AgentUnreachable, match="does not answer"):
        agent.check()
    with pytest.raises(AgentUnreachable):
        agent.attach("any", 0, None)
    with pytest.raises(AgentUnreachable):
        agent.launch(spec("print('x')", slots=()))
    handle = DockerTaskHandle(agent, "any", "0123456789abcdef")
    for call in (handle.read_logs, handle.exit_status, handle.alive):
        with pytest.raises(AgentUnreachable):
            call()
    with pytest.raises(AgentUnreachable):
        agent.kill(handle)


class _SocketRelay:
    """A unix socket that relays to the engine's, so a test can take the engine away and back."""

    def __init__(self, path: str, target: str) -> None:
        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(16)
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        os.unlink(self.path)
        for s in self.open:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_an_engine_that_goes_away_and_comes_back(make_docker_agent: Any, docker_host: str,
                                                tmp_path: Path) -> None:
    relay_path = str(tmp_path / "relay.sock")
    relay = _SocketRelay(relay_path, docker_host.removeprefix("unix://"))
    agent = make_docker_agent(f"unix://{relay_path}")
    handle = agent.launch(spec("import time; print('up', flush=True); time.sleep(1)"))
    wait_for_line(handle, "up")

    relay.close()
    for call in (agent.check, handle.read_logs, handle.exit_status, handle.alive,
                 lambda: agent.attach(handle.allocation_id, 0, None)):
        with pytest.raises(AgentUnreachable):
            call()

    relay = _SocketRelay(relay_path, docker_host.removeprefix("unix://"))
    try:
        agent.check()
        status, _ = run_to_end(handle)
        assert status == ExitStatus(0)  # it ran on while the master could not see it
    finally:
        relay.close()


def test_check_answers_and_reports_slots(docker_agent: DockerAgent) -> None:
    docker_agent.check()
    assert docker_agent.kind == "docker"
    assert {s.kind for s in docker_agent.slots} == {"cpu"}


# ======================================================================== two engine hosts


def test_tasks_on_two_hosts_side_by_side(docker_agent: DockerAgent,
                                         docker_agent_2: DockerAgent) -> None:
    long = docker_agent.launch(spec("import time; print('one', flush=True); time.sleep(60)"))
    wait_for_line(long, "one")
    s = spec("print('two')")
    short = docker_agent_2.launch(s)
    status, lines = run_to_end(short)
    assert status.success and stdout(lines) == ["two"]
    assert long.alive()
    # Each host knows only its own containers.
    assert docker_agent.attach(s.allocation_id, 0, None) is None
    assert docker_agent_2.attach(long.allocation_id, 0, None) is None
    docker_agent.kill(long, force=True)
    assert run_to_end(long)[0].signal == "SIGKILL"


# =========================================================================== torch in a task


def test_torch_trains_in_a_container(docker_agent: DockerAgent) -> None:
    handle = docker_agent.launch(spec("""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(32, 4), torch.randn(32, 1)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print(torch.__version__, torch.get_num_threads())
        import determined  # det_hub's alias, from the mounted tree's sitecustomize
        print(determined.core is __import__("det_hub.core").core)
        print(losses[-1] < losses[0])
    """))
    status, lines = run_to_end(handle, timeout=60)
    assert status.success, lines
    version, threads = stdout(lines)[0].split()
    assert version.startswith("2.") and threads == "1"  # OMP_NUM_THREADS of one slot
    assert stdout(lines)[1:] == ["True", "True"]


# ================================================================ pure: no engine needed


GPU_SLOTS = [
    SlotInfo(0, "cuda", device="2", cpus=(0, 1, 2, 3), uuid="GPU-aaaa"),
    SlotInfo(1, "cuda", device="3", cpus=(0, 1, 2, 3)),
]


def test_gpu_container_kwargs() -> None:
    kwargs = container_create_kwargs(spec("x", slots=(0, 1)), GPU_SLOTS, image="img:cuda",
                                     agent_id="gpu-host")
    assert kwargs["device_requests"] == [
        DeviceRequest(device_ids=["GPU-aaaa", "3"], capabilities=[["gpu"]])]
    # Inside the container the runtime numbers the two GPUs it exposes 0 and 1.
    assert kwargs["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "cpuset_cpus" not in kwargs and "OMP_NUM_THREADS" not in kwargs["environment"]
    assert kwargs["image"] == "img:cuda"


def test_cpu_container_kwargs() -> None:
    slots = [SlotInfo(0, "cpu", cpus=(0, 1)), SlotInfo(1, "cpu", cpus=(2, 3))]
    s = spec(argv=["python3", "-m", "det_hub.launch.torch_distributed", "python3", "train.py"],
             slots=(0, 1), env={"PYTHONPATH": "/code", "FOO": "1"},
             container=ContainerSpec(
                 bind_mounts=[{"host_path": "/data", "container_path": "/d", "read_only": True}],
                 shm_size=1 << 30, devices=[{"host_path": "/dev/fuse"}],
                 add_capabilities=["SYS_ADMIN"], drop_capabilities=["NET_RAW"]))
    kwargs = container_create_kwargs(
        s, slots, image="img", agent_id="a1", python="/venv/bin/python", task_dir="/run/t",
        mounts=[{"host_path": "/venv", "container_path": "/venv", "read_only": True}],
        image_path="/usr/bin:/bin", shm_size=4 << 30, site_dir="/venv/site")
    assert kwargs["command"] == ["/venv/bin/python", "-I", "-m", "det_hub.exec.task_start",
                                 "--", "/venv/bin/python", "-m",
                                 "det_hub.launch.torch_distributed", "python3", "train.py"]
    assert kwargs["cpuset_cpus"] == "0,1,2,3"
    env = kwargs["environment"]
    assert env["OMP_NUM_THREADS"] == "4" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert env["PYTHONPATH"] == "/venv/site:/code" and env["FOO"] == "1"
    assert kwargs["working_dir"] == "/run/t/run"
    assert kwargs["shm_size"] == 1 << 30  # the experiment's, over the agent's
    assert kwargs["devices"] == ["/dev/fuse:/dev/fuse:mrw"]
    assert kwargs["cap_add"] == ["SYS_ADMIN"] and kwargs["cap_drop"] == ["NET_RAW"]
    assert kwargs["mounts"] == [
        Mount("/d", "/data", type="bind", read_only=True, propagation="rprivate"),
        Mount("/venv", "/venv", type="bind", read_only=True, propagation="rprivate"),
    ]
    assert "device_requests" not in kwargs
    assert kwargs["init"] is True and kwargs["network_mode"] == "host"


def test_extra_create_kwargs_merge() -> None:
    kwargs = container_create_kwargs(
        spec("x", env={"A": "task"}), [SlotInfo(0, "cpu", cpus=(0,))], image="img",
        agent_id="a", extra={
            "environment": {"A": "admin", "HTTP_PROXY": "http://proxy:3128"},
            "labels": {"team": "vision", LABEL_AGENT: "spoofed"},
            "cap_add": ["SYS_PTRACE"], "mem_limit": "8g", "network_mode": "bridge",
        })
    assert kwargs["environment"]["A"] == "task"
    assert kwargs["environment"]["HTTP_PROXY"] == "http://proxy:3128"
    assert kwargs["labels"]["team"] == "vision" and kwargs["labels"][LABEL_AGENT] == "a"
    assert kwargs["cap_add"] == ["SYS_PTRACE"]
    assert kwargs["mem_limit"] == "8g" and kwargs["network_mode"] == "bridge"
    with pytest.raises(ValueError, match="'command' is set by the agent"):
        container_create_kwargs(spec("x"), [], image="i", agent_id="a", extra={"command": []})


def test_bad_bind_mount_names_the_entry() -> None:
    with pytest.raises(ValueError, match=r"bind_mounts\[1\]: host_path is required"):
        container_create_kwargs(spec("x", container=ContainerSpec(bind_mounts=[
            {"host_path": "/a", "container_path": "/a"}, {"container_path": "/b"}])),
            [], image="i", agent_id="a")


def test_parse_nvidia_smi_output() -> None:
    out = ("0, GPU-5f1c2a9e-0000-1111-2222-333344445555, NVIDIA A100-SXM4-80GB\n"
           "1, GPU-6a2d3b0f-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, rev b\n"
           "\n"
           "WARNING: infoROM is corrupted at gpu 0000:00:04.0\n")
    assert parse_gpu_query(out) == [
        GpuInfo("0", "GPU-5f1c2a9e-0000-1111-2222-333344445555", "NVIDIA A100-SXM4-80GB"),
        GpuInfo("1", "GPU-6a2d3b0f-0000-1111-2222-333344445555", "NVIDIA H100 80GB HBM3, rev b"),
    ]
    assert parse_gpu_query("") == []


def test_explicit_gpus_make_cuda_slots(make_docker_agent: Any) -> None:
    agent = make_docker_agent(gpus=[0, "GPU-abc"])
    assert [(s.kind, s.device, s.uuid) for s in agent.slots] == [
        ("cuda", "0", ""), ("cuda", "GPU-abc", "GPU-abc")]
    assert all(s.cpus == (0, 1) for s in agent.slots)


class _GpuHostClient:
    """Stands in for an engine on a GPU host, which these machines do not have."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, list[str], dict[str, Any]]] = []
        self.images = SimpleNamespace(get=lambda image: SimpleNamespace(attrs={}))
        self.containers = SimpleNamespace(run=self._run)

    def info(self) -> dict[str, Any]:
        return {"NCPU": 8, "Runtimes": {"runc": {}, "nvidia": {}}}

    def _run(self, image: str, command: list[str], **kwargs: Any) -> bytes:
        self.runs.append((image, command, kwargs))
        return b"0, GPU-aaaa, NVIDIA A100\n1, GPU-bbbb, NVIDIA A100\n"


def test_gpus_are_discovered_with_nvidia_smi_in_a_container(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _GpuHostClient()
    monkeypatch.setattr(DockerAgent, "client", lambda self: fake)
    agent = DockerAgent(docker_host="unix:///gpu-host.sock", default_image={"cuda": "img:cuda"})
    [(image, command, kwargs)] = fake.runs
    assert image == "img:cuda"
    assert command == ["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"]
    assert kwargs["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    assert kwargs["remove"] is True
    assert [(s.kind, s.device, s.uuid, s.cpus) for s in agent.slots] == [
        ("cuda", "0", "GPU-aaaa", tuple(range(8))), ("cuda", "1", "GPU-bbbb", tuple(range(8)))]


def test_parse_timestamps_and_log_frames() -> None:
    assert parse_timestamp_ns("2024-03-01T12:00:00.123456789Z") == 1709294400_123456789
    assert parse_timestamp_ns("2024-03-01T12:00:00Z") == 1709294400_000000000
    assert parse_timestamp_ns("2024-03-01T13:00:00.5+01:00") == 1709294400_500000000
    with pytest.raises(ValueError):
        parse_timestamp_ns("yesterday")

    def frame(stream: int, text: str) -> bytes:
        data = text.encode()
        return struct.pack(">BxxxL", stream, len(data)) + data

    data = (frame(1, "2024-03-01T12:00:00.000000001Z hello\n")
            + frame(2, "2024-03-01T12:00:00.000000002Z oops\n")
            + frame(1, "2024-03-01T12:00:01Z ünïcode and spaces \n"))
    assert parse_log_frames(data) == [
        ("stdout", 1709294400_000000001, "hello"),
        ("stderr", 1709294400_000000002, "oops"),
        ("stdout", 1709294401_000000000, "ünïcode and spaces "),
    ]
    assert parse_log_frames(data[:-3]) == parse_log_frames(data)[:2]  # a frame cut short


def test_exit_status_from_state() -> None:
    assert exit_status_from_state({"Status": "running", "ExitCode": 0}) is None
    assert exit_status_from_state({"Status": "exited", "ExitCode": 0}) == ExitStatus(0)
    assert exit_status_from_state({"Status": "exited", "ExitCode": 137, "OOMKilled": True}) == \
        ExitStatus(137, "SIGKILL", "OOMKilled")
    assert exit_status_from_state({"Status": "exited", "ExitCode": 143}) == \
        ExitStatus(143, "SIGTERM")
    assert exit_status_from_state({"Status": "dead", "ExitCode": 128, "Error": "no such file"}) \
        == ExitStatus(128, None, "no such file")


def test_traits_are_documented_and_checked() -> None:
    traits = DockerAgent.class_traits(config=True)
    for name in ("docker_host", "tls_verify", "tls_ca_cert", "tls_client_cert", "tls_client_key",
                 "default_image", "python", "cpu_slot_cores", "gpus", "discover_gpus",
                 "extra_create_kwargs", "mounts", "shm_size"):
        assert traits[name].help, name
    from traitlets import TraitError
    with pytest.raises(TraitError, match="cannot set name"):
        DockerAgent(docker_host="unix:///nonexistent", extra_create_kwargs={"name": "x"})
    with pytest.raises(TraitError, match=r"mounts\[0\]: container_path is required"):
        DockerAgent(docker_host="unix:///nonexistent", mounts=[{"host_path": "/x"}])


def test_tls_config_for_tcp_hosts(tmp_path: Path) -> None:
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("")
    agent = DockerAgent(docker_host="tcp://127.0.0.1:1", timeout=1, tls_verify=True,
                        tls_ca_cert=str(tmp_path / "ca.pem"),
                        tls_client_cert=str(tmp_path / "cert.pem"),
                        tls_client_key=str(tmp_path / "key.pem"))
    tls = agent._tls_config()
    assert tls is not None and tls.verify is True and tls.ca_cert == str(tmp_path / "ca.pem")
    assert tls.cert == (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    assert DockerAgent(docker_host="unix:///x.sock", tls_verify=True)._tls_config() is None
