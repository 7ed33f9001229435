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


routes = [(r"/users", UsersHandler)]
