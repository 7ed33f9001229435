"""Who a task runs as and which host paths it may have: each user's own checkpoint directory
and data cache, configs that reach into the master's data directory refused, warm starts only
from one's own checkpoints, and allocation tokens that die with their allocation."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_master import config, context, finished  # this folder's own helpers

from det_hub.service.errors import BadRequest, Forbidden
from det_hub.service.master import Master, Principal
from det_hub.service.task_paths import mount_problem, owner_checkpoint_dir, path_problems
from det_hub.service.unix_accounts import task_account

NOBODY = task_account("nobody")


async def user(master: Master, admin: Principal, name: str) -> Principal:
    _, token = await master.users.create(admin, name, admin=False)
    who = await master.users.authenticate(token)
    assert who is not None
    return who


def test_mount_rules() -> None:
    private, allowed = ["/srv/det/data"], "/srv/det/data/checkpoints/bob"
    assert mount_problem("/srv/det/data/checkpoints/bob", private=private, allowed=allowed) is None
    assert mount_problem("/srv/det/data/checkpoints/bob/x", private=private,
                         allowed=allowed) is None
    assert mount_problem("/mnt/shared", private=private, allowed=allowed) is None
    assert "inside" in (mount_problem("/srv/det/data/checkpoints/alice", private=private,
                                      allowed=allowed) or "")
    assert "inside" in (mount_problem("/srv/det/data/checkpoints", private=private,
                                      allowed=allowed) or "")
    for holder in ("/", "/srv", "/srv/det"):
        assert "holds" in (mount_problem(holder, private=private, allowed=allowed) or "")
    assert "absolute" in (mount_problem("data", private=private, allowed=allowed) or "")


@given(st.lists(st.sampled_from(["srv", "det", "data", "checkpoints", "bob", "alice", ".."]),
                max_size=6))
def test_a_mount_allowed_never_shows_a_private_path(parts: list[str]) -> None:
    path = os.path.normpath("/" + "/".join(parts))
    private, allowed = "/srv/det/data", "/srv/det/data/checkpoints/bob"
    if mount_problem(path, private=[private], allowed=allowed) is None:
        # Allowed: the user's own directory, or a path that neither holds nor is in the data dir.
        own = path == allowed or path.startswith(allowed + "/")
        assert own or not (path == private or path.startswith(private + "/")
                           or private.startswith(path.rstrip("/") + "/"))


def test_path_problems_name_the_config_path(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    problems = path_problems({
        "checkpoint_storage": {"type": "shared_fs", "host_path": data},
        "bind_mounts": [{"host_path": "/mnt/ok", "container_path": "/x"},
                        {"host_path": data + "/admin-token", "container_path": "/y"}]},
        private=[data], allowed=data + "/checkpoints/bob")
    assert [p["path"] for p in problems] == ["checkpoint_storage.host_path",
                                             "bind_mounts[1].host_path"]


async def test_each_user_gets_a_checkpoint_directory_of_their_own(
        master: Master, admin: Principal) -> None:
    alice = await user(master, admin, "alice")
    row = await master.experiments.create(alice, config(), context("print('x')\n"))
    own = owner_checkpoint_dir(master.data_dir, "alice")
    assert row.config["checkpoint_storage"]["host_path"] == str(own)
    assert own.is_dir() and (own.stat().st_mode & 0o777) == 0o700
    if os.geteuid() == 0:
        assert (own.stat().st_uid, own.stat().st_gid) == NOBODY
    assert await finished(master, row.id) == "COMPLETED"
    cache = master.data_dir / "caches" / "alice"
    assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("storage_or_mount", ["own_of_other", "data_dir", "root", "mount"])
async def test_configs_reaching_into_the_data_dir_are_refused_and_create_nothing(
        master: Master, admin: Principal, storage_or_mount: str) -> None:
    bob = await user(master, admin, "bob")
    data = master.data_dir
    extra = {
        "own_of_other": {"checkpoint_storage": {
            "type": "shared_fs", "host_path": str(data / "checkpoints" / "alice")}},
        "data_dir": {"checkpoint_storage": {"type": "shared_fs", "host_path": str(data)}},
        "root": {"checkpoint_storage": {"type": "shared_fs", "host_path": "/"}},
        "mount": {"bind_mounts": [{"host_path": str(data / "admin-token"),
                                   "container_path": "/run/token"}]},
    }[storage_or_mount]
    with pytest.raises(BadRequest) as refused:
        await master.experiments.create(bob, config(**extra), context("print('x')\n"))
    [problem] = refused.value.details
    assert re.fullmatch(r"(checkpoint_storage|bind_mounts\[0\])\.host_path", problem["path"])
    assert "tasks may not mount it" in problem["message"]
    assert (await master.store.list_experiments())[0] == []


async def test_a_warm_start_from_another_users_checkpoint_is_refused(
        master: Master, admin: Principal) -> None:
    alice, bob = await user(master, admin, "alice"), await user(master, admin, "bob")
    source = await master.experiments.create(alice, config(), context("print('x')\n"))
    assert await finished(master, source.id) == "COMPLETED"
    [trial] = await master.store.list_trials(source.id)
    uuid = "5b0d6c1e-aaaa-bbbb-cccc-000000000011"
    await master.store.add_checkpoint(
        uuid=uuid, trial_id=trial.id, experiment_id=source.id, allocation_id=None,
        state="COMPLETED", steps_completed=1, resources={}, metadata={},
        storage=source.config["checkpoint_storage"])
    warm = config(searcher={"name": "single", "metric": "loss", "max_length": {"batches": 1},
                            "source_checkpoint_uuid": uuid})
    with pytest.raises(Forbidden, match="belongs to alice's experiment"):
        await master.experiments.create(bob, warm, context("print('x')\n"))
    mine = await master.experiments.create(alice, warm, context("print('x')\n"), activate=False)
    assert mine.config["checkpoint_storage"]["host_path"] == str(
        owner_checkpoint_dir(master.data_dir, "alice"))


async def test_tasks_run_as_their_owners_account(master: Master, admin: Principal) -> None:
    bob = await user(master, admin, "bob")
    assert bob.user is not None and admin.user is not None
    assert await master.users.task_identity(bob.user.id) == (NOBODY, False)
    await master.users.link_agent_user(admin, "bob", 23456, 23457, "bob", "bob")
    assert await master.users.task_identity(bob.user.id) == ((23456, 23457), False)
    assert (await master.users.task_identity(admin.user.id))[1] is True


async def test_an_allocation_token_dies_with_its_allocation(
        master: Master, admin: Principal) -> None:
    script = "import os\nprint('token', os.environ['DET_HUB_ALLOCATION_TOKEN'])\n"
    row = await master.experiments.create(admin, config(), context(script))
    assert await finished(master, row.id) == "COMPLETED"
    [trial] = await master.store.list_trials(row.id)
    [token] = [line.message.split()[1] for line in await master.store.get_logs(trial.id)
               if line.message.startswith("token ")]
    assert await master.users.authenticate(token) is None


async def test_continuing_into_another_users_storage_is_refused(
        master: Master, admin: Principal) -> None:
    bob = await user(master, admin, "bob")
    row = await master.experiments.create(bob, config(), context("print('x')\n"))
    assert await finished(master, row.id) == "COMPLETED"
    other = {"type": "shared_fs", "host_path": str(master.data_dir / "checkpoints" / "alice")}
    with pytest.raises(BadRequest) as refused:
        await master.experiments.continue_experiment(bob, row.id, {"checkpoint_storage": other})
    assert [p["path"] for p in refused.value.details] == ["checkpoint_storage.host_path"]
    assert (await master.experiments.get(row.id)).config["checkpoint_storage"]["host_path"] == \
        str(owner_checkpoint_dir(master.data_dir, "bob"))
