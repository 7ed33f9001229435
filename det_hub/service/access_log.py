"""The master's access log: tornado's line per request, less the secrets a URL may carry.

A browser opens a task's notebook or TensorBoard with the task's access token in the query
(``/proxy/5/lab?token=...``), and tornado logs the whole URI of every failed request (and of
every request at INFO); the log names no token.
"""

from __future__ import annotations

import re

import tornado.web
from tornado.log import access_log

#: Query arguments whose values never reach the log.
SECRET_ARGUMENTS = ("token",)

_SECRET_VALUE = re.compile(
    r"([?&](?:" + "|".join(map(re.escape, SECRET_ARGUMENTS)) + r")=)[^&#]*", re.IGNORECASE)


def redact(uri: str) -> str:
    """``uri`` with the values of :data:`SECRET_ARGUMENTS` replaced by ``[secret]``."""
    return _SECRET_VALUE.sub(r"\1[secret]", uri)


def log_request(handler: tornado.web.RequestHandler) -> None:
    """Tornado's ``log_function``: its own line and levels, with :func:`redact` applied."""
    status = handler.get_status()
    if status < 400:
        log_method = access_log.info
    elif status < 500:
        log_method = access_log.warning
    else:
        log_method = access_log.error
    request = handler.request
    log_method("%d %s %s (%s) %.2fms", status, request.method, redact(request.uri or ""),
               request.remote_ip, 1000.0 * request.request_time())


__all__ = ["SECRET_ARGUMENTS", "log_request", "redact"]
