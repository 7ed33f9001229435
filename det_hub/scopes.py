"""The JupyterHub scopes that give det_hub powers short of making someone a hub admin.

``det_hub.hub.configure`` declares them to the hub (``c.JupyterHub.custom_scopes``); the
master reads them from the token of whoever calls it. Grant them with a role in
``c.JupyterHub.load_roles``. Filters (``!user=...``) are not honoured: a scope is granted
without one, or not at all.
"""

from __future__ import annotations

ADMIN_SCOPE = "custom:det-hub:admin"
MANAGE_SCOPE = "custom:det-hub:manage"
CLUSTER_SCOPE = "custom:det-hub:cluster"
#: Each scope with what it gives, as ``c.JupyterHub.custom_scopes`` takes them.
CUSTOM_SCOPES = {
    ADMIN_SCOPE: {"description": "Everything a det_hub admin may do."},
    MANAGE_SCOPE: {"description": "Pause, activate, kill, archive and reprioritise anyone's "
                                  "det_hub experiments, and kill anyone's tasks."},
    CLUSTER_SCOPE: {"description": "Enable, disable and drain det_hub agents, and reorder "
                                   "any job of the queue."},
}

__all__ = ["ADMIN_SCOPE", "CLUSTER_SCOPE", "CUSTOM_SCOPES", "MANAGE_SCOPE"]
