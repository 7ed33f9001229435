"""Fixtures of the service tests: the master as an object in the test's event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from det_hub.agents.local import LocalAgent
from det_hub.service.bus import AllocationExited, EventBus
from det_hub.service.master import Master, Principal
from det_hub.store import Store


@pytest.fixture
async def master(store: Store, tmp_path: Path) -> AsyncIterator[Master]:
    """A started master on the test's store with a local agent; what still runs at the end
    is killed."""
    agent = LocalAgent(work_root=tmp_path / "work", use_gpus=False)
    m = Master(store, agent, master_url="http://127.0.0.1:9", data_dir=tmp_path,
               kill_grace_seconds=2, poll_interval=0.05)
    await m.start()
    yield m
    for run in list(m.experiments.runs.values()):
        await run.kill()
    await m.stop()


@pytest.fixture
async def admin(master: Master, tmp_path: Path) -> Principal:
    """The master's admin, signed in with the admin token."""
    token = await master.users.ensure_admin_token(tmp_path / "admin-token")
    who = await master.users.authenticate(token)
    assert who is not None and who.is_admin
    return who


async def until(what: Callable[[], object], timeout: float = 30) -> None:
    """Wait, in the test's event loop, until ``what()`` is true."""
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def a_trial(store: Store) -> tuple[int, int]:
    """An active trial of alice's experiment in ``store``: its experiment's id and its own."""
    user = await store.create_user("alice")
    experiment = await store.create_experiment(
        name="e", owner_id=user.id, config={}, original_config="", context=None,
        state="ACTIVE", searcher_metric="loss", smaller_is_better=True)
    trial = await store.create_trial(experiment_id=experiment.id, request_id="r", hparams={},
                                     seed=1, state="ACTIVE")
    return experiment.id, trial.id


def exits_on(bus: EventBus) -> list[AllocationExited]:
    """The allocation ends ``bus`` announces, as they come."""
    exits: list[AllocationExited] = []

    async def on_exit(event: AllocationExited) -> None:
        exits.append(event)

    bus.subscribe(AllocationExited, on_exit)
    return exits
