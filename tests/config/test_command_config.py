"""The command config: Determined's keys, defaults, durations, and errors that name the path."""

from __future__ import annotations

import pytest

from det_hub.config import ConfigError, parse_command_config, parse_duration


def test_defaults_and_a_string_entrypoint_split_as_a_shell_would() -> None:
    config = parse_command_config("entrypoint: python3 prep.py --name 'a b'\n")
    assert config.argv() == ["python3", "prep.py", "--name", "a b"]
    assert (config.resources.slots, config.resources.resource_pool,
            config.resources.priority) == (1, "default", None)
    assert config.idle_timeout_seconds is None
    data = config.to_dict()
    assert parse_command_config(data) == config


def test_determined_command_settings_are_read() -> None:
    config = parse_command_config("""
entrypoint: [sh, -c, "echo $A"]
description: prep
resources: {slots: 2, resource_pool: "", priority: 10, shm_size: 4G}
environment:
  image: {cpu: "me/cpu:1", cuda: "me/cuda:1"}
  environment_variables: ["A=1"]
bind_mounts: [{host_path: /data, container_path: /data, read_only: true}]
idle_timeout: 30m
slurm: {gpu_type: a100}
""")
    assert config.argv() == ["sh", "-c", "echo $A"]
    assert config.resources.resource_pool == "default"
    assert config.environment.variables_for("cpu") == {"A": "1"}
    assert config.environment.image_for("cuda") == "me/cuda:1"
    assert config.bind_mounts[0].read_only is True
    assert config.idle_timeout_seconds == 1800


@pytest.mark.parametrize(("value", "seconds"), [
    (90, 90.0), (1.5, 1.5), ("45", 45.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0),
    ("1d", 86400.0), ("1.5 M", 90.0),
])
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "problems"), [
    ("description: x\n", ["entrypoint: required"]),
    ("entrypoint: []\n", ["entrypoint: must not be empty"]),
    ("entrypoint: '   '\n", ["entrypoint: must not be empty"]),
    ("entrypoint: [a, 1]\n", ["entrypoint[1]: must be a string"]),
    ("entrypoint: x\nresources: {slots: 0}\n", ["resources.slots: must be >= 1"]),
    ("entrypoint: x\nresources: {priority: 100, resource_pol: a}\n",
     ["resources.priority: must be <= 99",
      "resources.resource_pol: unknown key; did you mean 'resource_pool'?"]),
    ("entrypoint: x\nidle_timeout: 5q\n",
     ["idle_timeout: '5q' is not a duration such as 90s, 30m, 2h or 1d"]),
    ("entrypoint: x\nidle_timeout: 0\n", ["idle_timeout: must be greater than 0"]),
    ("entrypoint: x\nidle_timeout: true\n",
     ["idle_timeout: must be a number of seconds or a duration such as '30m'"]),
    ("entrypoint: x\nresorces: {}\n", ["resorces: unknown key; did you mean 'resources'?"]),
    ("entrypoint: \"echo 'unclosed\"\n",
     ["entrypoint: cannot be split into arguments: No closing quotation"]),
    ("entrypoint: x\nbind_mounts: [{host_path: data, container_path: /d}]\n",
     ["bind_mounts[0].host_path: must be an absolute path"]),
])
def test_errors_name_the_path(text: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_command_config(text)
    assert [str(p) for p in err.value.problems] == problems
