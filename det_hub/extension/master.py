"""Where the det_hub master is and how the extension talks to it, free of any handler."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httputil import HTTPHeaders
from traitlets import Float, Unicode, default
from traitlets.config import Configurable

from det_hub._relay import HOP_BY_HOP
from det_hub.client import resolve_master, resolve_token
from det_hub.env_names import MASTER_ENV
from det_hub.extension.errors import (
    BadPath,
    MasterNotConfigured,
    MasterRefused,
    MasterUnreachable,
)

#: Headers that belong to one connection, not to the request or answer passed on.
#: Request headers that concern the notebook server, not the master: its login (cookies,
#: tokens, XSRF) stays here, and the client sets ``Host`` and ``Content-Length`` itself.
_NOT_FORWARDED = frozenset({"authorization", "cookie", "x-xsrftoken", "host", "content-length"})
#: Answer headers the notebook server sets itself, or that must not reach its origin.
_NOT_RETURNED = frozenset({"content-length", "set-cookie", "server", "date"})


class MasterConnection(Configurable):
    """The master that ``<base_url>det-hub/api/v1/`` leads to, and the token it is sent."""

    master_url = Unicode(
        help="""The det_hub master's URL, without ``/api/v1``: for example
        ``http://127.0.0.1:8080``, or ``http://127.0.0.1:8000/services/det-hub`` behind a hub.
        Defaults to the server's ``DET_HUB_MASTER``; with neither, the extension answers 503.""",
    ).tag(config=True)

    token = Unicode(
        help="""The API token sent to the master as ``Authorization: Bearer``. Defaults to
        ``DET_HUB_TOKEN`` (the hub sets it for notebook servers), then to the det_hub client's
        own choice (the admin-token file of a master on this machine).""",
    ).tag(config=True)

    connect_timeout = Float(
        10.0, help="Seconds to wait for a connection to the master.",
    ).tag(config=True)

    request_timeout = Float(
        0.0,
        help="""Seconds a proxied request may last in all; 0 for no limit, since a log or
        metrics stream that follows a trial lasts as long as the trial.""",
    ).tag(config=True)

    @default("master_url")
    def _master_from_env(self) -> str:
        return os.environ.get(MASTER_ENV, "")

    def base_url(self) -> str:
        """The master's URL, normalised as the det_hub client does it.

        Raises:
            MasterNotConfigured: no master URL is set.
        """
        if not self.master_url.strip():
            raise MasterNotConfigured(
                f"{MASTER_ENV} is not set: the notebook server does not know the det_hub "
                "master",
                [f"set {MASTER_ENV} in the server's environment, or "
                 "c.MasterConnection.master_url in its config"])
        return resolve_master(self.master_url)

    def api_url(self, path: str, query: str = "") -> str:
        """The master's URL for ``/api/v1/<path>?<query>``; ``path`` is kept as sent.

        Raises:
            BadPath: ``path`` has a ``.`` or ``..`` segment, which would lead out of the API.
            MasterNotConfigured: no master URL is set.
        """
        segments = [unquote(s) for s in path.split("/")]
        if any(s in (".", "..") for s in segments):
            raise BadPath(f"the path {path!r} leaves the master's API",
                          ["'.' and '..' segments are not passed on"])
        url = f"{self.base_url()}/api/v1/{path}"
        return f"{url}?{query}" if query else url

    def authorization(self) -> str | None:
        """The ``Authorization`` header for the master, or ``None`` when no token is known."""
        token = resolve_token(self.token or None, self.base_url())
        return f"Bearer {token}" if token else None

    def request_headers(self, incoming: HTTPHeaders) -> HTTPHeaders:
        """The browser's request headers as the master gets them, with the master token."""
        headers = HTTPHeaders()
        for name, value in incoming.get_all():
            lower = name.lower()
            if lower not in HOP_BY_HOP and lower not in _NOT_FORWARDED:
                headers.add(name, value)
        authorization = self.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    @staticmethod
    def passes_answer_header(name: str) -> bool:
        """Whether a header of the master's answer (lower-case name) goes on to the browser
        (hop-by-hop headers never do)."""
        return name not in _NOT_RETURNED

    def unreachable(self, error: BaseException) -> MasterUnreachable:
        """The error for a master that did not answer ``error`` names what went wrong."""
        return MasterUnreachable(
            f"the det_hub master at {self.master_url} cannot be reached",
            [str(error) or type(error).__name__])

    async def call(self, method: str, path: str, body: Any = None,
                   timeout: float = 120.0) -> dict[str, Any]:
        """A JSON request to the master's ``/api/v1/<path>`` with the master token, answered
        within ``timeout`` seconds.

        Raises:
            MasterNotConfigured: no master URL is set.
            MasterUnreachable: the master did not answer.
            MasterRefused: the master answered with an error (its status, message and details).
        """
        headers = self.request_headers(HTTPHeaders())
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            self.api_url(path), method=method, headers=headers,
            body=None if body is None else json.dumps(body),
            connect_timeout=self.connect_timeout, request_timeout=timeout)
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as e:
            raise self.unreachable(e) from e
        if response.code == 599 and response.error is not None:
            raise self.unreachable(response.error)
        try:
            answer = json.loads(response.body or b"null")
        except ValueError:
            answer = None
        if not 200 <= response.code < 300:
            if isinstance(answer, dict) and answer.get("error"):
                raise MasterRefused(response.code, str(answer["error"]),
                                    list(answer.get("details") or []))
            raise MasterRefused(response.code, f"the master answered {response.code}")
        if not isinstance(answer, dict):
            raise MasterRefused(502, f"the master's answer to {method} {path} is not a JSON object")
        return answer

    async def whoami(self) -> dict[str, Any]:
        """The user the token belongs to, as the master's ``/api/v1/me`` describes them.

        Raises:
            MasterNotConfigured: no master URL is set.
            MasterUnreachable: the master did not answer.
            MasterRefused: the master answered with an error.
        """
        return dict((await self.call("GET", "me", timeout=10))["user"])


__all__ = ["MasterConnection"]
