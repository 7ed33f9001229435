"""The pieces of notebooks, shells and TensorBoards that need no running master: their job ids,
what the API shows of them to whom, the proxy's cookie, and the servers' command lines."""

from __future__ import annotations

import datetime as dt

import pytest

from det_hub.config import ConfigError, parse_task_config
from det_hub.exec.notebook import server_argv
from det_hub.exec.tensorboard import logdir_spec
from det_hub.service.proxy import cookie_value
from det_hub.service.serialize import task_json
from det_hub.service.tasks import task_job_id, task_job_number
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
