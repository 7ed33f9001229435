"""The master's proxy to what notebooks, shells and TensorBoards serve: ``/proxy/<task id>/...``
(below the master's base URL).

HTTP requests and WebSockets under a notebook's or TensorBoard's path go to the server its task
runs (which serves under the same path), on the address the task said it answers on. A shell's
path takes a WebSocket only, and joins it to the task's SSH server's TCP port: ``det-hub shell
open`` runs ``ssh`` through that tunnel.

Who may pass: the task's owner and admins, with one of

- their API token (``Authorization: Bearer <token>``), as the CLI sends it;
- the task's access token (``?token=...``, or ``Authorization: token ...`` as Jupyter's own
  clients send it), which is in the URL ``det-hub notebook start`` prints. Having it answers
  with a cookie for the task's path, so that the browser's later requests pass;
- that cookie. It is a keyed hash of the task's token, so it outlives a master restart and
  tells nothing of the token.

Every request and WebSocket message counts as use of the task, for its ``idle_timeout``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httputil import HTTPHeaders
from tornado.iostream import StreamClosedError
from tornado.tcpclient import TCPClient
from tornado.websocket import (
    WebSocketClientConnection,
    WebSocketClosedError,
    WebSocketHandler,
    websocket_connect,
)

from det_hub._relay import HOP_BY_HOP, AnswerRelay
from det_hub.service.errors import APIError, Forbidden, NotReady, Unauthorized
from det_hub.states import TaskType

if TYPE_CHECKING:
    from tornado.iostream import IOStream

    from det_hub.service.master import Master
    from det_hub.store import Task

log = logging.getLogger("det_hub.proxy")

_COOKIE_MESSAGE = b"det_hub proxy cookie"


def cookie_name(task_id: int) -> str:
    return f"det_hub_task_{task_id}"


def cookie_value(secret: str) -> str:
    """The cookie that lets a browser in once it has shown the task's token."""
    return hmac.new(secret.encode(), _COOKIE_MESSAGE, hashlib.sha256).hexdigest()


class ProxyHandler(WebSocketHandler):
    """``/proxy/<task id>/<path>``: HTTP and WebSockets to a proxied task."""

    task: Task
    target: str
    #: Whether the caller passed on a cookie alone (a WebSocket then needs a same-origin page).
    by_cookie: bool = False
    _upstream: WebSocketClientConnection | None = None
    _stream: IOStream | None = None
    #: What the task's server sent before the caller's WebSocket was open.
    _early: list[str | bytes] | None = None

    @property
    def master(self) -> Master:
        return self.application.settings["master"]

    # --- who may pass --------------------------------------------------------------------
    async def _admit(self, task_id: int) -> None:
        """Find the task's server and check the caller may use it; remember both."""
        task, target = await self.master.tasks.proxy_target(task_id)
        secret = task.secret or ""
        header = self.request.headers.get("Authorization", "")
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        query_token = self.get_query_argument("token", "")
        if secret and query_token and hmac.compare_digest(query_token, secret):
            self.set_cookie(cookie_name(task.id), cookie_value(secret),
                            path=f"{self.master.base_url}proxy/{task.id}/", httponly=True,
                            samesite="Lax")
        elif secret and scheme.lower() == "token" and hmac.compare_digest(credential, secret):
            pass
        elif credential and scheme.lower() in ("bearer", "token"):
            principal = await self.master.users.authenticate(credential)
            if principal is None:
                raise Unauthorized("the token is not valid")
            if not self.master.tasks.may_change(principal, task):
                raise Forbidden(f"only the owner of {TaskType(task.type).word} {task.id} or an "
                                "admin can use it")
        elif secret and hmac.compare_digest(self.get_cookie(cookie_name(task.id), ""),
                                            cookie_value(secret)):
            self.by_cookie = True
        else:
            raise Unauthorized(
                f"open {TaskType(task.type).word} {task.id} with the URL det-hub printed for it "
                "(it carries its token), or send 'Authorization: Bearer <your token>'")
        self.task, self.target = task, target
        self.master.tasks.touch(task.id)

    def _backend_headers(self, *, websocket: bool) -> HTTPHeaders:
        """The request's headers as the task's server gets them. ``Host`` and ``Origin`` stay
        as the browser sent them, so that the server's same-origin checks see one site."""
        headers = HTTPHeaders()
        for name, value in self.request.headers.get_all():
            lower = name.lower()
            if lower in HOP_BY_HOP or lower in ("authorization", "content-length"):
                continue
            if websocket and lower.startswith("sec-websocket-"):
                continue
            headers.add(name, value)
        if TaskType(self.task.type) is TaskType.NOTEBOOK and self.task.secret:
            # The Jupyter server trusts the proxy: the caller was checked here.
            headers["Authorization"] = f"token {self.task.secret}"
        return headers

    def _url(self, scheme: str) -> str:
        return f"{scheme}://{self.target}{self.request.uri}"

    # --- HTTP ----------------------------------------------------------------------------
    async def get(self, task_id: str, path: str) -> None:
        if not await self._admitted(task_id):
            return
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            shell = TaskType(self.task.type) is TaskType.SHELL
            if await (self._open_tcp() if shell else self._open_upstream()):
                await super().get(task_id, path)
            return
        await self._forward()

    async def _method(self, task_id: str, path: str) -> None:
        if await self._admitted(task_id):
            await self._forward()

    post = put = patch = delete = head = options = _method

    async def _admitted(self, task_id: str) -> bool:
        """Whether the caller may pass (:meth:`_admit`); if not, the answer says why."""
        try:
            await self._admit(int(task_id))
        except APIError as e:
            self._refuse(e)
            return False
        return True

    async def _forward(self) -> None:
        """Send the request on and stream the answer back as it arrives."""
        if TaskType(self.task.type) is TaskType.SHELL:
            self._refuse(APIError(f"shell {self.task.id} takes an SSH tunnel (a WebSocket) "
                                  f"only: det-hub shell open {self.task.id}", status=400))
            return
        relay = AnswerRelay(self)

        def on_chunk(chunk: bytes) -> None:
            self.write(chunk)
            self.flush()

        method = self.request.method or "GET"
        body = self.request.body if method in ("POST", "PUT", "PATCH") else None
        request = HTTPRequest(
            self._url("http"), method=method, headers=self._backend_headers(websocket=False),
            body=body, follow_redirects=False, decompress_response=False,
            allow_nonstandard_methods=True, connect_timeout=10, request_timeout=3600,
            header_callback=relay, streaming_callback=on_chunk)
        try:
            await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as e:
            if not relay.answered:
                self._refuse(APIError(f"{TaskType(self.task.type).word} {self.task.id} is not "
                                      f"answering: {e}", status=502))
                return
        except StreamClosedError:
            return
        if not self._finished:
            self.finish()

    def _refuse(self, error: APIError) -> None:
        """Answer with the error: a page that reloads itself to a browser waiting for a task
        to start, JSON to everyone else."""
        self.clear_header("Set-Cookie")
        self.set_status(error.status_code)
        wants_page = "text/html" in self.request.headers.get("Accept", "")
        if wants_page:
            self.set_header("Content-Type", "text/html; charset=UTF-8")
            reload = '<meta http-equiv="refresh" content="2">' \
                if isinstance(error, NotReady) and error.task.state != "TERMINATED" else ""
            self.finish(f"<!doctype html><html><head><title>det_hub</title>{reload}</head>"
                        f"<body><p>{html.escape(error.message)}</p></body></html>")
        else:
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            if isinstance(error, NotReady):
                self.set_header("Retry-After", "2")
            self.finish(error.body())

    # --- WebSockets ----------------------------------------------------------------------
    def check_origin(self, origin: str) -> bool:
        # A page of another site must not ride on the cookie; a token was checked already.
        return not self.by_cookie or urlsplit(origin).netloc == self.request.host

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        if self._upstream is not None:
            return self._upstream.selected_subprotocol
        return None

    async def _open_upstream(self) -> bool:
        """Connect to the task server's WebSocket before answering the caller's."""
        offered = [p.strip() for p in self.request.headers.get(
            "Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        request = HTTPRequest(self._url("ws"), headers=self._backend_headers(websocket=True),
                              connect_timeout=10, request_timeout=30)
        try:
            self._upstream = await websocket_connect(
                request, subprotocols=offered or None, on_message_callback=self._from_upstream,
                max_message_size=256 * 1024 * 1024)
        except (OSError, HTTPClientError) as e:
            self._refuse(APIError(f"{TaskType(self.task.type).word} {self.task.id} did not take "
                                  f"the WebSocket: {e}", status=502))
            return False
        return True

    def _from_upstream(self, message: str | bytes | None) -> None:
        if message is None:
            self.close()
            return
        self.master.tasks.touch(self.task.id)
        if self.ws_connection is None:  # still answering the caller's handshake
            self._early = [*(self._early or []), message]
            return
        try:
            self.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:
            pass

    async def _open_tcp(self) -> bool:
        """A shell's tunnel: connect to its SSH server's port."""
        host, _, port = self.target.rpartition(":")
        try:
            self._stream = await asyncio.wait_for(TCPClient().connect(host, int(port)), 10)
        except (OSError, asyncio.TimeoutError) as e:
            self._refuse(APIError(f"shell {self.task.id} is not answering: {e}", status=502))
            return False
        return True

    def open(self, *args: Any, **kwargs: Any) -> None:
        if self._stream is not None:
            asyncio.get_running_loop().create_task(self._pump_tcp(self._stream))
        for message in self._early or []:
            self.write_message(message, binary=isinstance(message, bytes))
        self._early = None

    async def _pump_tcp(self, stream: IOStream) -> None:
        """Bytes from the shell's SSH server to the caller's WebSocket."""
        try:
            while True:
                data = await stream.read_bytes(64 * 1024, partial=True)
                self.master.tasks.touch(self.task.id)
                await self.write_message(data, binary=True)
        except (StreamClosedError, WebSocketClosedError):
            pass
        finally:
            self.close()

    async def on_message(self, message: str | bytes) -> None:
        self.master.tasks.touch(self.task.id)
        data = message.encode() if isinstance(message, str) else message
        try:
            if self._stream is not None:
                await self._stream.write(data)
            elif self._upstream is not None:
                await self._upstream.write_message(message, binary=isinstance(message, bytes))
        except (StreamClosedError, WebSocketClosedError):
            self.close()

    def on_close(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        if self._stream is not None:
            self._stream.close()


class ProxyRootHandler(ProxyHandler):
    """``/proxy/<task id>`` without the slash: on to the path with it."""

    async def get(self, task_id: str) -> None:  # type: ignore[override]
        query = f"?{self.request.query}" if self.request.query else ""
        self.redirect(f"{self.master.base_url}proxy/{int(task_id)}/{query}")


def proxy_routes(base_url: str) -> list[tuple[Any, ...]]:
    """The proxy's routes below the master's base URL."""
    return [
        (rf"{base_url}proxy/(?P<task_id>\d+)/(?P<path>.*)", ProxyHandler),
        (rf"{base_url}proxy/(?P<task_id>\d+)", ProxyRootHandler),
    ]


__all__ = ["ProxyHandler", "cookie_name", "cookie_value", "proxy_routes"]
