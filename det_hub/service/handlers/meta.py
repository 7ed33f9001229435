"""Health, the OpenAPI document, and who am I."""

from __future__ import annotations

from det_hub import __version__
from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler
from det_hub.service.serialize import user_json


class HealthHandler(APIHandler):
    public = True
    answers = {"get": wire.Health}
    extra_responses = {"get": {"503": "the master is up but its database does not answer "
                                      "(down, restarting, unreachable); with Retry-After"}}

    async def get(self) -> None:
        """Whether the master is up, and its database answers (a read: a database whose disk
        is full still does)."""
        await self.master.check_database()
        self.send({"status": "ok", "version": __version__})


class OpenAPIHandler(APIHandler):
    public = True
    answers = {"get": "this OpenAPI document"}

    async def get(self) -> None:
        """This API's OpenAPI 3 document."""
        from det_hub.service.openapi import openapi_document

        self.send(openapi_document(self.application.settings["api_routes"],
                                   self.master.base_url.rstrip("/") or "/"))


class MeHandler(APIHandler):
    answers = {"get": ("user", wire.User)}

    async def get(self) -> None:
        """The calling user."""
        self.send({"user": user_json(self.user)})


routes = [
    (r"/health", HealthHandler),
    (r"/openapi\.json", OpenAPIHandler),
    (r"/me", MeHandler),
]
