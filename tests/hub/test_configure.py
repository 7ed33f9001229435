"""det_hub.hub.configure and the config det-hub up writes, read as JupyterHub reads them."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from traitlets.config import Config

from det_hub.hub import configure
from det_hub.hub.up import hub_config, parse_args, password


def test_configure_adds_the_service_its_roles_and_the_notebook_environment() -> None:
    c = Config()
    c.JupyterHub.services.append({"name": "other", "url": "http://127.0.0.1:9"})
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "read:groups"]}]
    c.Spawner.environment = {"A": "1"}
    configure(c, port=8123, data_dir="/srv/det", db_url="sqlite:///x.db")

    other, service = c.JupyterHub.services
    assert other["name"] == "other"
    assert service["name"] == "det-hub" and service["url"] == "http://127.0.0.1:8123"
    assert service["command"][:4] == [sys.executable, "-m", "det_hub.cli.main", "master"]
    assert service["command"][4:] == ["--data-dir", "/srv/det", "--db", "sqlite:///x.db"]
    assert service["display"] and service["oauth_no_confirm"]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["user"]["scopes"] == ["access:services!service=det-hub", "read:groups", "self"]
    assert roles["det-hub-service"] == {"name": "det-hub-service", "services": ["det-hub"],
                                        "scopes": ["read:users", "list:users"]}
    assert "access:services!service=det-hub" in c.Spawner.server_token_scopes
    env = c.Spawner.environment
    assert env["A"] == "1"
    assert env["DET_HUB_MASTER"] == "http://127.0.0.1:8123/services/det-hub"
    assert env["DET_HUB_TOKEN"](types.SimpleNamespace(api_token="abc")) == "abc"


def test_det_hub_up_writes_a_config_jupyterhub_can_load(tmp_path: Path) -> None:
    args = parse_args(["--port", "18000", "--master-port", "18082", "--hub-port", "18081"])
    text = hub_config(args, tmp_path, "/opt/chp")
    c = Config()
    exec(compile(text, "jupyterhub_config.py", "exec"),
         {"c": c, "load_subconfig": lambda path: None})
    assert (c.JupyterHub.port, c.JupyterHub.hub_bind_url) == (18000, "http://127.0.0.1:18081")
    assert c.ConfigurableHTTPProxy.command == ["/opt/chp"]
    assert c.DummyAuthenticator.password == password(tmp_path)
    assert (tmp_path / "hub-password").stat().st_mode & 0o777 == 0o600
    assert c.JupyterHub.services[0]["url"] == "http://127.0.0.1:18082"
    assert c.Spawner.environment["PATH"].startswith(str(Path(sys.executable).parent) + ":")
    assert c.Authenticator.admin_users == {"admin"}
