"""det_hub inside JupyterHub: one call in ``jupyterhub_config.py``.

    from det_hub.hub import configure
    configure(c, data_dir="/srv/det_hub", db_url="postgresql+psycopg://det@db/det_hub")

runs the det_hub master as a managed hub service at ``/services/det-hub/`` (listed in the hub's
Services menu), lets every hub user reach it (and hub admins administer it), and gives each
user's notebook server what the det_hub CLI, SDK and magics need to reach it as that user:
``DET_HUB_MASTER`` and ``DET_HUB_TOKEN`` (the server's own hub token).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from det_hub.env_names import MASTER_ENV, TOKEN_ENV

# The scopes live in det_hub.scopes, which the master reads too; they are named here as well,
# for hub configs that import them from the package they configure the hub with.
from det_hub.scopes import ADMIN_SCOPE, CLUSTER_SCOPE, CUSTOM_SCOPES, MANAGE_SCOPE

SERVICE_NAME = "det-hub"


def service_url(port: int) -> str:
    """Where the master listens for the hub (and the hub's proxy forwards to)."""
    return f"http://127.0.0.1:{port}"


def configure(
    c: Any,
    *,
    name: str = SERVICE_NAME,
    port: int = 8082,
    data_dir: str | Path | None = None,
    db_url: str | None = None,
    master_config: str | Path | None = None,
    master_args: Sequence[str] = (),
    cull_idle: float | None = None,
) -> None:
    """Add the det_hub master to a JupyterHub config.

    Args:
        c: The config object of ``jupyterhub_config.py``.
        name: The service's name: it is served at ``/services/<name>/``.
        port: The port the master listens on, on 127.0.0.1.
        data_dir: The master's data directory (default ``~/.det_hub`` of the hub's user).
        db_url: The master's store (default SQLite in the data directory).
        master_config: A ``det_hub_config.py`` with agents, resource pools, ...
        master_args: More ``det-hub master`` options.
        cull_idle: Stop notebook servers idle this many seconds (jupyterhub-idle-culler, as
            a hub service), so that the slots of DetSpawner's servers go back to the queue.
    """
    argv = [sys.executable, "-m", "det_hub.cli.main", "master"]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    if db_url is not None:
        argv += ["--db", db_url]
    if master_config is not None:
        argv += ["--config", str(master_config)]
    argv += list(master_args)
    url = service_url(port)
    services = list(_current(c.JupyterHub, "services", []))
    services.append({
        "name": name, "url": url, "command": argv, "display": True,
        # Users have signed in to the hub already; no second consent page.
        "oauth_no_confirm": True,
        # A browser's sign-in carries the det_hub scopes its user holds.
        "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
    })
    c.JupyterHub.services = services

    loaded = list(_current(c.JupyterHub, "load_roles", []))
    roles = [r for r in loaded if r.get("name") != "user"]
    user_role = next((r for r in loaded if r.get("name") == "user"),
                     {"name": "user", "scopes": ["self"]})
    roles.append({**user_role,
                  "scopes": sorted({*user_role.get("scopes", []),
                                    f"access:services!service={name}"})})
    # The master reads users to know who is a hub admin (a notebook server's token may not).
    roles.append({"name": f"{name}-service", "scopes": ["read:users", "list:users"],
                  "services": [name]})
    if cull_idle is not None:
        services.append({"name": "idle-culler", "command": [
            sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={int(cull_idle)}",
            f"--cull-every={max(1, int(cull_idle) // 2)}"]})
        c.JupyterHub.services = services
        roles.append({"name": "idle-culler", "services": ["idle-culler"], "scopes": [
            "list:users", "read:users:activity", "read:servers", "delete:servers"]})
    c.JupyterHub.load_roles = roles

    c.JupyterHub.custom_scopes = {**_current(c.JupyterHub, "custom_scopes", {}),
                                  **CUSTOM_SCOPES}
    # A notebook server's token: to the master, with the det_hub scopes its user holds.
    c.Spawner.server_token_scopes = [
        "users:activity!user", "access:servers!server", f"access:services!service={name}",
        *sorted(CUSTOM_SCOPES)]
    environment = dict(_current(c.Spawner, "environment", {}))
    environment.setdefault(MASTER_ENV, f"{url}/services/{name}")
    environment.setdefault(TOKEN_ENV, _server_token)
    c.Spawner.environment = environment


def _current(section: Any, key: str, empty: Any) -> Any:
    """A setting as the config holds it so far (a list or dict), ``empty`` when unset."""
    from traitlets.config import LazyConfigValue

    value = section.get(key) if hasattr(section, "get") else None
    if isinstance(value, LazyConfigValue):
        return value.get_value(empty)
    return value if value is not None else empty


def _server_token(spawner: Any) -> str:
    """A user's notebook server talks to the master with its own hub token."""
    return str(spawner.api_token)


__all__ = ["ADMIN_SCOPE", "CLUSTER_SCOPE", "CUSTOM_SCOPES", "MANAGE_SCOPE", "SERVICE_NAME",
           "configure", "service_url"]
