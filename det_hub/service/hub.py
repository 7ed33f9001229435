"""The master as a JupyterHub service: hub users are det_hub's users, hub admins its admins.

When JupyterHub runs the master (see :func:`det_hub.hub.configure`), it gives it
``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_API_URL``, ``JUPYTERHUB_SERVICE_PREFIX`` and the OAuth
client settings in the environment. Then

- an API request may carry a hub token (a user's own, or the token a user's notebook server is
  given): the hub says whose it is, and that user is the caller, made a det_hub user on first
  sight;
- a browser signs in through the hub's OAuth flow (``<prefix>/oauth_callback``) and gets a
  cookie of the service's.

Tokens det_hub issued itself (allocation tokens, the admin token) keep working beside them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.web import RequestHandler

log = logging.getLogger("det_hub.hub")


class HubIdentity:
    """Asks the hub who a token belongs to, and whether they are an admin."""

    def __init__(self) -> None:
        from jupyterhub.services.auth import HubOAuth

        self.auth = HubOAuth.instance()

    async def user_for_token(self, token: str) -> dict[str, Any] | None:
        """The hub's model of the token's user (``name``, ``admin``), or None when the token
        is not the hub's or does not grant access to this service."""
        model = await self.auth.user_for_token(token, sync=False)
        if not model or model.get("kind", "user") != "user":
            return None
        if self.auth.access_scopes and not self.auth.check_scopes(self.auth.access_scopes,
                                                                  model):
            return None
        if "admin" not in model:  # a token that may not read its owner's admin flag
            model = {**model, "admin": await self._is_admin(model["name"])}
        return model

    async def _is_admin(self, name: str) -> bool:
        """Ask with the service's own token (which may read users, see
        :func:`det_hub.hub.configure`); a hub that says nothing makes no admin."""
        request = HTTPRequest(
            f"{self.auth.api_url.rstrip('/')}/users/{name}",
            headers={"Authorization": f"token {self.auth.api_token}"}, request_timeout=10)
        try:
            response = await AsyncHTTPClient().fetch(request)
            return bool(json.loads(response.body).get("admin"))
        except (OSError, HTTPClientError, ValueError) as e:
            log.warning("could not ask the hub whether %s is an admin: %s", name, e)
            return False


def hub_handlers(base_url: str) -> list[tuple[Any, ...]]:
    """The OAuth callback the hub sends signed-in browsers back to."""
    from jupyterhub.services.auth import HubOAuthCallbackHandler

    return [(f"{base_url}oauth_callback", HubOAuthCallbackHandler)]


def page_base() -> type[RequestHandler]:
    """The base of pages for people in browsers: signed in through the hub's OAuth flow."""
    from jupyterhub.services.auth import HubOAuthenticated

    class HubPage(HubOAuthenticated, RequestHandler):
        async def prepare(self) -> None:
            # Asked here without blocking; get_current_user() then answers from the cache.
            await self.hub_auth.get_user(self, sync=False)

    return HubPage


__all__ = ["HubIdentity", "hub_handlers", "page_base"]
