"""Plotly.js for every browser-side chart of ours, and how both servers send it
(:func:`send_plotly`). Nothing comes from the internet.

Two bundles: the full one that the ``plotly`` Python package ships (:func:`plotly_js`), for the
notebook widgets, whose figures may hold any trace; and det_hub's own partial bundle, built
with the JupyterLab panel (``labextension/plotly``) and installed beside it, with only what the
master's pages draw: line and scatter charts and parallel coordinates (:func:`pages_plotly_js`,
a quarter of the size, parsed a second sooner on a cold load). The pages fall back to the full
bundle where the partial one is not installed.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tornado.web import RequestHandler

#: Where the panel's build puts the partial bundle, inside the panel's installed folder.
PAGES_BUNDLE = Path("det-hub-labextension") / "det-hub-plotly.min.js"


@functools.cache
def plotly_js() -> Path | None:
    """Plotly.js as the ``plotly`` Python package bundles it; None without the package."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


def _labextension_folders() -> list[Path]:
    """Where JupyterLab looks for installed panels, this environment's first."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:
        return [Path(sys.prefix) / "share" / "jupyter" / "labextensions"]
    return [Path(folder) for folder in jupyter_path("labextensions")]


@functools.cache
def pages_plotly_js() -> Path | None:
    """The Plotly.js the master's pages load: the partial bundle where installed, else the
    full one (None where neither is)."""
    for folder in _labextension_folders():
        path = folder / PAGES_BUNDLE
        if path.is_file():
            return path
    return plotly_js()


@functools.cache
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def plotly_version(path: Path | None = None) -> str | None:
    """What names a Plotly.js bundle's content in its URL (``?v=``): a digest of the file
    (``path``, by default the full bundle); None where it is not installed."""
    path = plotly_js() if path is None else path
    return None if path is None else _digest(path)


@functools.cache
def plotly_gzip(path: Path) -> bytes:
    """A Plotly.js bundle gzip-compressed (about a third of its size), made once per process."""
    return gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)


async def send_plotly(handler: RequestHandler, path: Path | None, *, cache: str,
                      missing: str) -> None:
    """Answer ``handler``'s GET with the Plotly.js bundle at ``path``: gzip-compressed to a
    browser that takes it; asked for under its digest (``?v=``), kept by the browser a year
    (``cache``: ``public`` or ``private``), otherwise asked for again each time and answered
    304 while it has not changed; 404 with ``missing`` where it is not installed (``path``
    None)."""
    from tornado.web import HTTPError

    if path is None:
        raise HTTPError(404, missing)
    version = _digest(path)
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
        handler.finish(await asyncio.to_thread(plotly_gzip, path))
    else:
        handler.finish(await asyncio.to_thread(path.read_bytes))


__all__ = ["PAGES_BUNDLE", "pages_plotly_js", "plotly_gzip", "plotly_js", "plotly_version",
           "send_plotly"]
