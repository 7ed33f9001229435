from __future__ import annotations

from pathlib import Path

import pytest
from fake_master import FakeMaster

from det_hub.client import Client, data_dir, resolve_master, resolve_token


def test_master_order() -> None:
    env = {"DET_HUB_MASTER": "http://env-host:9000"}
    assert resolve_master("http://arg-host:1", env) == "http://arg-host:1"
    assert resolve_master(None, env) == "http://env-host:9000"
    assert resolve_master(None, {}) == "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("localhost:8080", "http://localhost:8080"),
        ("http://h:1/", "http://h:1"),
        ("https://hub.example/services/det-hub/", "https://hub.example/services/det-hub"),
        ("http://h:1/api/v1", "http://h:1"),
    ],
)
def test_master_normalised(given: str, expected: str) -> None:
    assert resolve_master(given, {}) == expected


def test_data_dir(tmp_path: Path) -> None:
    assert data_dir({"DET_HUB_DATA_DIR": str(tmp_path)}) == tmp_path
    assert data_dir({}) == Path.home() / ".det_hub"


def test_token_order(tmp_path: Path) -> None:
    (tmp_path / "admin-token").write_text("file-token\n")
    env = {"DET_HUB_DATA_DIR": str(tmp_path), "DET_HUB_TOKEN": "env-token"}
    local = "http://127.0.0.1:8080"

    assert resolve_token("arg-token", local, env) == "arg-token"
    assert resolve_token(None, local, env) == "env-token"
    del env["DET_HUB_TOKEN"]
    assert resolve_token(None, local, env) == "file-token"
    assert resolve_token(None, "http://localhost:8080", env) == "file-token"


def test_admin_token_file_only_for_local_master(tmp_path: Path) -> None:
    (tmp_path / "admin-token").write_text("file-token")
    env = {"DET_HUB_DATA_DIR": str(tmp_path)}
    assert resolve_token(None, "http://gpu-cluster:8080", env) is None


def test_no_token_anywhere(tmp_path: Path) -> None:
    assert resolve_token(None, "http://127.0.0.1:8080", {"DET_HUB_DATA_DIR": str(tmp_path)}) is None


def test_client_uses_env_and_sends_token(
    monkeypatch: pytest.MonkeyPatch, fake_master: FakeMaster, tmp_path: Path
) -> None:
    fake_master.json("GET", "/me", {"user": {"id": 1, "username": "admin", "admin": True}})
    monkeypatch.setenv("DET_HUB_MASTER", fake_master.url)
    monkeypatch.setenv("DET_HUB_TOKEN", "env-token")

    client = Client()
    user = client.me()

    assert client.master == fake_master.url
    assert user.username == "admin" and user.admin
    assert fake_master.calls("GET", "/me")[0].headers["authorization"] == "Bearer env-token"


def test_client_reads_admin_token_file(
    monkeypatch: pytest.MonkeyPatch, fake_master: FakeMaster, tmp_path: Path
) -> None:
    fake_master.json("GET", "/health", {"status": "ok", "version": "0.1.0"})
    (tmp_path / "admin-token").write_text("written-by-master\n")
    monkeypatch.setenv("DET_HUB_DATA_DIR", str(tmp_path))

    assert Client(fake_master.url).health() == {"status": "ok", "version": "0.1.0"}
    assert fake_master.requests[0].headers["authorization"] == "Bearer written-by-master"


def test_no_token_sends_no_header(fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/health", {"status": "ok", "version": "0.1.0"})
    Client(fake_master.url).health()
    assert "authorization" not in fake_master.requests[0].headers


def test_a_token_saved_by_login_is_used_for_its_master_only(tmp_path: Path) -> None:
    from det_hub.client._settings import save_token, saved_tokens

    env = {"DET_HUB_DATA_DIR": str(tmp_path)}
    hub = "https://hub.example/services/det-hub"
    path = save_token(hub, "hub-token", env)
    assert path.stat().st_mode & 0o777 == 0o600
    assert resolve_token(None, hub, env) == "hub-token"
    assert resolve_token(None, "https://other.example", env) is None
    assert resolve_token(None, hub, {**env, "DET_HUB_TOKEN": "env"}) == "env"
    save_token(hub, None, env)
    assert saved_tokens(env) == {} and resolve_token(None, hub, env) is None
