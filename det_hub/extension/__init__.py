"""The det_hub jupyter-server extension: the notebook server as the browser's way to the master.

Once enabled (the wheel installs ``etc/jupyter/jupyter_server_config.d/det_hub.json``, or pass
``--ServerApp.jpserver_extensions='{"det_hub.extension": True}'``), the server answers

- ``<base_url>det-hub/api/v1/<path>``: the master's REST API, every method, with the master
  token added on the way, so that code in the browser never holds it;
- ``<base_url>det-hub/config``: where the master is, who the token belongs to, and det_hub's
  version, for the JupyterLab panel;
- ``POST <base_url>det-hub/launch``: an experiment created from a config file and a context
  directory on this server (see :mod:`det_hub.extension.launch`);
- ``<base_url>det-hub/checkpoints/<uuid>/download``: a checkpoint's files as a ``.tar.gz``;
- ``<base_url>det-hub/static/plotly.min.js``: Plotly.js, which the notebook widgets' charts
  (:mod:`det_hub.widgets`) load once per page.

All need the notebook server's own login (its token or cookie). The master and token come
from ``DET_HUB_MASTER`` and ``DET_HUB_TOKEN`` (see :class:`MasterConnection` for the rest).
"""

from __future__ import annotations

from typing import Any

from det_hub.extension.errors import MasterNotConfigured
from det_hub.extension.handlers import routes
from det_hub.extension.master import MasterConnection

#: Below this, the context archives the master accepts could not pass through the server.
_LARGEST_BODY = 160 * 1024 * 1024


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where jupyter-server finds this extension: this module."""
    return [{"module": "det_hub.extension"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Add the det_hub routes to a running jupyter-server's application."""
    master = MasterConnection(config=serverapp.config, parent=serverapp)
    web_app = serverapp.web_app
    web_app.settings["det_hub_master"] = master
    web_app.add_handlers(".*$", routes(web_app.settings["base_url"]))
    if serverapp.max_body_size < _LARGEST_BODY:
        serverapp.log.warning(
            "det_hub: ServerApp.max_body_size is %d bytes; experiment contexts of up to %d "
            "bytes will be refused before they reach the master",
            serverapp.max_body_size, _LARGEST_BODY)
    serverapp.log.info("det_hub: the master API is served under %sdet-hub/api/v1/ (master: %s)",
                       web_app.settings["base_url"], master.master_url or "not set")


__all__ = ["MasterConnection", "MasterNotConfigured", "routes"]
