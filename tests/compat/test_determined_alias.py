"""``import determined`` inside a trial process resolves to det_hub, through the import alias.

Most tests start a fresh interpreter with ``PYTHONPATH=SITE_DIR``, exactly as the agent starts a
trial, so the alias is installed by ``sitecustomize`` before the test's code runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import det_hub.core
from det_hub.compat import SITE_DIR, install, real_determined_available, uninstall
from det_hub.compat._alias import AliasFinder, target_of

REPO = Path(__file__).resolve().parents[2]


def _env(*paths: Path | str, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    base.pop("PYTHONPATH", None)
    base["PYTHONPATH"] = os.pathsep.join(str(p) for p in (SITE_DIR, *paths, REPO))
    base.update(extra)
    return base


def _python(
    code: str,
    *paths: Path | str,
    cwd: Path | None = None,
    args: list[str] | None = None,
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, *(args or ["-c", textwrap.dedent(code)])]
    return subprocess.run(
        command,
        env=_env(*paths, **extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_site_dir_holds_the_sitecustomize() -> None:
    assert SITE_DIR.is_dir()
    assert (SITE_DIR / "sitecustomize.py").is_file()


def test_outside_a_cluster() -> None:
    out = _ok(
        _python(
            """
            import logging, sys
            import determined as det
            print(det.get_cluster_info())
            print(det.LOG_FORMAT)
            print(det.__version__)
            print(det.__name__, det.__spec__.name)
            # Importing the top level must not drag torch in.
            print("torch" in sys.modules, "det_hub.pytorch" in sys.modules)
            logging.basicConfig(format=det.LOG_FORMAT, level=logging.INFO, stream=sys.stdout)
            logging.getLogger("x").info("hello")
            """
        )
    )
    import det_hub

    assert out[0] == "None"
    assert out[1] == "%(levelname)s: [%(process)s] %(name)s: %(message)s"
    assert out[2] == det_hub.__version__
    assert out[3] == "determined determined"
    assert out[4] == "False False"
    assert out[5].startswith("INFO: [") and out[5].endswith("] x: hello")


def test_cluster_info_in_a_trial(tmp_path: Path) -> None:
    info_file = tmp_path / "cluster_info.json"
    info_file.write_text(
        json.dumps(
            {
                "master_url": "http://127.0.0.1:8080",
                "cluster_id": "c1",
                "agent_id": "local",
                "allocation_id": "7.0",
                "task_id": "trial-7",
                "task_type": "TRIAL",
                "slot_ids": [0],
                "container_addrs": ["127.0.0.1"],
                "trial": {
                    "trial_id": 7,
                    "experiment_id": 1,
                    "trial_seed": 123,
                    "hparams": {"learning_rate": 0.5, "n_filters1": 16},
                    "config": {"name": "mnist", "data": {"data_dir": "/data"}},
                    "steps_completed": 400,
                    "latest_checkpoint": "ckpt-uuid",
                },
                "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
            }
        )
    )
    out = _ok(
        _python(
            """
            import determined as det
            info = det.get_cluster_info()
            print(type(info).__module__, type(info).__name__)
            print(sorted(info.trial.hparams.items()))
            print(info.latest_checkpoint, info.trial.trial_id, info.allocation_id)
            print(info.trial.user_data)
            """,
            DET_HUB_CLUSTER_INFO=str(info_file),
        )
    )
    assert out == [
        "det_hub.core._cluster_info ClusterInfo",
        "[('learning_rate', 0.5), ('n_filters1', 16)]",
        "ckpt-uuid 7 7.0",
        "{'data_dir': '/data'}",
    ]


def test_subpackages_are_det_hub_modules() -> None:
    out = _ok(
        _python(
            """
            import sys
            import determined as det
            from determined import core
            import determined.core
            from determined.core import init
            import det_hub.core
            print(core is det_hub.core, determined.core is det_hub.core, det.core is core)
            print(init is det_hub.core.init)
            # The shared module keeps its own name and spec.
            print(core.__name__, core.__spec__.name)
            print(sys.modules["determined.core"] is det_hub.core)
            # Deeper names follow the same path, as the same objects.
            import determined.core._cluster_info as ci
            print(ci is sys.modules["det_hub.core._cluster_info"])
            try:
                import determined.keras
            except ModuleNotFoundError as exc:
                print("missing", exc.name)
            """
        )
    )
    assert out == [
        "True True True",
        "True",
        "det_hub.core det_hub.core",
        "True",
        "True",
        "missing determined.keras",
    ]


def test_pytorch_is_lazy_and_shared() -> None:
    spec = importlib.util.find_spec("det_hub.pytorch")
    if spec is None or spec.origin is None:
        # A directory without __init__.py yet is only a namespace package.
        pytest.skip("det_hub.pytorch is not in the tree yet")
    names = [
        "PyTorchTrial",
        "PyTorchTrialContext",
        "DataLoader",
        "TorchData",
        "init",
        "Trainer",
        "Batch",
        "Epoch",
        "Reducer",
        "PyTorchCallback",
    ]
    out = _ok(
        _python(
            f"""
            import sys
            import determined as det
            print("det_hub.pytorch" in sys.modules)
            import determined.pytorch
            import det_hub.pytorch
            print(determined.pytorch is det_hub.pytorch, det.pytorch is det_hub.pytorch)
            from determined.pytorch import PyTorchTrial
            print(PyTorchTrial is det_hub.pytorch.PyTorchTrial)
            print([n for n in {names!r} if not hasattr(det.pytorch, n)])
            """
        )
    )
    assert out == ["False", "True True", "True", "[]"]


def _launcher_or_skip(name: str) -> None:
    if importlib.util.find_spec(f"det_hub.launch.{name}") is None:
        pytest.skip(f"det_hub.launch.{name} is not in the tree yet")


def test_python_m_launcher_help() -> None:
    _launcher_or_skip("torch_distributed")
    proc = _python("", args=["-m", "determined.launch.torch_distributed", "--help"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "usage" in out.lower()


def test_python_m_launcher_runs_workers(tmp_path: Path) -> None:
    _launcher_or_skip("torch_distributed")
    worker = tmp_path / "worker.py"
    worker.write_text(
        textwrap.dedent(
            """
            import os
            import determined as det
            import det_hub.core
            print("worker", os.environ["RANK"], os.environ["WORLD_SIZE"], det.core is det_hub.core)
            """
        )
    )
    proc = _python(
        "",
        cwd=tmp_path,
        args=[
            "-m",
            "determined.launch.torch_distributed",
            "--nproc",
            "2",
            "--",
            sys.executable,
            str(worker),
        ],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if "worker" in line)
    assert len(lines) == 2, proc.stdout
    assert lines[0].endswith("worker 0 2 True") and lines[1].endswith("worker 1 2 True")


def test_horovod_launcher_resolves() -> None:
    _launcher_or_skip("horovod")
    out = _ok(
        _python(
            """
            import determined.launch.horovod as h
            import det_hub.launch.horovod
            print(h is det_hub.launch.horovod)
            """
        )
    )
    assert out == ["True"]


def test_runpy_runs_an_aliased_module_as_main(tmp_path: Path) -> None:
    # A stand-in package served under the alias checks what ``-m`` gives the module it runs:
    # __main__ as its name, the alias spec, its real file, working relative imports, and no
    # second copy imported under the det_hub name.
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("VALUE = 42\n")
    (pkg / "tool.py").write_text(
        textwrap.dedent(
            """
            import sys
            from . import helper
            if __name__ == "__main__":
                print(__name__, __spec__.name, __package__, __file__.endswith("tool.py"))
                print(helper.VALUE, helper is sys.modules["probe_pkg.helper"])
                print("probe_pkg.tool" in sys.modules, sys.argv[1:])
            """
        )
    )
    out = _ok(
        _python(
            """
            import runpy, sys
            from det_hub.compat import _alias
            _alias.SUBPACKAGES["probe"] = "probe_pkg"
            sys.argv = ["tool", "--flag"]
            runpy.run_module("determined.probe.tool", run_name="__main__", alter_sys=True)
            """,
            tmp_path,
        )
    )
    assert out == [
        "__main__ determined.probe.tool determined.probe True",
        "42 True",
        "False ['--flag']",
    ]


def test_real_determined_is_not_shadowed(tmp_path: Path) -> None:
    real = tmp_path / "site" / "determined"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "core.py").write_text("REAL_CORE = True\n")
    out = _ok(
        _python(
            """
            import sys
            import determined
            import determined.core
            from det_hub.compat import _alias
            print(determined.REAL, determined.core.REAL_CORE, determined.core.__name__)
            print(_alias.installed_finder() is None)
            """,
            tmp_path / "site",
        )
    )
    assert out == ["True True determined.core", "True"]


def test_determined_beside_the_script_is_not_shadowed(tmp_path: Path) -> None:
    # The script's directory joins sys.path only after sitecustomize ran, so the finder is in
    # place; it must still step aside for a context that brings its own determined/.
    real = tmp_path / "determined"
    real.mkdir()
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "core.py").write_text("REAL_CORE = True\n")
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import determined
            import determined.core
            print(determined.REAL, determined.core.REAL_CORE)
            """
        )
    )
    out = _ok(_python("", cwd=tmp_path, args=["train.py"]))
    assert out == ["True True"]


def test_users_sitecustomize_still_runs(tmp_path: Path) -> None:
    user_site = tmp_path / "user_site"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITECUSTOMIZE'] = __file__\n"
    )
    out = _ok(
        _python(
            """
            import os, sys
            import determined as det
            print(os.environ.get("USER_SITECUSTOMIZE"))
            print(sys.modules["sitecustomize"].__file__)
            print(det.get_cluster_info())
            """,
            user_site,
        )
    )
    assert out == [
        str(user_site / "sitecustomize.py"),
        str(user_site / "sitecustomize.py"),
        "None",
    ]


def test_target_map() -> None:
    assert target_of("determined") == "det_hub.compat.determined"
    assert target_of("determined.core") == "det_hub.core"
    assert target_of("determined.pytorch") == "det_hub.pytorch"
    assert target_of("determined.launch.torch_distributed") == "det_hub.launch.torch_distributed"
    assert target_of("determined.launch.horovod") == "det_hub.launch.horovod"
    assert target_of("determined.exec") == "det_hub.exec"
    assert target_of("determined.keras") is None
    assert target_of("determinedx.core") is None
    assert target_of("det_hub.core") is None


@pytest.fixture
def clean_alias() -> Iterator[None]:
    uninstall()
    yield
    uninstall()


@pytest.mark.usefixtures("clean_alias")
def test_install_is_idempotent_in_process() -> None:
    if real_determined_available():
        pytest.skip("a real determined is installed in this environment")
    assert install() is True
    assert install() is True
    finders = [f for f in sys.meta_path if isinstance(f, AliasFinder)]
    assert len(finders) == 1 and sys.meta_path[0] is finders[0]
    import determined  # type: ignore[import-not-found]
    import determined.core  # type: ignore[import-not-found]

    assert determined.core is det_hub.core
    uninstall()
    assert not any(isinstance(f, AliasFinder) for f in sys.meta_path)
    assert "determined" not in sys.modules and "determined.core" not in sys.modules
    # det_hub's own module is untouched by the alias coming and going.
    assert det_hub.core.__spec__ is not None and det_hub.core.__spec__.name == "det_hub.core"
