"""An HTTP request to the master that can be cut off at any moment.

tornado's ``AsyncHTTPClient`` has no way to abandon a request in flight: a log stream that
follows a quiet trial keeps its connection to the master open until the trial writes again,
even after the browser has gone. :class:`UpstreamRequest` gives each proxied request a client
of its own whose TCP connections it remembers, so that :meth:`UpstreamRequest.abort` can close
them.
"""

from __future__ import annotations

from typing import Any

from tornado.httpclient import HTTPRequest, HTTPResponse
from tornado.iostream import IOStream
from tornado.netutil import Resolver
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from tornado.tcpclient import TCPClient

#: No limit worth the name on what the master streams back (logs that follow a trial, a
#: checkpoint download): it is passed on chunk by chunk, never held whole.
_LARGEST_ANSWER = 1 << 60


class _RememberingTCPClient(TCPClient):
    """A ``TCPClient`` that keeps the streams it opened, so they can be closed from outside."""

    def __init__(self, resolver: Resolver) -> None:
        super().__init__(resolver=resolver)
        self.streams: list[IOStream] = []

    async def connect(self, *args: Any, **kwargs: Any) -> IOStream:
        stream = await super().connect(*args, **kwargs)
        self.streams.append(stream)
        return stream


class UpstreamRequest:
    """One request to the master, on a client of its own that :meth:`abort` can cut off."""

    def __init__(self) -> None:
        self._client = SimpleAsyncHTTPClient(force_instance=True,
                                             max_body_size=_LARGEST_ANSWER)
        self._tcp = _RememberingTCPClient(self._client.resolver)
        # The client opens its connections through this attribute; ours remembers them.
        self._client.tcp_client = self._tcp
        #: Whether :meth:`abort` was called.
        self.aborted = False

    async def fetch(self, request: HTTPRequest) -> HTTPResponse:
        """Send the request; any status is an answer (no ``HTTPError`` for 4xx and 5xx).

        Raises:
            OSError, tornado.httpclient.HTTPClientError: the master could not be reached, or
                the connection broke (also after :meth:`abort`).
        """
        try:
            return await self._client.fetch(request, raise_error=False)
        finally:
            self._client.close()

    def abort(self) -> None:
        """Close the connection to the master; a pending :meth:`fetch` raises."""
        self.aborted = True
        for stream in self._tcp.streams:
            stream.close()


__all__ = ["UpstreamRequest"]
