"""What ``det-hub`` loads before it answers: nothing heavy for ``--help``, and for
``experiment list`` the REST client and the table renderer only.

Each command runs in a fresh interpreter, as the console script runs it, and reports the
modules it ended with; these are compared with what a bare interpreter loads. A top-level
``import requests`` (or of the SDK, the config parser, yaml ...) in any CLI module shows up
here. The time these take is measured by bench/cli_start.py, not here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from api_data import EXPERIMENT, ME
from fake_master import FakeMaster

from det_hub.cli import experiment as experiment_cli
from det_hub.client import Client

#: Runs det-hub's entry point as the console script does (arguments from sys.argv) and writes
#: its exit code and the modules it loaded to the file named by the first argument.
RUNNER = """\
import json, sys
out = sys.argv.pop(1)
{prelude}
from det_hub.cli.main import main
code = main()
with open(out, "w") as f:
    json.dump({{"code": code, "modules": sorted(sys.modules)}}, f)
"""

#: Packages no command may load before it runs, nor ``--help`` at all: the SDK and what it
#: stands on, the config parser, and the master's and the trainer's sides.
HEAVY = ("det_hub.client", "det_hub.config", "det_hub.console", "det_hub.searcher",
         "det_hub.service", "det_hub.store", "det_hub.core", "pydantic", "pydantic_core",
         "requests", "urllib3", "yaml", "tqdm", "tabulate", "pathspec", "tornado",
         "sqlalchemy", "torch", "numpy", "asyncio", "ssl", "http", "tarfile")

#: Of det_hub, what ``experiment list`` needs: the REST client (its objects and settings,
#: without the context packer), the table renderer, and the pure modules they read.
LIST_NEEDS = frozenset({
    "det_hub", "det_hub._lazy", "det_hub.defaults", "det_hub.env_names", "det_hub.nonfinite",
    "det_hub.states",
    "det_hub.client", "det_hub.client._checkpoint_files", "det_hub.client._client",
    "det_hub.client._errors", "det_hub.client._objects", "det_hub.client._registry",
    "det_hub.client._settings", "det_hub.client._webhooks",
    "det_hub.console", "det_hub.console.render",
})


def loaded_modules(tmp_path: Path, argv: Sequence[str], prelude: str = "") -> dict[str, Any]:
    """``{"code": exit code, "modules": [...], "out": stdout}`` of ``det-hub ARGV`` run in a
    fresh interpreter (after ``prelude``)."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER.format(prelude=prelude), str(out), *argv],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    result["out"] = done.stdout
    return result


def modules_of(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    """The packages of :data:`HEAVY` that ``modules`` holds (or holds a part of)."""
    return sorted(h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in modules))


def outside_stdlib(modules: set[str]) -> list[str]:
    """The modules of ``modules`` that are neither det_hub's nor the standard library's."""
    return sorted(m for m in modules if m.split(".")[0] not in sys.stdlib_module_names
                  and m.split(".")[0] != "det_hub")


@pytest.fixture(scope="module")
def bare() -> set[str]:
    """What the interpreter loads by itself (site, .pth files) before any det_hub code."""
    return modules_of("pass")


@pytest.mark.parametrize("argv", [["--help"], ["experiment", "--help"], ["experiment", "list",
                                                                          "--bogus"]])
def test_parsing_loads_the_standard_library_only(
        tmp_path: Path, bare: set[str], argv: list[str]) -> None:
    ran = loaded_modules(tmp_path, argv)
    assert ran["code"] in (0, 2)
    added = set(ran["modules"]) - bare
    assert heavy(added) == [], (
        f"det-hub {' '.join(argv)} loads {heavy(added)} before parsing its arguments: a CLI "
        "module imports it at module level; import it in the command that uses it")
    assert outside_stdlib(added) == [], (
        f"det-hub {' '.join(argv)} loads {outside_stdlib(added)}, which are not part of "
        "the standard library")
    if argv == ["--help"]:
        assert "experiment" in ran["out"] and "usage: det-hub" in ran["out"]


def test_the_guard_catches_a_top_level_import(tmp_path: Path, bare: set[str]) -> None:
    """A module that imports requests on its way in is reported by name."""
    ran = loaded_modules(tmp_path, ["--help"], prelude="import requests")
    assert "requests" in heavy(set(ran["modules"]) - bare)


def test_experiment_list_loads_only_the_client_and_the_renderer(
        tmp_path: Path, bare: set[str], fake_master: FakeMaster) -> None:
    fake_master.json("GET", "/me", ME)
    fake_master.json("GET", "/experiments", {
        "experiments": [EXPERIMENT], "pagination": {"offset": 0, "limit": 100, "total": 1}})

    ran = loaded_modules(tmp_path, ["-m", fake_master.url, "--token", "t", "experiment", "list"])

    assert ran["code"] == 0 and "mnist-const" in ran["out"], ran["out"]
    added = set(ran["modules"]) - bare
    ours = {m for m in added if m.split(".")[0] == "det_hub" and not m.startswith("det_hub.cli")}
    more = sorted(ours - LIST_NEEDS)
    assert more == [], f"det-hub experiment list loads {more}, which listing does not need"
    # Beyond the standard library: what the HTTP client and the table renderer load themselves.
    allowed = modules_of("import requests, tabulate")
    libraries = sorted({m.split(".")[0] for m in set(outside_stdlib(added)) - allowed})
    assert libraries == [], f"det-hub experiment list loads {libraries}, which listing does not need"
    # Of the heavy packages, only the HTTP stack and the renderer: no config parser, yaml,
    # pydantic, context packer (pathspec, tarfile) or progress bars.
    unneeded = set(heavy(added)) - {"det_hub.client", "det_hub.console", "requests", "urllib3",
                                    "http", "ssl", "tabulate"}
    assert sorted(unneeded) == [], f"det-hub experiment list loads {sorted(unneeded)}"


def test_each_state_verb_names_a_client_method() -> None:
    """The verbs name their Client method as a string; each must exist."""
    for verb, (method, _help) in experiment_cli._ACTIONS.items():
        assert callable(getattr(Client, method, None)), f"experiment {verb}: Client.{method}"


@pytest.mark.parametrize("package", ["det_hub.client", "det_hub.console", "det_hub.storage"])
def test_lazy_exports_give_every_public_name(package: str) -> None:
    """The packages the CLI reads load their parts on first use; each public name still
    comes from the module that defines it."""
    module = importlib.import_module(package)
    exports: dict[str, str] = module._EXPORTS
    assert sorted(exports) == sorted(module.__all__)
    for name, where in exports.items():
        source = importlib.import_module(f"{package}.{where}")
        expected = source if name == where else getattr(source, name)
        assert getattr(module, name) is expected, f"{package}.{name}"
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018
