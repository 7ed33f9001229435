"""A small HTTP session for the trial-side endpoints of the master.

Training code talks to the master only through this wrapper: it adds the allocation token,
applies timeouts, turns JSON error bodies into :class:`MasterError`, and retries calls that are
safe to repeat while the master is unreachable (it may restart in the middle of an experiment).

It is built on the standard library's :mod:`http.client` rather than ``requests``: every trial
process makes these calls, and importing ``requests`` (urllib3, charset detection, idna, its
certificate bundle) cost a trial about 0.2 s of CPU before its first batch, more than a short
trial trains. Connections are kept alive, one per thread; HTTPS verifies the master's
certificate against the system's certificate authorities, or the bundle that
``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` names. Proxies are not used:
a trial talks to its own cluster's master.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import select
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from det_hub.nonfinite import fast_dumps

if TYPE_CHECKING:
    import http.client
    import ssl

logger = logging.getLogger("det_hub.core")

API_PREFIX = "/api/v1"

# Status codes that mean "the master is there but cannot answer now": try again later.
_RETRY_STATUSES = frozenset({502, 503, 504})

#: The longest wait a ``Retry-After`` header may impose before the next try, in seconds.
MAX_RETRY_AFTER_S = 30.0


class MasterError(Exception):
    """An error answer from the master.

    Attributes:
        status: The HTTP status code (0 when the master could not be reached at all).
        error: The one-sentence ``error`` of the JSON body, or the response text.
        details: The ``details`` list of the JSON body (empty when absent).
    """

    def __init__(self, status: int, error: str, details: list[Any] | None = None) -> None:
        self.status = status
        self.error = error
        self.details = list(details or [])
        text = f"master answered {status}: {error}" if status else f"master unreachable: {error}"
        if self.details:
            text += f" (details: {self.details})"
        super().__init__(text)


def api_base_url(master_url: str) -> str:
    """The API root for a master URL.

    ``DET_HUB_MASTER`` and the cluster-info ``master_url`` name the server
    (``http://127.0.0.1:8080`` or ``https://hub/services/det-hub``); the API lives under
    ``/api/v1`` below it. A URL that already ends in ``/api/v1`` is taken as it is.
    """
    url = master_url.rstrip("/")
    if url.endswith(API_PREFIX):
        return url
    return url + API_PREFIX


class MasterSession:
    """HTTP calls to one master with one allocation token.

    Args:
        master_url: The master's URL (see :func:`api_base_url`).
        token: The allocation token, sent as ``Authorization: Bearer``; None sends none.
        timeout: Seconds allowed for one request unless a call says otherwise.
        retry_deadline: How long, in seconds, a retried call keeps trying before giving up.
        sleep: The sleep function used between retries (tests pass a fast one).

    Raises:
        ValueError: ``master_url`` is not an ``http`` or ``https`` URL with a host.
    """

    def __init__(
        self,
        master_url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        retry_deadline: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = api_base_url(master_url)
        parts = urllib.parse.urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the master URL {master_url!r} is not an http:// or https:// URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        try:
            self._port = parts.port
        except ValueError as exc:
            raise ValueError(f"the master URL {master_url!r} has a bad port: {exc}") from None
        self._base_path = parts.path
        self.timeout = timeout
        self.retry_deadline = retry_deadline
        self._sleep = sleep
        self._headers = {"Accept": "application/json", "Connection": "keep-alive",
                         "User-Agent": "det_hub.core"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._tls: ssl.SSLContext | None = None
        # An HTTPConnection carries one exchange at a time; the metric thread, the preemption
        # thread and the training thread each keep their own through this local.
        self._local = threading.local()
        self._connections: list[http.client.HTTPConnection] = []
        self._connections_lock = threading.Lock()

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            import ssl

            bundle = next((os.environ[name] for name in
                           ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
                           if os.environ.get(name)), None)
            self._tls = ssl.create_default_context(cafile=bundle)
        return self._tls

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        """This thread's connection, a new one when the master closed the idle one."""
        import http.client  # on first use: `import det_hub.core` stays light

        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and _dropped(conn):
            conn.close()
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                                   context=self._tls_context())
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._connections_lock:
            if conn in self._connections:
                self._connections.remove(conn)

    def close(self) -> None:
        """Close every connection this session opened."""
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()

    def get(
        self,
        path: str,
        params: dict[str, Any] | None = None,
        *,
        retry: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """GET ``path`` (relative to ``/api/v1``) and return the decoded JSON body."""
        return self.request("GET", path, params=params, retry=retry, timeout=timeout)

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        retry: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """POST ``body`` as JSON to ``path`` and return the decoded JSON body.

        POSTs are retried only when the caller says repeating it is harmless (``retry=True``).
        """
        return self.request("POST", path, json_body=body, retry=retry, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        retry: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Send one request, retrying with backoff when ``retry`` and the failure is transient.

        Transient means: the connection failed or timed out, or the master answered 502/503/504
        (503 while its database is unavailable). The wait between tries doubles from 0.25 s
        up to 10 s, unless the answer's ``Retry-After`` asks for another (bounded by
        :data:`MAX_RETRY_AFTER_S`); the last try is made at the deadline. Any other error
        status raises :class:`MasterError` at once.

        Raises:
            MasterError: The master answered an error, or stayed unreachable past
                ``retry_deadline`` (then ``status`` is 0).
            ValueError: ``json_body`` holds a NaN or an infinity, which JSON cannot carry.
        """
        target = self._base_path + (path if path.startswith("/") else "/" + path)
        if params:
            target += "?" + urllib.parse.urlencode(params, doseq=True)
        headers = dict(self._headers)
        payload: bytes | None = None
        if json_body is not None:
            payload = fast_dumps(json_body)
            headers["Content-Type"] = "application/json"
        if method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(payload or b""))
        deadline = time.monotonic() + self.retry_deadline
        delay = 0.25
        tries = 0
        while True:
            tries += 1
            retry_after: float | None = None
            answer = self._exchange(method, path, target, payload, headers,
                                    timeout if timeout is not None else self.timeout)
            if isinstance(answer, MasterError):
                failure = answer
            else:
                status, reason, response_headers, content = answer
                if status < 400:
                    if tries > 1:
                        logger.info("%s %s went through after %d tries", method, path, tries)
                    return _decode(content)
                failure = _error_from(status, reason, content)
                if status not in _RETRY_STATUSES:
                    raise failure
                retry_after = retry_after_seconds(response_headers.get("Retry-After"))
            remaining = deadline - time.monotonic()
            if not retry or remaining <= 0:
                raise failure
            # The master says when to come back (its database is restarting, say); a wait it
            # asks for past MAX_RETRY_AFTER_S is cut short, never past the deadline.
            wait = min(retry_after if retry_after is not None else delay, remaining)
            # One warning per call that has to wait; the tries after it are routine.
            logger.log(logging.WARNING if tries == 1 else logging.DEBUG,
                       "%s %s failed (%s); retrying in %.1f s, until %.0f s from now",
                       method, path, failure, wait, remaining)
            self._sleep(wait)
            delay = min(delay * 2, 10.0)

    def _exchange(self, method: str, path: str, target: str, payload: bytes | None,
                  headers: Mapping[str, str], timeout: float
                  ) -> tuple[int, str, http.client.HTTPMessage, bytes] | MasterError:
        """One request and its whole answer; a :class:`MasterError` with status 0 when the
        master could not be reached or the exchange broke off."""
        import http.client

        conn = self._connection(timeout)
        try:
            conn.request(method, target, body=payload, headers=dict(headers))
            resp = conn.getresponse()
            content = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._forget(conn)
            return MasterError(0, f"{method} {path}: {str(exc) or type(exc).__name__}")
        if resp.will_close:
            self._forget(conn)
        return resp.status, resp.reason, resp.headers, content


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the master: its socket reads as
    ready (the end of the stream, or bytes nobody asked for), as urllib3 judges it."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        poller = select.poll()  # not select.select: it refuses descriptors past 1023
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def retry_after_seconds(value: str | None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds from now, at most
    :data:`MAX_RETRY_AFTER_S`; None when absent or unreadable.

    The header holds whole seconds or an HTTP date (RFC 9110, 10.2.3).
    """
    if value is None or not value.strip():
        return None
    import email.utils

    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def _decode(content: bytes) -> Any:
    if not content:
        return {}
    try:
        return json.loads(content)
    except ValueError:
        return {"text": content.decode("utf-8", "replace")}


def _error_from(status: int, reason: str, content: bytes) -> MasterError:
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        details = body.get("details")
        return MasterError(status, str(body["error"]), details if isinstance(details, list) else None)
    text = content.decode("utf-8", "replace").strip()
    return MasterError(status, text or reason or "error")
