"""Users."""

from __future__ import annotations

from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import APIHandler
from det_hub.service.serialize import user_json


class UsersHandler(APIHandler):
    created = frozenset({"post"})
    body = {"post": {"type": "object", "required": ["username"], "properties": {
        "username": {"type": "string"}, "admin": {"type": "boolean", "default": False}}}}
    answers = {"get": "users", "post": "user"}

    async def get(self) -> None:
        """List users."""
        self.send({"users": [user_json(u) for u in await self.master.store.list_users()]})

    async def post(self) -> None:
        """Create a user (admins only); answers with the new user's token, shown once."""
        body = self.json_body()
        username, admin = body.get("username"), body.get("admin", False)
        if not isinstance(username, str):
            raise BadRequest("username: required")
        if not isinstance(admin, bool):
            raise BadRequest("admin: must be true or false")
        user, token = await self.master.create_user(self.principal, username, admin)
        self.send({"user": user_json(user), "token": token}, status=201)


_LINK_FIELDS = ("agent_uid", "agent_gid", "agent_user", "agent_group")
_ID = {"type": "integer", "minimum": 1, "maximum": 4294967294}
_NAME = {"type": "string", "nullable": True, "maxLength": 32}


class UserHandler(APIHandler):
    body = {"patch": {"type": "object", "required": ["agent_user_group"], "properties": {
        "agent_user_group": {
            "type": "object", "nullable": True, "required": ["agent_uid", "agent_gid"],
            "description": "the Unix account the user's tasks run as; null unlinks",
            "properties": {"agent_uid": _ID, "agent_gid": _ID, "agent_user": _NAME,
                           "agent_group": _NAME}}}}}
    answers = {"patch": "user"}

    async def patch(self, username: str) -> None:
        """Link a user to the Unix account their tasks run as, or unlink them (admins only)."""
        body = self.json_body()
        unknown = sorted(set(body) - {"agent_user_group"})
        if unknown or "agent_user_group" not in body:
            raise BadRequest("nothing to change: send {\"agent_user_group\": {...} or null}",
                             [{"path": k, "message": "unknown field; agent_user_group is the "
                               "one that can be changed"} for k in unknown])
        link = body["agent_user_group"]
        if link is None:
            user = await self.master.unlink_agent_user(self.principal, username)
        elif not isinstance(link, dict):
            raise BadRequest("agent_user_group: must be an object or null", [
                {"path": "agent_user_group", "message": "must be an object or null"}])
        else:
            unknown = sorted(set(link) - set(_LINK_FIELDS))
            if unknown:
                raise BadRequest("agent_user_group: unknown field(s) " + ", ".join(unknown), [
                    {"path": f"agent_user_group.{k}", "message": "unknown field; one of "
                     + ", ".join(_LINK_FIELDS)} for k in unknown])
            user = await self.master.link_agent_user(
                self.principal, username, *(link.get(k) for k in _LINK_FIELDS))
        self.send({"user": user_json(user)})


routes = [(r"/users", UsersHandler), (r"/users/(?P<username>[^/]+)", UserHandler)]
