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

import asyncio
import json
import logging
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.web import RequestHandler
from traitlets import Bool
from traitlets.config import LoggingConfigurable

from det_hub.service.unix_accounts import AgentUserGroup, link_problems, unix_account

log = logging.getLogger("det_hub.hub")


class HubIdentity(LoggingConfigurable):
    """Asks the hub who a token belongs to, and whether they are an admin."""

    link_unix_users = Bool(False, config=True, help="""Run hub users' tasks as the Unix
        account of the same name on the master's host: a hub user not linked yet (see
        `det-hub user link-with-agent-user`) is linked to that account and its primary group
        when the master first sees them. A user with no such account, or whose account is
        root's, is left unlinked (and logged once). A link an admin made by hand is kept; a
        user an admin unlinked is linked again when next seen.""")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from jupyterhub.services.auth import HubOAuth

        self.auth = HubOAuth.instance()
        #: Hub users already logged as having no account that may be linked.
        self._not_linked: set[str] = set()

    async def unix_account(self, name: str) -> AgentUserGroup | None:
        """The Unix account a hub user without a link is linked to: the one of the same name,
        when :attr:`link_unix_users` is on and that account may run tasks (it is not root's);
        else None."""
        if not self.link_unix_users:
            return None
        account = await asyncio.to_thread(unix_account, name)
        if account is None:
            why = "there is no Unix account of that name"
        else:
            problems = link_problems(account.uid, account.gid, account.user, account.group)
            if not problems:
                return account
            why = "; ".join(f"{p['path']} {p['message']}" for p in problems)
        if name not in self._not_linked:
            self._not_linked.add(name)
            log.warning("hub user %s is left without a linked Unix account: %s", name, why)
        return None

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
