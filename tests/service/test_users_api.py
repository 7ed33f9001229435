"""Linking users to Unix accounts through the REST API of a real master."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.service.openapi import dereference
from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

LINK = {"agent_uid": 1001, "agent_gid": 1002, "agent_user": "alice", "agent_group": "staff"}


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


def error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "details"}
    return dict(body)


def test_admins_link_and_unlink_users(master: MasterProcess) -> None:
    made = master.api("POST", "/users", json={"username": "alice"})
    assert made.status_code == 201, made.text
    assert made.json()["user"]["agent_user_group"] is None
    alice = made.json()["token"]

    r = master.api("PATCH", "/users/alice", json={"agent_user_group": LINK})
    assert r.status_code == 200, r.text
    assert r.json()["user"]["username"] == "alice"
    assert r.json()["user"]["agent_user_group"] == LINK
    [listed] = [u for u in master.get("/users")["users"] if u["username"] == "alice"]
    assert listed["agent_user_group"] == LINK

    # The names may be left out.
    r = master.api("PATCH", "/users/alice",
                   json={"agent_user_group": {"agent_uid": 3000, "agent_gid": 3000}})
    assert r.json()["user"]["agent_user_group"] == {
        "agent_uid": 3000, "agent_gid": 3000, "agent_user": None, "agent_group": None}

    assert "only admins" in error(master.api("PATCH", "/users/alice", token=alice,
                                             json={"agent_user_group": None}), 403)["error"]
    r = master.api("PATCH", "/users/alice", json={"agent_user_group": None})
    assert r.status_code == 200 and r.json()["user"]["agent_user_group"] is None
    [listed] = [u for u in master.get("/users")["users"] if u["username"] == "alice"]
    assert listed["agent_user_group"] is None


def test_bad_links_are_refused_with_the_field_named(master: MasterProcess) -> None:
    assert master.api("POST", "/users", json={"username": "carol"}).status_code == 201
    body = error(master.api("PATCH", "/users/carol",
                            json={"agent_user_group": {**LINK, "agent_uid": 0}}), 400)
    assert body["details"] == [{"path": "agent_uid",
                                "message": "0 is root; tasks never run as root"}]
    assert "agent_uid" in body["error"]
    body = error(master.api("PATCH", "/users/carol", json={"agent_user_group": {
        **LINK, "agent_gid": "1002", "agent_user": "no spaces"}}), 400)
    assert [d["path"] for d in body["details"]] == ["agent_gid", "agent_user"]
    body = error(master.api("PATCH", "/users/carol",
                            json={"agent_user_group": {**LINK, "shell": "/bin/sh"}}), 400)
    assert body["details"][0]["path"] == "agent_user_group.shell"
    body = error(master.api("PATCH", "/users/carol", json={"agent_user_group": 1001}), 400)
    assert body["details"][0]["path"] == "agent_user_group"
    body = error(master.api("PATCH", "/users/carol", json={"admin": True}), 400)
    assert body["details"] == [{"path": "admin", "message": "unknown field; agent_user_group "
                                "is the one that can be changed"}]
    assert error(master.api("PATCH", "/users/nobody-here", json={"agent_user_group": LINK}),
                 404)["error"] == "user 'nobody-here' not found"
    # Nothing was linked by any of these.
    [carol] = [u for u in master.get("/users")["users"] if u["username"] == "carol"]
    assert carol["agent_user_group"] is None


def test_the_openapi_document_describes_the_link(master: MasterProcess) -> None:
    document = master.get("/openapi.json")
    patch = document["paths"]["/api/v1/users/{username}"]["patch"]
    schema = dereference(document, patch["requestBody"]["content"]["application/json"]["schema"])
    link = schema["properties"]["agent_user_group"]
    assert link["nullable"] is True and set(link["properties"]) == set(LINK)
    assert patch["parameters"][0]["name"] == "username"
