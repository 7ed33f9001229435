"""Users."""

from __future__ import annotations

from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler
from det_hub.service.serialize import user_json


class UsersHandler(APIHandler):
    created = frozenset({"post"})
    body = {"post": wire.UserCreate}
    answers = {"get": ("users", list[wire.User]), "post": wire.NewUser}

    async def get(self) -> None:
        """List users."""
        self.send({"users": [user_json(u) for u in await self.master.users.all()]})

    async def post(self) -> None:
        """Create a user (admins only); answers with the new user's token, shown once."""
        body: wire.UserCreate = self.parsed_body()
        username, admin = body.username, body.admin
        user, token = await self.master.users.create(self.principal, username, admin)
        self.send({"user": user_json(user), "token": token}, status=201)


_LINK_FIELDS = ("agent_uid", "agent_gid", "agent_user", "agent_group")


class UserHandler(APIHandler):
    body = {"patch": wire.UserChanges}
    answers = {"patch": ("user", wire.User)}

    async def patch(self, username: str) -> None:
        """Link a user to the Unix account their tasks run as, or unlink them (admins only)."""
        link = self.parsed_body().given()["agent_user_group"]
        if link is None:
            user = await self.master.users.unlink_agent_user(self.principal, username)
        else:
            user = await self.master.users.link_agent_user(
                self.principal, username, *(link.get(k) for k in _LINK_FIELDS))
        self.send({"user": user_json(user)})


routes = [(r"/users", UsersHandler), (r"/users/(?P<username>[^/]+)", UserHandler)]
