"""The service wing's layout: the master is a small composition root over managers, no class is
a grab-bag, every public method says what it does, and the HTTP side goes through managers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import det_hub.service

SERVICE = Path(det_hub.service.__file__).parent

#: The most lines ``master.py`` may have, and the most methods a class of the service may.
MASTER_LINES = 400
MAX_METHODS = 30

#: The managers the master is made of; each public method of theirs is called by handlers,
#: pages or other managers, and is documented.
MANAGERS = {
    "auth.py": "UserManager", "experiments.py": "ExperimentManager", "trials.py": "TrialManager",
    "checkpoints.py": "CheckpointManager", "registry.py": "ModelRegistry",
    "tasks.py": "TaskManager", "jobs.py": "JobQueue", "launch.py": "Launcher",
    "webhooks.py": "WebhookManager", "master.py": "Master",
}


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]


def _methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_master_is_a_small_composition_root() -> None:
    lines = len((SERVICE / "master.py").read_text().splitlines())
    assert lines < MASTER_LINES, f"det_hub/service/master.py has {lines} lines"


def test_no_class_of_the_service_has_more_than_thirty_methods() -> None:
    big = [f"{path.relative_to(SERVICE)}: {cls.name} has {len(_methods(cls))} methods"
           for path in sorted(SERVICE.rglob("*.py")) for cls in _classes(path)
           if len(_methods(cls)) > MAX_METHODS]
    assert big == []


def test_every_public_method_of_a_manager_has_a_docstring() -> None:
    missing = []
    for module, name in MANAGERS.items():
        [cls] = [c for c in _classes(SERVICE / module) if c.name == name]
        missing += [f"{module}: {name}.{m.name}" for m in _methods(cls)
                    if not m.name.startswith("_") and ast.get_docstring(m) is None]
    assert missing == []


def test_handlers_pages_and_streams_reach_the_store_only_through_managers() -> None:
    files = [*sorted((SERVICE / "handlers").glob("*.py")), SERVICE / "pages.py",
             SERVICE / "events.py"]
    found = [f"{path.relative_to(SERVICE)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\.store\.|\.runs\b|master\.cluster\b", line)]
    assert found == []
