"""The cluster's small pure parts: fitting rules, the job queue's order, container settings;
and an allocation's end outliving a database outage."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import a_trial, exits_on, until

from det_hub.agents.local import LocalAgent
from det_hub.config import parse_experiment_config
from det_hub.config.resources import parse_size
from det_hub.service.bus import EventBus
from det_hub.service.cluster import (
    Cluster,
    LaunchSpec,
    can_ever_fit,
    position_before,
    rendezvous_port,
)
from det_hub.service.launch import container_spec
from det_hub.service.unix_accounts import task_account
from det_hub.states import AllocationState
from det_hub.storage import CONTAINER_SHARED_FS, storage_in_container
from det_hub.store import Store, StoreUnavailable


@pytest.mark.parametrize(("sizes", "slots", "fits"), [
    ([8], 8, True),
    ([8], 9, False),
    ([4, 4], 8, True),       # two hosts, four each
    ([4, 4], 6, True),       # two hosts, three each
    ([4, 4], 5, False),      # five does not split evenly over two hosts with room
    ([8, 2], 10, False),     # 5 + 5 needs two hosts with five
    ([2, 2, 2], 6, True),
    ([], 1, False),
])
def test_can_ever_fit_on_one_host_or_equal_shares(sizes: list[int], slots: int,
                                                  fits: bool) -> None:
    assert can_ever_fit(sizes, slots) is fits


def test_rendezvous_port_is_stable_and_outside_the_ephemeral_range() -> None:
    ports = {rendezvous_port(f"{i}.abcd") for i in range(200)}
    assert all(20000 <= p < 30000 for p in ports)
    assert rendezvous_port("7.ab") == rendezvous_port("7.ab")
    assert len(ports) > 150


def test_a_job_moved_ahead_goes_between_the_target_and_the_job_before_it() -> None:
    assert position_before([1.0, 2.0, 3.0], 2.0) == 1.5
    assert position_before([1.0, 2.0], 1.0) == 0.0
    assert position_before([5.0], 5.0) == 4.0
    # Moving ahead again and again never reaches the job before.
    p = 2.0
    for _ in range(30):
        p = position_before([1.0, p], p)
        assert p > 1.0


def test_shared_fs_storage_is_mounted_into_containers() -> None:
    config, mounts = storage_in_container({"type": "shared_fs", "host_path": "/data/ckpt",
                                           "storage_path": "exp"})
    assert config == {"type": "shared_fs", "host_path": CONTAINER_SHARED_FS,
                      "storage_path": "exp"}
    assert mounts == [{"host_path": "/data/ckpt", "container_path": CONTAINER_SHARED_FS,
                       "read_only": False, "propagation": "rprivate"}]
    assert storage_in_container({"type": "s3", "bucket": "b"}) == ({"type": "s3",
                                                                    "bucket": "b"}, [])
    assert storage_in_container(None) == (None, [])


def test_the_container_spec_follows_the_experiment_config() -> None:
    config = parse_experiment_config(yaml.safe_load("""
        entrypoint: python3 train.py
        searcher: {name: single, metric: loss, max_length: {batches: 1}}
        environment:
          image: {cpu: "my/cpu:1", cuda: "my/cuda:1"}
          add_capabilities: [SYS_PTRACE]
        bind_mounts:
          - {host_path: /data, container_path: /mnt/data, read_only: true}
        resources:
          shm_size: 2G
          devices: ["/dev/fuse", {host_path: /dev/x, container_path: /dev/y, mode: r}]
    """))
    spec = container_spec(config)
    assert dict(spec.images) == {"cpu": "my/cpu:1", "cuda": "my/cuda:1"}
    assert spec.shm_size == 2 << 30
    assert [m["container_path"] for m in spec.bind_mounts] == ["/mnt/data"]
    assert spec.bind_mounts[0]["read_only"] is True
    assert list(spec.devices) == [
        {"host_path": "/dev/fuse", "container_path": "/dev/fuse", "mode": "mrw"},
        {"host_path": "/dev/x", "container_path": "/dev/y", "mode": "r"}]
    assert list(spec.add_capabilities) == ["SYS_PTRACE"]


@pytest.mark.parametrize(("value", "size"), [
    (1024, 1024), ("512M", 512 << 20), ("4G", 4 << 30), ("1.5GiB", 3 << 29), ("64k", 64 << 10),
    ("100", 100), ("2gb", 2 << 30)])
def test_parse_size(value: int | str, size: int) -> None:
    assert parse_size(value) == size


def test_a_bad_shm_size_names_its_path() -> None:
    from det_hub.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_experiment_config({"entrypoint": "python3 train.py", "resources": {
            "shm_size": "lots"}, "searcher": {"name": "single", "metric": "l",
                                              "max_length": {"batches": 1}}})
    assert [p.path for p in err.value.problems] == ["resources.shm_size"]
    assert "is not a size" in err.value.problems[0].message


class _RefusingStore(Store):
    """A store whose database refuses the writes an allocation's end makes, while ``refuse``
    is set: a stand-in for an outage (tests/faults/test_database_outage.py has real ones)."""

    refuse = False

    async def update_allocation(self, allocation_id: str, **fields: Any) -> Any:
        if self.refuse:
            raise StoreUnavailable("PostgreSQL: connection refused")
        return await super().update_allocation(allocation_id, **fields)

    async def add_logs(self, rows: list[dict[str, Any]]) -> int:
        if self.refuse:
            raise StoreUnavailable("PostgreSQL: connection refused")
        return await super().add_logs(rows)


async def test_an_allocation_end_the_database_refused_is_stored_and_announced_once_back(
        sqlite_url: str, tmp_path: Path) -> None:
    store = await _RefusingStore.open(sqlite_url)
    experiment_id, trial_id = await a_trial(store)
    bus = EventBus()
    exits = exits_on(bus)
    cluster = Cluster(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False), bus,
                      poll_interval=0.05)
    cluster.start()
    try:
        alloc = await cluster.request(LaunchSpec(
            owner="alice", slots=1, cluster_info={}, context=None, env={},
            argv=["python3", "-c", "import time; time.sleep(1); print('bye')"],
            trial_id=trial_id, experiment_id=experiment_id,
            run_as=task_account() if os.geteuid() == 0 else None))
        await until(lambda: alloc.state == AllocationState.RUNNING)
        store.refuse = True
        await until(lambda: alloc.id in cluster.endings.waiting)
        await asyncio.sleep(1)
        # Not forgotten, not announced: it waits, tried again and again.
        assert exits == [] and alloc.id not in cluster.allocations
        assert cluster.endings.waiting[alloc.id].tries >= 2
        assert [r["message"] for r in alloc.unstored_logs] == ["bye"]

        store.refuse = False
        await until(lambda: exits)
        await asyncio.sleep(0.5)
        assert [e.alloc.id for e in exits] == [alloc.id]  # announced once
        assert exits[0].status.exit_code == 0
        assert cluster.endings.waiting == {}
        row = await store.get_allocation(alloc.id)
        assert row is not None and row.state == "TERMINATED" and row.exit_code == 0
        assert [line.message for line in await store.get_logs(trial_id)] == ["bye"]
    finally:
        await cluster.stop()
        await store.close()


async def test_stop_ends_the_loop_when_a_wake_up_comes_with_the_cancel(
        sqlite_url: str, tmp_path: Path) -> None:
    """A wake-up in the same turn as stop()'s cancel: Python 3.11's wait_for returns normally
    and drops the cancel, which left the loop running and the master's stop hanging."""
    store = await Store.open(sqlite_url)
    cluster = Cluster(store, LocalAgent(work_root=tmp_path / "work", use_gpus=False),
                      EventBus(), poll_interval=30.0)
    cluster.start()
    try:
        await asyncio.sleep(0.2)  # the loop waits for a wake-up, up to 30 s
        cluster._wake.set()
        stopping = asyncio.ensure_future(cluster.stop())
        done, _ = await asyncio.wait({stopping}, timeout=5)
        assert done == {stopping}, "the cluster's loop outlived its stop()"
        assert cluster._task is not None and cluster._task.done()
    except BaseException:
        if cluster._task is not None:  # the loop must not outlive the test
            cluster._task.cancel()
        raise
    finally:
        await store.close()
