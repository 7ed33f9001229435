"""Plotly.js as the ``plotly`` Python package ships it, for every browser-side chart of ours:
the master's pages, the notebook server (which serves it to the notebook widgets) and the
widgets' kernel-side fallback, and how both servers send it (:func:`send_plotly`). Nothing
comes from the internet.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tornado.web import RequestHandler


@functools.cache
def plotly_js() -> Path | None:
    """Plotly.js as the ``plotly`` Python package bundles it; None without the package."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


@functools.cache
def plotly_version() -> str | None:
    """What names this Plotly.js's content in its URL (``?v=``): a digest of the file; None
    without the package."""
    path = plotly_js()
    return None if path is None else hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def plotly_gzip() -> bytes:
    """Plotly.js gzip-compressed (about a third of its 4.8 MB), made once per process."""
    path = plotly_js()
    assert path is not None
    return gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)


async def send_plotly(handler: RequestHandler, *, cache: str, missing: str) -> None:
    """Answer ``handler``'s GET with Plotly.js: gzip-compressed to a browser that takes it;
    asked for under its digest (``?v=``), kept by the browser a year (``cache``: ``public`` or
    ``private``), otherwise asked for again each time and answered 304 while it has not
    changed; 404 with ``missing`` where the ``plotly`` package is not installed."""
    from tornado.web import HTTPError

    version, path = plotly_version(), plotly_js()
    if version is None or path is None:
        raise HTTPError(404, missing)
    zipped = "gzip" in handler.request.headers.get("Accept-Encoding", "")
    handler.set_header("Content-Type", "text/javascript; charset=UTF-8")
    handler.set_header("Vary", "Accept-Encoding")
    handler.set_header("Etag", f'"{version}{"-gzip" if zipped else ""}"')
    handler.set_header("Cache-Control", f"{cache}, max-age=31536000, immutable"
                       if handler.get_query_argument("v", None) == version else "no-cache")
    if handler.check_etag_header():
        handler.set_status(304)
        handler.finish()
    elif zipped:
        handler.set_header("Content-Encoding", "gzip")
        handler.finish(await asyncio.to_thread(plotly_gzip))
    else:
        handler.finish(await asyncio.to_thread(path.read_bytes))


__all__ = ["plotly_gzip", "plotly_js", "plotly_version", "send_plotly"]
