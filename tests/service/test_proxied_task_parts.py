"""The pieces of notebooks, shells and TensorBoards that need no running master: their job ids,
what the API shows of them to whom, the proxy's cookie, the servers' command lines, and where
the proxy sends a task's users on a Slurm pool (the node Slurm names, never the task's word)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest

from det_hub.agents.slurm import SlurmAgent, SlurmTaskHandle
from det_hub.agents.slurm_node import parse_node_address
from det_hub.config import ConfigError, parse_task_config
from det_hub.env_names import AGENT_ADDRESS_ENV
from det_hub.exec.notebook import server_argv
from det_hub.exec.tensorboard import logdir_spec
from det_hub.service.auth import Principal
from det_hub.service.bus import EventBus
from det_hub.service.cluster import Allocation, LaunchSpec, Node
from det_hub.service.errors import Conflict, Forbidden
from det_hub.service.proxy import cookie_value
from det_hub.service.serialize import task_json
from det_hub.service.tasks import TaskManager, task_job_id, task_job_number
from det_hub.states import TaskType
from det_hub.store.models import Task


def a_task(kind: TaskType, **fields: object) -> Task:
    return Task(id=7, type=kind.value, owner_id=1, state="RUNNING", description="",
                config={"resources": {"slots": 1}}, resource_pool="default", priority=42,
                created_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), **fields)


@pytest.mark.parametrize(("kind", "job"), [
    (TaskType.COMMAND, "cmd-7"), (TaskType.NOTEBOOK, "notebook-7"),
    (TaskType.SHELL, "shell-7"), (TaskType.TENSORBOARD, "tensorboard-7")])
def test_each_task_type_has_its_job_ids(kind: TaskType, job: str) -> None:
    assert task_job_id(a_task(kind)) == job
    assert task_job_number(job) == 7
    assert kind.proxied == (kind is not TaskType.COMMAND)


def test_job_ids_of_other_kinds_are_not_tasks() -> None:
    for job in ("exp-7", "notebook-", "notebook-x", "cmd7", "7"):
        assert task_job_number(job) is None


def test_only_the_owner_view_carries_what_opens_a_task() -> None:
    notebook = a_task(TaskType.NOTEBOOK, secret="s3cret", proxy_address="127.0.0.1:9")
    owner, other = (task_json(notebook, "ann", with_secret=w) for w in (True, False))
    assert owner["url"] == "/proxy/7/lab?token=s3cret" and "url" not in other
    assert owner["ready"] and owner["proxy_path"] == "/proxy/7/"
    assert "s3cret" not in str(other)

    shell = a_task(TaskType.SHELL, secret="PRIVATE", details={"public_key": "ssh-ed25519 AAA"})
    mine, theirs = (task_json(shell, "ann", with_secret=w) for w in (True, False))
    assert mine["private_key"] == "PRIVATE" and "PRIVATE" not in str(theirs)
    assert theirs["public_key"] == "ssh-ed25519 AAA" and not theirs["ready"]

    board = a_task(TaskType.TENSORBOARD, secret="t", details={"experiment_ids": [3, 4]})
    assert task_json(board, "ann", with_secret=True)["url"] == "/proxy/7/?token=t"
    assert task_json(board, "ann")["experiment_ids"] == [3, 4]
    assert "proxy_path" not in task_json(a_task(TaskType.COMMAND), "ann", with_secret=True)


def test_the_proxy_cookie_is_keyed_by_the_task_token_and_hides_it() -> None:
    assert cookie_value("a") == cookie_value("a") != cookie_value("b")
    assert "a" * 8 not in cookie_value("a" * 8) and len(cookie_value("a")) == 64


def test_task_configs_take_no_entrypoint_and_default_everything() -> None:
    config = parse_task_config("{}")
    assert (config.resources.slots, config.idle_timeout_seconds) == (1, None)
    assert parse_task_config({"idle_timeout": "2m"}).idle_timeout_seconds == 120
    with pytest.raises(ConfigError, match="entrypoint: unknown key"):
        parse_task_config({"entrypoint": "python3 x.py"})


def test_the_notebook_serves_under_the_proxy_path_on_the_agent_address() -> None:
    argv = server_argv("10.1.2.3", 8888, "/proxy/7/")
    assert "--ServerApp.ip=10.1.2.3" in argv and "--ServerApp.port=8888" in argv
    assert "--ServerApp.base_url=/proxy/7/" in argv and "--ServerApp.port_retries=0" in argv
    assert not any("token" in a.lower() for a in argv)  # the token goes by the environment


def test_tensorboard_run_names_are_safe_for_its_logdir_spec() -> None:
    assert logdir_spec({"experiment 3": "/a/b", "x:y,z": "/c"}) == "experiment_3:/a/b,x_y_z:/c"


# ----------------------------------------------- where the proxy sends a task on a Slurm pool

FAKE_SCONTROL = """#!/bin/sh
# Slurm's scontrol as the controller would answer for one running job on node n7.
case "$*" in
  "--oneliner show job 812")
    echo "JobId=812 JobName=det-hub-1.a JobState=$(cat "$(dirname "$0")/state") Reason=None \
NodeList=n[7-8] BatchHost=n7 NumNodes=2" ;;
  "--oneliner show node n7")
    echo "NodeName=n7 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=n7-host State=ALLOCATED" ;;
  *) echo "scontrol: unexpected $*" >&2; exit 1 ;;
esac
"""


@pytest.fixture
def slurm_agent(tmp_path: Path) -> SlurmAgent:
    """A Slurm agent whose scontrol is :data:`FAKE_SCONTROL`, and whose own ``address`` is a
    name nothing resolves (the proxy must never use it for a Slurm job)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    (bin_dir / "state").write_text("RUNNING")
    return SlurmAgent(tmp_path / "state", agent_id="hpc", job_root=str(tmp_path / "jobs"),
                      bin_dir=str(bin_dir), pool_slots=2, address="login-node.invalid")


class _Rows:
    """The store's one method ``_mark_ready`` uses."""

    async def update_task(self, task_id: int, **fields: object) -> Task:
        return a_task(TaskType.NOTEBOOK, **fields)


def test_the_proxy_goes_to_the_node_slurm_names_not_where_the_task_says(
        slurm_agent: SlurmAgent, tmp_path: Path) -> None:
    handle = SlurmTaskHandle(slurm_agent, "1.a", "812", tmp_path / "jobs" / "1.a", None)
    # The task's environment says where it listens: the proxy takes none of its word.
    spec = LaunchSpec(owner="ann", slots=1, argv=[], cluster_info={}, context=None, task_id=7,
                      env={AGENT_ADDRESS_ENV: "169.254.169.254"})
    alloc = Allocation("1.a", spec, "token", nodes=[Node("hpc", (0,), handle)])
    cluster = SimpleNamespace(agents={"hpc": slurm_agent})
    tasks = TaskManager(_Rows(), cluster, None, None, EventBus())  # type: ignore[arg-type]
    tasks.live[7] = a_task(TaskType.NOTEBOOK)
    caller = Principal(allocation=alloc)

    task = asyncio.run(tasks.ready(caller, 7, 8888))
    # The job's batch host n7, and that node's NodeAddr: from Slurm alone.
    assert task.proxy_address == "127.0.0.1:8888"
    assert slurm_agent.task_address(handle) == "127.0.0.1" != slurm_agent.address

    # A job that is not running has no node: the task's word is refused, not taken.
    (tmp_path / "bin" / "state").write_text("PENDING")
    with pytest.raises(Conflict, match="Slurm job 812 of allocation 1.a is PENDING"):
        asyncio.run(tasks.ready(caller, 7, 8888))
    # Another allocation's token cannot speak for the task.
    other = Allocation("2.a", dataclasses.replace(spec, task_id=8), "t2")
    with pytest.raises(Forbidden):
        asyncio.run(tasks.ready(Principal(allocation=other), 7, 8888))


def test_node_addresses_are_read_from_scontrol() -> None:
    line = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=127.0.0.1 NodeHostName=vm "
            "Port=46819 State=IDLE")
    assert parse_node_address(line) == "127.0.0.1"
    assert parse_node_address("NodeName=n1 NodeAddr=(null)") is None
    assert parse_node_address("Node n9 not found") is None
