"""Users and tokens."""

from __future__ import annotations

import datetime as dt

import pytest

from det_hub.store import NotFound, Store, StoreConflict, hash_token, utcnow


def test_hash_token_is_sha256_hex() -> None:
    assert hash_token("secret") == (
        "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    )
    assert hash_token("secret") != hash_token("secret2")


async def test_create_and_get_users(store: Store) -> None:
    alice = await store.create_user("alice")
    root = await store.create_user("root", admin=True)
    assert alice.id != root.id
    assert (alice.username, alice.admin, alice.active) == ("alice", False, True)
    assert alice.created_at.utcoffset() == dt.timedelta(0)
    assert abs(utcnow() - alice.created_at) < dt.timedelta(minutes=1)

    found = await store.get_user("root")
    assert found is not None
    assert (found.id, found.username, found.admin, found.active) == (root.id, "root", True, True)
    assert found.created_at == root.created_at
    by_id = await store.get_user_by_id(alice.id)
    assert by_id is not None and by_id.username == "alice"
    assert await store.get_user("nobody") is None
    assert await store.get_user_by_id(9999) is None
    assert [u.username for u in await store.list_users()] == ["alice", "root"]


async def test_duplicate_username_conflicts(store: Store) -> None:
    await store.create_user("alice")
    with pytest.raises(StoreConflict):
        await store.create_user("alice")
    assert len(await store.list_users()) == 1


async def test_tokens(store: Store) -> None:
    alice = await store.create_user("alice")
    bob = await store.create_user("bob")
    token = await store.add_token(alice.id, hash_token("a-secret"), description="notebook")
    assert (token.user_id, token.description, token.expires_at) == (alice.id, "notebook", None)
    await store.add_token(bob.id, hash_token("b-secret"))

    found = await store.user_for_token(hash_token("a-secret"))
    assert found is not None and found.id == alice.id
    found = await store.user_for_token(hash_token("b-secret"))
    assert found is not None and found.id == bob.id
    assert await store.user_for_token(hash_token("wrong")) is None

    with pytest.raises(StoreConflict):
        await store.add_token(bob.id, hash_token("a-secret"))
    with pytest.raises(NotFound):
        await store.add_token(9999, hash_token("orphan"))


async def test_expired_tokens_and_inactive_users_are_ignored(store: Store) -> None:
    alice = await store.create_user("alice")
    await store.add_token(
        alice.id, hash_token("old"), expires_at=utcnow() - dt.timedelta(seconds=1)
    )
    await store.add_token(alice.id, hash_token("new"), expires_at=utcnow() + dt.timedelta(hours=1))
    assert await store.user_for_token(hash_token("old")) is None
    found = await store.user_for_token(hash_token("new"))
    assert found is not None and found.id == alice.id

    updated = await store.update_user(alice.id, active=False)
    assert updated.active is False
    assert await store.user_for_token(hash_token("new")) is None
    with pytest.raises(NotFound):
        await store.update_user(9999, active=False)


def _link(user: object) -> tuple[object, ...]:
    return tuple(getattr(user, k) for k in ("agent_uid", "agent_gid", "agent_user", "agent_group"))


async def test_users_link_to_unix_accounts_and_unlink(store: Store) -> None:
    alice = await store.create_user("alice")
    bob = await store.create_user("bob")
    assert _link(alice) == (None, None, None, None)

    linked = await store.link_agent_user(alice.id, agent_uid=1001, agent_gid=100,
                                         agent_user="alice", agent_group="users")
    assert _link(linked) == (1001, 100, "alice", "users")
    # Past a 32-bit signed integer: the largest uid a link may name.
    await store.link_agent_user(bob.id, agent_uid=4294967294, agent_gid=4294967294)
    assert _link(await store.get_user("bob")) == (4294967294, 4294967294, None, None)
    assert _link(await store.get_user_by_id(alice.id)) == (1001, 100, "alice", "users")

    # A new link replaces the whole old one, names included.
    await store.link_agent_user(alice.id, agent_uid=2002, agent_gid=2002)
    assert _link(await store.get_user("alice")) == (2002, 2002, None, None)

    unlinked = await store.unlink_agent_user(alice.id)
    assert _link(unlinked) == (None, None, None, None)
    assert _link(await store.get_user("alice")) == (None, None, None, None)
    assert _link(await store.unlink_agent_user(alice.id)) == (None, None, None, None)
    # Bob's link was not touched, nor anything else of alice's.
    assert _link(await store.get_user("bob")) == (4294967294, 4294967294, None, None)
    found = await store.get_user("alice")
    assert found is not None and (found.username, found.active) == ("alice", True)

    with pytest.raises(NotFound):
        await store.link_agent_user(9999, agent_uid=1, agent_gid=1)
    with pytest.raises(NotFound):
        await store.unlink_agent_user(9999)
