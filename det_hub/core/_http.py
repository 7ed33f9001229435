"""A small HTTP session for the trial-side endpoints of the master.

Training code talks to the master only through this wrapper: it adds the allocation token,
applies timeouts, turns JSON error bodies into :class:`MasterError`, and retries calls that are
safe to repeat while the master is unreachable (it may restart in the middle of an experiment).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests

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
    """A ``requests.Session`` bound to one master and one allocation token.

    Args:
        master_url: The master's URL (see :func:`api_base_url`).
        token: The allocation token, sent as ``Authorization: Bearer``; None sends none.
        timeout: Seconds allowed for one request unless a call says otherwise.
        retry_deadline: How long, in seconds, a retried call keeps trying before giving up.
        sleep: The sleep function used between retries (tests pass a fast one).
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
        self.timeout = timeout
        self.retry_deadline = retry_deadline
        self._sleep = sleep
        # requests.Session is not documented as thread-safe; the metric thread, the preemption
        # thread and the training thread each get their own session through this local.
        self._local = threading.local()
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()

    def _session(self) -> requests.Session:
        # Imported on first use: `import det_hub.core` stays light for code that never talks
        # to the master (and a warm task interpreter has it imported already).
        import requests

        sess: requests.Session | None = getattr(self._local, "session", None)
        if sess is None:
            sess = requests.Session()
            sess.headers.update(self._headers)
            self._local.session = sess
            with self._sessions_lock:
                self._sessions.append(sess)
        return sess

    def close(self) -> None:
        """Close every underlying connection pool."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
        for sess in sessions:
            sess.close()

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
        """
        import requests

        url = self.base_url + (path if path.startswith("/") else "/" + path)
        deadline = time.monotonic() + self.retry_deadline
        delay = 0.25
        tries = 0
        while True:
            tries += 1
            retry_after: float | None = None
            try:
                resp = self._session().request(
                    method,
                    url,
                    params=params,
                    json=json_body,
                    timeout=timeout if timeout is not None else self.timeout,
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                failure: MasterError = MasterError(0, f"{method} {path}: {exc}")
            else:
                if resp.status_code < 400:
                    if tries > 1:
                        logger.info("%s %s went through after %d tries", method, path, tries)
                    return _decode(resp)
                failure = _error_from(resp)
                if resp.status_code not in _RETRY_STATUSES:
                    raise failure
                retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
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


def _decode(resp: requests.Response) -> Any:
    if not resp.content:
        return {}
    try:
        return resp.json()
    except ValueError:
        return {"text": resp.text}


def _error_from(resp: requests.Response) -> MasterError:
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        details = body.get("details")
        return MasterError(
            resp.status_code, str(body["error"]), details if isinstance(details, list) else None
        )
    return MasterError(resp.status_code, resp.text.strip() or resp.reason or "error")
