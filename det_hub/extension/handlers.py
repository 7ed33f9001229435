"""The extension's HTTP handlers: the master's API passed through, the panel's config, an
experiment created from files on the server, a checkpoint's download, and Plotly.js for the
notebook widgets' charts.

All need the notebook server's login (``@tornado.web.authenticated``); jupyter_server checks
XSRF on cookie-authenticated requests that change things, as for its own API.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Awaitable
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.httputil import responses
from tornado.iostream import StreamClosedError

from det_hub import __version__
from det_hub._relay import AnswerRelay
from det_hub.extension.checkpoints import checked_uuid, write_checkpoint_archive
from det_hub.extension.errors import BadRequest, ExtensionError
from det_hub.extension.launch import experiment_body, parse_launch
from det_hub.extension.master import MasterConnection
from det_hub.extension.upstream import UpstreamRequest
from det_hub.plotly_bundle import plotly_js, send_plotly

#: Bytes of a checkpoint archive sent at a time.
_CHUNK = 1024 * 1024

#: Methods whose request body is passed on even when it is empty.
_WITH_BODY = ("POST", "PUT", "PATCH")


class DetHubHandler(APIHandler):
    """A handler whose errors are JSON ``{"error": ..., "details": [...]}``."""

    @property
    def master(self) -> MasterConnection:
        connection: MasterConnection = self.settings["det_hub_master"]
        return connection

    def fail(self, error: ExtensionError) -> None:
        """Answer with ``error``."""
        self.set_status(error.status)
        self.finish(json.dumps(error.body()))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors raised in jupyter_server's own checks (login, XSRF) as JSON too."""
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        if isinstance(error, tornado.web.HTTPError) and error.log_message:
            message = error.log_message % error.args if error.args else error.log_message
        else:
            message = responses.get(status_code, "Unknown error")
        self.finish(json.dumps({"error": message, "details": []}))


class ApiProxyHandler(DetHubHandler):
    """``<base_url>det-hub/api/v1/<path>``: the master's ``/api/v1/<path>``, any method.

    The answer streams back as it arrives (NDJSON logs that follow a trial, server-sent
    events), with the master's status and headers, except those of the connection itself.
    When the browser goes away, the request to the master is closed too.
    """

    _upstream: UpstreamRequest | None = None
    #: Whether the browser has closed its connection.
    _gone = False

    @tornado.web.authenticated
    async def _signed_in_forward(self, path: str) -> None:
        await self._forward()

    get = head = post = put = patch = delete = _signed_in_forward

    def on_connection_close(self) -> None:
        self._gone = True
        if self._upstream is not None:
            self._upstream.abort()

    def _api_path(self) -> str:
        """The path below ``api/v1/`` as the browser sent it (still percent-encoded)."""
        prefix = url_path_join(self.base_url, "det-hub/api/v1/")
        return self.request.path[len(prefix):]

    async def _forward(self) -> None:
        try:
            url = self.master.api_url(self._api_path(), self.request.query)
            headers = self.master.request_headers(self.request.headers)
        except ExtensionError as e:
            self.fail(e)
            return
        relay = AnswerRelay(self, self.master.passes_answer_header)

        def on_chunk(chunk: bytes) -> Awaitable[None]:
            self.write(chunk)
            # The master's next chunk is read once this one is on its way to the browser.
            return self.flush()

        method = self.request.method or "GET"
        body = self.request.body if self.request.body or method in _WITH_BODY else None
        request = HTTPRequest(
            url, method=method, headers=headers, body=body, follow_redirects=False,
            decompress_response=False, allow_nonstandard_methods=True,
            connect_timeout=self.master.connect_timeout,
            request_timeout=self.master.request_timeout,
            header_callback=relay, streaming_callback=on_chunk)
        if self._gone:
            return
        self._upstream = upstream = UpstreamRequest()
        try:
            await upstream.fetch(request)
        except (OSError, HTTPClientError, StreamClosedError) as e:
            if upstream.aborted or self._finished:
                return
            if not relay.answered:
                self.fail(self.master.unreachable(e))
                return
            # The master broke off mid-answer: end what was passed on so far.
            self.log.warning("det_hub: the master broke off %s %s: %s", method, url, e)
        if not self._finished:
            self.finish(set_content_type=relay.headers.get("Content-Type", "application/json"))


class ConfigHandler(DetHubHandler):
    """``<base_url>det-hub/config``: what the JupyterLab panel needs to know.

    ``{"master": <URL or null>, "user": <the master's /me user or null>, "version": ...,
    "problem": <why user is null, or null>}``.
    """

    @tornado.web.authenticated
    async def get(self) -> None:
        master: str | None = None
        user: dict[str, Any] | None = None
        problem: str | None = None
        try:
            master = self.master.base_url()
            user = await self.master.whoami()
        except ExtensionError as e:
            problem = e.message
        self.finish(json.dumps({"master": master, "user": user, "version": __version__,
                                "problem": problem}))


class LaunchHandler(DetHubHandler):
    """``POST <base_url>det-hub/launch``: an experiment from files on this server.

    The body is ``{"config_path": ..., "context_dir": ..., "activate": true}``, paths relative
    to the server's root directory (``context_dir`` defaults to the config's folder). The
    answer is the master's to ``POST /api/v1/experiments`` (201 ``{"experiment": ...}``, or its
    error), or the extension's own error for a path it cannot use.
    """

    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            try:
                body = json.loads(self.request.body or b"null")
            except ValueError as e:
                raise BadRequest("the body is not JSON", [str(e)]) from e
            request = parse_launch(body)
            root = self.settings["server_root_dir"]
            # Packing reads the whole context: off the event loop.
            payload = await asyncio.to_thread(experiment_body, root, request)
            answer = await self.master.call("POST", "experiments", payload)
        except ExtensionError as e:
            self.fail(e)
            return
        self.log.info("det_hub: experiment %s created from %s",
                      answer.get("experiment", {}).get("id"), request.config_path)
        self.set_status(201)
        self.finish(json.dumps(answer))


class CheckpointDownloadHandler(DetHubHandler):
    """``GET <base_url>det-hub/checkpoints/<uuid>/download``: the checkpoint's files as a
    ``.tar.gz``, read from its storage by this server."""

    @tornado.web.authenticated
    async def get(self, uuid: str) -> None:
        with tempfile.TemporaryFile(prefix="det_hub_checkpoint_") as archive:
            try:
                found = await self.master.call("GET", f"checkpoints/{checked_uuid(uuid)}")
                await asyncio.to_thread(write_checkpoint_archive, found["checkpoint"], archive)
            except ExtensionError as e:
                self.fail(e)
                return
            archive.seek(0)
            self.set_header("Content-Type", "application/gzip")
            self.set_header("Content-Disposition",
                            f'attachment; filename="checkpoint-{uuid}.tar.gz"')
            while chunk := archive.read(_CHUNK):
                self.write(chunk)
                try:
                    await self.flush()
                except StreamClosedError:
                    return
        self.finish(set_content_type="application/gzip")


class PlotlyScriptHandler(JupyterHandler):
    """``<base_url>det-hub/static/plotly.min.js``: Plotly.js from the ``plotly`` package, which
    the notebook widgets' charts load once per page. Sent gzip-compressed to browsers that take
    it; asked for under the digest of its content (``?v=``), a browser keeps it a year,
    otherwise it asks again and is answered 304 while it has not changed."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await send_plotly(self, plotly_js(), cache="private", missing="Plotly.js is not installed on the "
                          "notebook server: install plotly")


def routes(base_url: str) -> list[tuple[str, type[tornado.web.RequestHandler]]]:
    """The extension's routes below the notebook server's ``base_url``."""
    return [
        (url_path_join(base_url, r"det-hub/api/v1/(.*)"), ApiProxyHandler),
        (url_path_join(base_url, r"det-hub/config"), ConfigHandler),
        (url_path_join(base_url, r"det-hub/launch"), LaunchHandler),
        (url_path_join(base_url, r"det-hub/checkpoints/([^/]+)/download"),
         CheckpointDownloadHandler),
        (url_path_join(base_url, r"det-hub/static/plotly\.min\.js"), PlotlyScriptHandler),
    ]


__all__ = ["ApiProxyHandler", "CheckpointDownloadHandler", "ConfigHandler", "DetHubHandler",
           "LaunchHandler", "PlotlyScriptHandler", "routes"]
