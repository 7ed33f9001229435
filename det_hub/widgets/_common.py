"""What the widgets share: the client they talk through, a background stream reader, and
HTML tables."""

from __future__ import annotations

import html
import logging
import threading
from collections.abc import Callable
from typing import Any

from det_hub.client import Client

log = logging.getLogger("det_hub.widgets")


def client_or_default(client: Client | None) -> Client:
    """The given client, or one for ``DET_HUB_MASTER`` with ``DET_HUB_TOKEN``."""
    return client if client is not None else Client()


class Background:
    """Runs ``work(stop)`` on a daemon thread until it returns or :meth:`stop` is called.

    ``work`` must look at ``stop`` (a :class:`threading.Event`) often; errors are logged, as a
    widget has nowhere to raise them to.
    """

    def __init__(self, name: str, work: Callable[[threading.Event], None]) -> None:
        self._name = name
        self._work = work
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The error that ended the work, if one did.
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop = threading.Event()
        self.error = None
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._work(self._stop)
        except Exception as exc:  # a widget has no caller to raise to
            self.error = exc
            log.warning("%s stopped: %s", self._name, exc)



def format_number(value: Any) -> str:
    """A float to six significant digits, None as blank, anything else as ``str``."""
    return f"{value:.6g}" if isinstance(value, float) else ("" if value is None else str(value))


def html_table(header: list[str], rows: list[list[Any]]) -> str:
    """An HTML table of ``rows`` under ``header``, every cell escaped."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="det-hub-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
