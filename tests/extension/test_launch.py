"""What the JupyterLab panel asks of the server extension beyond the master's API: an
experiment created from a config file and a context directory on the notebook server
(``POST det-hub/launch``), and a checkpoint's files as one download
(``GET det-hub/checkpoints/<uuid>/download``).

The request parsing and the packing are tested on their own; then a real ``jupyter_server``
(under a hub-like ``base_url``) is called as a browser would, against a real master.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from det_hub.client import MAX_CONTEXT_BYTES
from det_hub.extension.errors import BadPath, BadRequest, NotFound, TooLarge
from det_hub.extension.launch import (
    LaunchRequest,
    experiment_body,
    parse_launch,
    resolve_in_root,
)
from det_hub.testing import MasterProcess, free_port

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "tests" / "e2e" / "contexts" / "steps"
BASE = "/user/alice/"


def _config(name: str = "from-files", length: int = 4) -> str:
    return yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
        "hyperparameters": {"report_every": 2},
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": length}},
    })


def _names(body: dict[str, object]) -> list[str]:
    archive = base64.b64decode(str(body["context"]))
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return sorted(tar.getnames())


# ---------------------------------------------------------------- parsing and packing


def test_parse_launch_defaults_the_context_to_the_configs_folder() -> None:
    assert parse_launch({"config_path": "exp/mnist/const.yaml"}) == LaunchRequest(
        "exp/mnist/const.yaml", "exp/mnist", True)
    assert parse_launch({"config_path": "const.yaml", "context_dir": "", "activate": False}) \
        == LaunchRequest("const.yaml", "", False)


def test_parse_launch_names_every_wrong_field() -> None:
    with pytest.raises(BadRequest) as caught:
        parse_launch({"config_path": "", "context_dir": 3, "activate": "yes", "pool": "x"})
    assert caught.value.status == 400
    assert sorted(d["path"] for d in caught.value.details) == [
        "activate", "config_path", "context_dir", "pool"]
    with pytest.raises(BadRequest):
        parse_launch(["const.yaml"])


def test_paths_stay_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "exp").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (root / "exp" / "out").symlink_to(tmp_path / "secret")
    assert resolve_in_root(root, "exp", "context_dir") == (root / "exp").resolve()
    assert resolve_in_root(root, "", "context_dir") == root.resolve()
    for bad in ("../secret", "exp/../../secret", "/etc", "exp/out"):
        with pytest.raises(BadPath):
            resolve_in_root(root, bad, "context_dir")


def test_the_body_holds_the_config_and_the_packed_context(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    shutil.copytree(STEPS, exp)
    (exp / "const.yaml").write_text(_config())
    (exp / "big.bin").write_bytes(b"x" * 1000)
    (exp / ".detignore").write_text("*.bin\n")
    (exp / "__pycache__").mkdir()
    (exp / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"")

    body = experiment_body(tmp_path, LaunchRequest("exp/const.yaml", "exp", False))

    assert body["config"] == _config()
    assert body["activate"] is False
    # The client's packing: .detignore honoured (and left behind), __pycache__ left out.
    assert _names(body) == ["const.yaml", "train.py"]


def test_missing_files_and_oversized_contexts_are_refused(tmp_path: Path) -> None:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "const.yaml").write_text(_config())
    with pytest.raises(NotFound, match="no config file"):
        experiment_body(tmp_path, LaunchRequest("exp/other.yaml", "exp"))
    with pytest.raises(NotFound, match="no directory"):
        experiment_body(tmp_path, LaunchRequest("exp/const.yaml", "nowhere"))
    with pytest.raises(NotFound):
        experiment_body(tmp_path, LaunchRequest("exp", "exp"))
    # A sparse file is as large as it says, and is refused before anything is read.
    with open(exp / "weights.bin", "wb") as f:
        f.truncate(MAX_CONTEXT_BYTES + 1)
    with pytest.raises(TooLarge) as caught:
        experiment_body(tmp_path, LaunchRequest("exp/const.yaml", "exp"))
    assert caught.value.status == 413


# ---------------------------------------------------------------- through a notebook server


class Server:
    """``python -m jupyter_server`` under ``BASE`` with the det_hub extension, told of a
    master; its root directory is ``root``."""

    def __init__(self, root: Path, master: MasterProcess, log_dir: Path) -> None:
        self.root = root
        self.port = free_port()
        self.token = f"nb-{self.port}"
        self.url = f"http://127.0.0.1:{self.port}{BASE}"
        self.log_path = log_dir / "server.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
        env.update(DET_HUB_MASTER=master.url, DET_HUB_TOKEN=master.token,
                   DET_HUB_DATA_DIR=str(log_dir / "no-data"))
        args = [sys.executable, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
                "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}",
                "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
                f"--ServerApp.base_url={BASE}", "--ServerApp.port_retries=0",
                '--ServerApp.jpserver_extensions={"det_hub.extension": True}']
        if os.geteuid() == 0:
            args.append("--allow-root")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, env=env, cwd=root, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                if requests.get(self.url + "api/status", headers=self.auth, timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, self.log_path.read_text()
            time.sleep(0.1)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def call(self, method: str, path: str, authenticated: bool = True,
             **kwargs: object) -> requests.Response:
        return requests.request(method, f"{self.url}det-hub/{path}",
                                headers=self.auth if authenticated else {}, timeout=60,
                                **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def server(module_master: MasterProcess,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("launch")
    root = base / "root"
    shutil.copytree(STEPS, root / "exp")
    (root / "exp" / "const.yaml").write_text(_config())
    (root / "exp" / "broken.yaml").write_text("searcher: {}\n")
    started = Server(root, module_master, base)
    yield started
    started.stop()


@pytest.mark.slow
def test_launch_creates_the_experiment(server: Server, module_master: MasterProcess) -> None:
    r = server.call("POST", "launch", json={"config_path": "exp/const.yaml"})
    assert r.status_code == 201, r.text
    experiment = r.json()["experiment"]
    assert experiment["name"] == "from-files"
    assert module_master.experiment(experiment["id"])["name"] == "from-files"
    archive = module_master.api("GET", f"/experiments/{experiment['id']}/context").content
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["broken.yaml", "const.yaml", "train.py"]
    assert module_master.wait_state(experiment["id"])["state"] == "COMPLETED"


@pytest.mark.slow
def test_launch_errors_say_what_is_wrong(server: Server, module_master: MasterProcess) -> None:
    before = len(module_master.get("/experiments?limit=1000")["experiments"])

    r = server.call("POST", "launch", json={"config_path": "exp/broken.yaml"})
    # The master's own verdict on the config, details and all.
    direct = module_master.api("POST", "/experiments", json={"config": "searcher: {}\n"})
    assert (r.status_code, r.json()) == (400, direct.json())

    r = server.call("POST", "launch", json={"config_path": "exp/missing.yaml"})
    assert r.status_code == 404 and "missing.yaml" in r.json()["error"]
    r = server.call("POST", "launch", json={"config_path": "exp/const.yaml",
                                            "context_dir": "../.."})
    assert r.status_code == 400 and "leads out of" in r.json()["error"]
    r = server.call("POST", "launch", data="{not json")
    assert r.status_code == 400 and r.json()["error"] == "the body is not JSON"
    r = server.call("POST", "launch", json={"config_path": "exp/const.yaml"},
                    authenticated=False)
    assert r.status_code == 403

    assert len(module_master.get("/experiments?limit=1000")["experiments"]) == before


@pytest.mark.slow
def test_checkpoint_download_is_a_tar_of_its_files(server: Server,
                                                   module_master: MasterProcess) -> None:
    eid = module_master.create_ok(yaml.safe_load(_config("checkpointed", length=6)))
    assert module_master.wait_state(eid)["state"] == "COMPLETED"
    [checkpoint] = module_master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
    uuid = checkpoint["uuid"]

    r = server.call("GET", f"checkpoints/{uuid}/download")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/gzip"
    assert f'filename="checkpoint-{uuid}.tar.gz"' in r.headers["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        state = tar.extractfile(f"{uuid}/state.json")
        assert state is not None and json.load(state) == {"step": 6}

    assert server.call("GET", "checkpoints/not-a-uuid/download").status_code == 400
    missing = server.call("GET", "checkpoints/00000000-0000-4000-8000-000000000000/download")
    assert missing.status_code == 404 and missing.json()["error"]
    assert server.call("GET", f"checkpoints/{uuid}/download",
                       authenticated=False).status_code == 403
