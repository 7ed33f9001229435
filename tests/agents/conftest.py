"""Docker engines and the test image for the Docker agent's tests.

``scripts/test-services.sh start`` starts two engines (two agent hosts) and imports the test
image into both; its output sets DET_HUB_TEST_DOCKER_HOST, DET_HUB_TEST_DOCKER_HOST_2 and
DET_HUB_TEST_IMAGE. Without them the tests that need an engine are skipped, except in CI, where
they fail.

The image holds a bare Debian; the test containers get this checkout's Python by read-only bind
mounts at the same paths (det_hub's source, the virtual environment, and the interpreter that
environment was made from when it is not the system's), so ``python`` in a container is
``sys.executable`` here, with torch and det_hub importable.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from det_hub.testing import container_python_mounts as python_mounts
from det_hub.testing import required_env

DOCKER_HOST_ENV = "DET_HUB_TEST_DOCKER_HOST"
DOCKER_HOST_2_ENV = "DET_HUB_TEST_DOCKER_HOST_2"
IMAGE_ENV = "DET_HUB_TEST_IMAGE"


def _required_env(name: str) -> str:
    [value] = required_env(name)
    return value


@pytest.fixture(scope="session")
def docker_host() -> str:
    """The first test engine's address."""
    return _required_env(DOCKER_HOST_ENV)


@pytest.fixture(scope="session")
def docker_host_2() -> str:
    """The second test engine's address: another agent host."""
    return _required_env(DOCKER_HOST_2_ENV)


@pytest.fixture(scope="session")
def test_image() -> str:
    """The offline-built base image, present on both engines."""
    return _required_env(IMAGE_ENV)


AgentFactory = Callable[..., Any]


@pytest.fixture
def make_docker_agent(docker_host: str, test_image: str) -> Iterator[AgentFactory]:
    """``make(host=None, **traits)``: a DockerAgent on a test engine (the first by default).

    Each agent gets an agent id of its own, so the containers a test made are found by their
    ``det_hub.agent`` label and removed afterwards, whatever the test left behind.
    """
    from det_hub.agents.docker import LABEL_AGENT, DockerAgent

    made: list[DockerAgent] = []

    def make(host: str | None = None, **traits: Any) -> DockerAgent:
        traits.setdefault("agent_id", f"test-{uuid.uuid4().hex[:8]}")
        traits.setdefault("default_image", {"cpu": test_image, "cuda": test_image})
        traits.setdefault("python", sys.executable)
        traits.setdefault("mounts", python_mounts())
        traits.setdefault("pull_images", False)
        agent = DockerAgent(docker_host=host or docker_host, **traits)
        made.append(agent)
        return agent

    yield make

    # Cleaned up on the engines themselves rather than through each agent, whose host may be
    # one a test made unreachable.
    from docker.client import DockerClient

    ids = [f"{LABEL_AGENT}={agent.agent_id}" for agent in made]
    for host in {docker_host, os.environ.get(DOCKER_HOST_2_ENV)} - {None}:
        with contextlib.closing(DockerClient(base_url=host, version="auto")) as client:
            for label in ids:
                for c in client.api.containers(all=True, filters={"label": label}):
                    client.api.remove_container(c["Id"], v=True, force=True)


@pytest.fixture
def docker_agent(make_docker_agent: AgentFactory) -> Any:
    """A DockerAgent on the first test engine, with the test image as its default image."""
    return make_docker_agent()


@pytest.fixture
def docker_agent_2(make_docker_agent: AgentFactory, docker_host_2: str) -> Any:
    """A DockerAgent on the second test engine."""
    return make_docker_agent(docker_host_2)
