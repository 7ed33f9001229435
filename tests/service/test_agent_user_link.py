"""Linking det_hub users to Unix accounts (``link-with-agent-user``) in the master's manager,
by hand and from hub user names, on a real store (SQLite and PostgreSQL) and this host's real
user database."""

from __future__ import annotations

import grp
import logging
import pwd
from typing import Any

import pytest

from det_hub.hub import MANAGE_SCOPE
from det_hub.service.errors import BadRequest, Forbidden, NotFound
from det_hub.service.hub import HubIdentity
from det_hub.service.master import Master, Principal
from det_hub.service.serialize import user_json
from det_hub.store import Store


@pytest.fixture
async def root(store: Store) -> Principal:
    return Principal(user=await store.create_user("root-admin", admin=True))


def _link(user: Any) -> tuple[Any, ...]:
    return (user.agent_uid, user.agent_gid, user.agent_user, user.agent_group)


async def test_admins_link_and_unlink_and_the_launcher_sees_it(
        master: Master, store: Store, root: Principal) -> None:
    alice = await store.create_user("alice")
    assert await master.users.agent_user(alice.id) is None
    assert user_json(alice)["agent_user_group"] is None

    linked = await master.users.link_agent_user(root, "alice", 1001, 1002, "alice", "staff")
    assert _link(linked) == (1001, 1002, "alice", "staff")
    assert await master.users.agent_user(alice.id) == (1001, 1002)
    assert user_json(linked)["agent_user_group"] == {
        "agent_uid": 1001, "agent_gid": 1002, "agent_user": "alice", "agent_group": "staff"}
    assert _link(await store.get_user("alice")) == (1001, 1002, "alice", "staff")

    # Relinking replaces the link; the names may be left out.
    await master.users.link_agent_user(root, "alice", 4294967294, 2000, None, None)
    assert await master.users.agent_user(alice.id) == (4294967294, 2000)
    assert _link(await store.get_user("alice")) == (4294967294, 2000, None, None)

    unlinked = await master.users.unlink_agent_user(root, "alice")
    assert _link(unlinked) == (None, None, None, None)
    assert await master.users.agent_user(alice.id) is None
    assert _link(await master.users.unlink_agent_user(root, "alice")) == (None, None, None, None)
    assert await master.users.agent_user(9999) is None


async def test_a_link_already_stored_is_read_on_first_ask(master: Master, store: Store) -> None:
    """What a master before a restart stored is what the launcher gets."""
    bob = await store.create_user("bob")
    await store.link_agent_user(bob.id, agent_uid=3000, agent_gid=3001)
    assert await master.users.agent_user(bob.id) == (3000, 3001)


async def test_only_admins_link_and_unknown_users_are_not_found(
        master: Master, store: Store, root: Principal) -> None:
    alice = await store.create_user("alice")
    bob = Principal(user=await store.create_user("bob"))
    with pytest.raises(Forbidden, match="only admins can link users to Unix accounts"):
        await master.users.link_agent_user(bob, "alice", 1001, 1001, "alice", "alice")
    with pytest.raises(Forbidden):
        await master.users.unlink_agent_user(bob, "alice")
    with pytest.raises(Forbidden):  # a manager of others' work is no admin
        await master.users.link_agent_user(
            Principal(user=bob.user, scopes=frozenset({MANAGE_SCOPE})), "bob",
            1001, 1001)
    with pytest.raises(NotFound, match="user 'nobody-here' not found"):
        await master.users.link_agent_user(root, "nobody-here", 1001, 1001)
    with pytest.raises(NotFound, match="user 'nobody-here' not found"):
        await master.users.unlink_agent_user(root, "nobody-here")
    assert _link(await store.get_user("alice")) == (None, None, None, None)
    assert await master.users.agent_user(alice.id) is None


@pytest.mark.parametrize(("fields", "path", "message"), [
    ((0, 1001, None, None), "agent_uid", "0 is root; tasks never run as root"),
    ((1001, 0, None, None), "agent_gid", "0 is root's group; tasks never run as root"),
    (("1001", 1001, None, None), "agent_uid", "must be an integer from 1 to 4294967294"),
    ((True, 1001, None, None), "agent_uid", "must be an integer from 1 to 4294967294"),
    ((1001, 1.5, None, None), "agent_gid", "must be an integer from 1 to 4294967294"),
    ((None, 1001, None, None), "agent_uid", "must be an integer from 1 to 4294967294"),
    ((-5, 1001, None, None), "agent_uid", "must be from 1 to 4294967294"),
    ((1001, 4294967295, None, None), "agent_gid", "must be from 1 to 4294967294"),
    ((1001, 1001, "bad name", None), "agent_user", "must be a Unix name"),
    ((1001, 1001, "-dash", None), "agent_user", "must be a Unix name"),
    ((1001, 1001, "a" * 33, None), "agent_user", "at most 32 characters"),
    ((1001, 1001, None, "x/y"), "agent_group", "must be a Unix name"),
    ((1001, 1001, None, 1001), "agent_group", "must be a Unix name"),
])
async def test_bad_links_name_the_field_and_store_nothing(
        master: Master, store: Store, root: Principal, fields: tuple[Any, ...], path: str,
        message: str) -> None:
    alice = await store.create_user("alice")
    await master.users.link_agent_user(root, "alice", 1001, 1001, "alice", "alice")
    with pytest.raises(BadRequest) as bad:
        await master.users.link_agent_user(root, "alice", *fields)
    assert [d["path"] for d in bad.value.details] == [path]
    assert message in bad.value.details[0]["message"]
    assert str(bad.value).startswith(f"cannot link user 'alice': {path} ")
    # The earlier link is intact.
    assert _link(await store.get_user("alice")) == (1001, 1001, "alice", "alice")
    assert await master.users.agent_user(alice.id) == (1001, 1001)


async def test_every_bad_field_is_named_at_once(master: Master, store: Store,
                                                root: Principal) -> None:
    await store.create_user("alice")
    with pytest.raises(BadRequest) as bad:
        await master.users.link_agent_user(root, "alice", 0, "x", "a b", "$")
    assert [d["path"] for d in bad.value.details] == [
        "agent_uid", "agent_gid", "agent_user", "agent_group"]


# -- hub users -------------------------------------------------------------------------------


def _account(name: str) -> tuple[int, int, str, str]:
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, entry.pw_name, grp.getgrgid(entry.pw_gid).gr_name


async def test_hub_users_are_linked_to_the_unix_account_of_their_name(
        master: Master, store: Store, root: Principal, caplog: pytest.LogCaptureFixture) -> None:
    master.users.hub = HubIdentity(link_unix_users=True)
    caplog.set_level(logging.INFO, logger="det_hub")

    who = await master.users.hub_principal({"name": "daemon", "admin": False})
    assert who.user is not None and _link(who.user) == _account("daemon")
    assert await master.users.agent_user(who.user.id) == _account("daemon")[:2]
    nobody = await master.users.hub_principal({"name": "nobody", "admin": False})
    assert nobody.user is not None
    assert _link(await store.get_user("nobody")) == _account("nobody")
    assert _account("nobody")[:2] == (65534, 65534)

    # Root's account and names without an account are never linked, and logged once each.
    for _ in range(2):
        for name in ("root", "no-such-unix-account"):
            seen = await master.users.hub_principal({"name": name, "admin": False})
            assert seen.user is not None and _link(seen.user) == (None, None, None, None)
            assert await master.users.agent_user(seen.user.id) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "hub user root is left without a linked Unix account: agent_uid 0 is root; tasks "
        "never run as root; agent_gid 0 is root's group; tasks never run as root",
        "hub user no-such-unix-account is left without a linked Unix account: there is no "
        "Unix account of that name"]

    # A link an admin made is kept; an admin's unlink holds until the user is next seen.
    await master.users.link_agent_user(root, "daemon", 4242, 4343, None, None)
    again = await master.users.hub_principal({"name": "daemon", "admin": False})
    assert again.user is not None and _link(again.user) == (4242, 4343, None, None)
    await master.users.unlink_agent_user(root, "daemon")
    assert await master.users.agent_user(again.user.id) is None
    await master.users.hub_principal({"name": "daemon", "admin": False})
    assert await master.users.agent_user(again.user.id) == _account("daemon")[:2]


async def test_hub_users_are_not_linked_unless_asked(master: Master, store: Store) -> None:
    master.users.hub = HubIdentity()
    assert HubIdentity.class_traits()["link_unix_users"].default_value is False
    who = await master.users.hub_principal({"name": "daemon", "admin": False})
    assert who.user is not None and _link(who.user) == (None, None, None, None)
    assert await master.users.agent_user(who.user.id) is None
