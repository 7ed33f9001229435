"""det_hub.hub.configure and the config det-hub up writes, read as JupyterHub reads them."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from traitlets.config import Config

from det_hub.hub import CUSTOM_SCOPES, configure
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
    assert set(CUSTOM_SCOPES) <= set(c.JupyterHub.custom_scopes)
    assert set(CUSTOM_SCOPES) <= set(c.Spawner.server_token_scopes)
    assert service["oauth_client_allowed_scopes"] == sorted(CUSTOM_SCOPES)
    assert [s["name"] for s in c.JupyterHub.services] == ["other", "det-hub"]


def test_configure_can_add_the_idle_culler() -> None:
    c = Config()
    configure(c, cull_idle=600)
    culler = c.JupyterHub.services[-1]
    assert culler["name"] == "idle-culler"
    assert culler["command"][1:] == ["-m", "jupyterhub_idle_culler", "--timeout=600",
                                     "--cull-every=300"]
    [role] = [r for r in c.JupyterHub.load_roles if r["name"] == "idle-culler"]
    assert "delete:servers" in role["scopes"] and role["services"] == ["idle-culler"]


def test_det_hub_up_writes_a_config_jupyterhub_can_load(tmp_path: Path) -> None:
    args = parse_args(["--port", "18000", "--master-port", "18082", "--hub-port", "18081"])
    text = hub_config(args, tmp_path, "/opt/chp")
    c = Config()
    exec(compile(text, "jupyterhub_config.py", "exec"),
         {"c": c, "load_subconfig": lambda path: None})
    assert (c.JupyterHub.port, c.JupyterHub.hub_bind_url) == (18000, "http://127.0.0.1:18081")
    assert c.ConfigurableHTTPProxy.command == ["/opt/chp"]
    assert c.ConfigurableHTTPProxy.command_umask == 0o077  # JupyterHub's default is 0o007
    assert c.DummyAuthenticator.password == password(tmp_path)
    assert (tmp_path / "hub-password").stat().st_mode & 0o777 == 0o600
    assert c.JupyterHub.services[0]["url"] == "http://127.0.0.1:18082"
    assert c.Spawner.environment["PATH"].startswith(str(Path(sys.executable).parent) + ":")
    assert c.Authenticator.admin_users == {"admin"}
    assert c.Spawner.pre_spawn_hook.__module__ == "det_hub.hub.first_run"


def test_det_hub_up_runs_notebooks_in_containers_only_where_it_can(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from det_hub.hub import up

    monkeypatch.setattr(up, "docker_engine", lambda: None)
    assert up.choose_spawner("auto", "det-hub:cpu") == ("local", None)
    with pytest.raises(SystemExit, match="no Docker engine answers"):
        up.choose_spawner("docker", "det-hub:cpu")
    monkeypatch.setattr(up, "docker_engine", lambda: "unix:///run/x.sock")
    monkeypatch.setattr(up, "has_image", lambda host, image: image == "mine:1")
    assert up.choose_spawner("auto", "det-hub:cpu") == ("local", None)  # no image: no pull
    assert up.choose_spawner("auto", "mine:1") == ("docker", "unix:///run/x.sock")
    assert up.choose_spawner("local", "mine:1") == ("local", None)

    args = parse_args(["--image", "mine:1"])
    master_config = up.docker_master_config(tmp_path, "unix:///run/x.sock")
    c = Config()
    exec(compile(hub_config(args, tmp_path, "/chp", "docker", str(master_config)), "cfg",
                 "exec"), {"c": c, "load_subconfig": lambda path: None})
    assert c.JupyterHub.spawner_class == "det_hub.spawner.DetSpawner"
    assert (c.DockerSpawner.image, c.DetSpawner.resource_pool) == ("mine:1", "notebooks")
    assert c.JupyterHub.services[0]["command"][-2:] == ["--config", str(master_config)]
    agents = Config()
    exec(compile(master_config.read_text(), "master", "exec"), {"c": agents})
    assert agents.MasterApp.docker_agents == [
        {"agent_id": "docker", "docker_host": "unix:///run/x.sock", "resource_pool": "notebooks"}]
