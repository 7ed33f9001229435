"""The import rules of docs/architecture.md, checked on the source.

Every module of det_hub is parsed with ``ast`` (nothing is imported) and its imports, at module
level or inside functions, under ``TYPE_CHECKING`` or not, are checked against the rules:

* pure code (:data:`PURE`) imports nothing that does I/O, and of det_hub only pure code;
* no module imports another package's private module or name (``det_hub.X._y`` from outside
  ``det_hub.X``);
* front ends (:data:`FRONT_ENDS`) never import the master's side (``det_hub.service``,
  ``det_hub.store``), nor another front end other than those :data:`FRONT_ENDS` allows;
* the packages form no import cycle, but for those in :data:`KNOWN_CYCLES`.

Every failure names the importing file, its line and the imported module. The checker itself
is tested on small source trees written to ``tmp_path``. Last, a few packages are imported in a
fresh interpreter to show what they load: the notebook's widgets, the SDK and the Core API load
neither SQLAlchemy nor the master.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOP = "det_hub"

#: Every package (and top-level module) of det_hub, by layer; docs/architecture.md describes
#: each layer. A new package gets its place here and there.
LAYERS: dict[str, str] = {
    "det_hub": "front ends",  # load_checkpoint, load_model, the %load_ext entry point
    "det_hub.config": "pure",
    "det_hub.searcher": "pure",
    "det_hub.scheduler": "pure",
    "det_hub.states": "pure",
    "det_hub.nonfinite": "pure",
    "det_hub.lttb": "pure",
    "det_hub.search_view": "pure",
    "det_hub.defaults": "pure",
    "det_hub.env_names": "pure",
    "det_hub.scopes": "pure",
    "det_hub.contract": "pure",
    "det_hub._lazy": "pure",
    "det_hub.archive": "I/O",
    "det_hub.ports": "I/O",
    "det_hub._relay": "I/O",
    "det_hub.plotly_bundle": "I/O",
    "det_hub.storage": "I/O",
    "det_hub.store": "I/O",
    "det_hub.service": "master",
    "det_hub.agents": "agents",
    "det_hub.core": "training",
    "det_hub.pytorch": "training",
    "det_hub.data": "training",
    "det_hub.exec": "training",
    "det_hub.launch": "training",
    "det_hub.compat": "training",
    "det_hub.client": "front ends",
    "det_hub.console": "front ends",
    "det_hub.cli": "front ends",
    "det_hub.notebook": "front ends",
    "det_hub.widgets": "front ends",
    "det_hub.extension": "front ends",
    "det_hub.hub": "front ends",
    "det_hub.spawner": "front ends",
    "det_hub.testing": "testing",
    "det_hub.testing_s3": "testing",
}

#: The pure code: packages, modules, and ``det_hub.storage.gc`` (the retention policy, which
#: the storage backends around it do not make impure).
PURE = ("det_hub.config", "det_hub.searcher", "det_hub.scheduler", "det_hub.states",
        "det_hub.nonfinite", "det_hub.lttb", "det_hub.search_view", "det_hub.defaults",
        "det_hub.env_names", "det_hub.scopes", "det_hub.contract", "det_hub.storage.gc")

#: Libraries that do I/O (databases, network, servers, processes, object storage, containers);
#: pure code imports none of them.
IO_LIBRARIES = frozenset({
    "aiohttp", "aiosqlite", "alembic", "asyncio", "asyncpg", "asyncssh", "boto3", "botocore",
    "docker", "dockerspawner", "http", "httpx", "jupyter_server", "jupyterhub", "psycopg",
    "psycopg2", "requests", "s3transfer", "selectors", "socket", "sqlalchemy", "sqlite3", "ssl",
    "subprocess", "tornado", "urllib", "urllib3",
})

#: The front ends, each with the other front ends it may import: all stand on the SDK, and the
#: CLI and the notebook magics share :mod:`det_hub.console`.
FRONT_ENDS: dict[str, frozenset[str]] = {
    "det_hub.client": frozenset(),
    "det_hub.console": frozenset({"det_hub.client"}),
    "det_hub.cli": frozenset({"det_hub.client", "det_hub.console"}),
    "det_hub.notebook": frozenset({"det_hub.client", "det_hub.console"}),
    "det_hub.widgets": frozenset({"det_hub.client"}),
    "det_hub.extension": frozenset({"det_hub.client"}),
}

#: The master's side, which front ends reach through the REST API only.
MASTER_SIDE = ("det_hub.service", "det_hub.store")

#: The import cycles between packages there are today, each with why it is there. A cycle that
#: is gone must leave this list too.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

#: The imports of another package's private module there are today, by importing file and
#: imported module, each with why it is there. One that is gone must leave this list too.
KNOWN_PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One name an import statement brings in."""

    path: str  #: The importing file, relative to the source root: ``det_hub/cli/user.py``.
    line: int
    importer: str  #: The importing module: ``det_hub.cli.user``.
    module: str  #: The module imported (``from M import N``: ``M.N`` when that is a module).
    name: str | None = None  #: ``N`` of ``from M import N`` when ``M.N`` is not a module.
    from_package: bool = False  #: Whether ``module`` is a package (of det_hub).

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def imported(self) -> str:
        """What is imported, in full: the module, or ``module.name``."""
        return f"{self.module}.{self.name}" if self.name else self.module


def within(module: str, unit: str) -> bool:
    """Whether ``module`` is ``unit`` or inside it."""
    return module == unit or module.startswith(unit + ".")


def unit_of(module: str) -> str:
    """The package (or top-level module) of det_hub that ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the det_hub package under ``root``, by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((root / TOP).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def read_imports(root: Path) -> list[Import]:
    """The imports of every module of det_hub under ``root``, relative ones resolved."""
    modules = module_files(root)
    imports: list[Import] = []
    for importer, path in modules.items():
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imports.extend(Import(rel, node.lineno, importer, alias.name)
                               for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _from_module(importer, path.name == "__init__.py", node)
                in_package = base in modules and modules[base].name == "__init__.py"
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    imports.append(
                        Import(rel, node.lineno, importer, full) if full in modules
                        else Import(rel, node.lineno, importer, base, alias.name, in_package))
    return imports


def _from_module(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module ``from ... import`` names, relative levels resolved against ``importer``."""
    if not node.level:
        return node.module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


# -- the rules --------------------------------------------------------------------------------

def impure_imports(imports: Iterable[Import]) -> Iterator[str]:
    """Pure code importing an I/O library, or det_hub code that is not pure."""
    for imp in imports:
        pure = next((p for p in PURE if within(imp.importer, p)), None)
        if pure is None:
            continue
        if imp.module.split(".")[0] in IO_LIBRARIES:
            yield (f"{imp.where}: {imp.importer} imports {imp.module}, which does I/O; "
                   f"{pure} is pure")
        elif within(imp.module, TOP) and not any(within(imp.module, p) for p in PURE):
            yield (f"{imp.where}: {imp.importer} imports {imp.imported}, which is not pure; "
                   f"{pure} is pure")


def private_imports(imports: Iterable[Import],
                    known: Mapping[tuple[str, str], str]) -> Iterator[str]:
    """Modules importing another package's private module or name, but for those ``known``
    (by importing file and imported module), and ``known`` ones that are gone."""
    seen: set[tuple[str, str]] = set()
    for imp in imports:
        if not within(imp.module, TOP):
            continue
        names = imp.imported.split(".")
        for i in range(2, len(names)):
            if not is_private(names[i]):
                continue
            is_name = imp.name is not None and i == len(names) - 1
            # The package the private thing is in: a private name's module, when that is not
            # a package itself, is one of the package's modules.
            owner = ".".join(names[:i - 1] if is_name and not imp.from_package else names[:i])
            private = ".".join(names[:i + 1])
            if not within(imp.importer, owner):
                if (imp.path, private) in known:
                    seen.add((imp.path, private))
                else:
                    yield (f"{imp.where}: {imp.importer} imports {private}, a private "
                           f"{'name' if is_name else 'module'} of {owner}; import a public "
                           f"name of {owner}")
            break
    for path, private in known:
        if (path, private) not in seen:
            yield (f"{path} imports {private} no more: take it out of KNOWN_PRIVATE_IMPORTS")


def front_end_imports(imports: Iterable[Import]) -> Iterator[str]:
    """Front ends importing the master's side, or a front end they may not import."""
    for imp in imports:
        front = unit_of(imp.importer)
        if front not in FRONT_ENDS or not within(imp.module, TOP):
            continue
        target = unit_of(imp.module)
        if any(within(imp.module, m) for m in MASTER_SIDE):
            yield (f"{imp.where}: {imp.importer} imports {imp.module}, the master's side; "
                   f"{front} is a front end and reaches the master through det_hub.client")
        elif target in FRONT_ENDS and target != front and target not in FRONT_ENDS[front]:
            yield (f"{imp.where}: {imp.importer} imports {imp.module}, another front end; "
                   f"{front} may import {_names(FRONT_ENDS[front])} of the front ends "
                   "(share code through det_hub.console or det_hub.client)")


def _names(units: Iterable[str]) -> str:
    return ", ".join(sorted(units)) or "none"


def package_graph(imports: Iterable[Import]) -> dict[str, dict[str, Import]]:
    """Which package imports which, each edge with the first import that makes it."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in imports:
        if not within(imp.module, TOP):
            continue
        source, target = unit_of(imp.importer), unit_of(imp.module)
        if source != target:
            graph.setdefault(source, {}).setdefault(target, imp)
    return graph


def strongly_connected(graph: Mapping[str, Mapping[str, object]]) -> list[frozenset[str]]:
    """The components of more than one package in which each reaches every other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, {})):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_through(graph: Mapping[str, Mapping[str, Import]],
                  members: frozenset[str]) -> list[Import]:
    """The imports of one shortest cycle among ``members``, from the first of them by name."""
    start = min(members)
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt, imp in sorted(graph.get(node, {}).items()):
            if nxt == start:
                return paths[node] + [imp]
            if nxt in members and nxt not in paths:
                paths[nxt] = paths[node] + [imp]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # not reached: members are strongly connected


def cycle_problems(imports: Iterable[Import],
                   known: Mapping[frozenset[str], str]) -> Iterator[str]:
    """Cycles between packages that are not in ``known``, and ``known`` ones that are gone."""
    graph = package_graph(imports)
    found = strongly_connected(graph)
    for members in found:
        if members in known:
            continue
        path = cycle_through(graph, members)
        chain = " -> ".join([unit_of(path[0].importer)] + [unit_of(i.module) for i in path])
        yield (f"import cycle {chain}: "
               + "; ".join(f"{i.where}: {i.importer} imports {i.module}" for i in path))
    for members in known:
        if members not in found:
            yield (f"no import cycle among {_names(members)} any more: take it out of "
                   "KNOWN_CYCLES")


# -- the rules, on det_hub ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return read_imports(REPO)


def test_every_package_has_a_layer(imports: list[Import]) -> None:
    units = {unit_of(name) for name in module_files(REPO)}
    assert sorted(units - set(LAYERS)) == [], "packages without a layer: add them to LAYERS " \
        "and to docs/architecture.md"
    assert sorted(set(LAYERS) - units) == [], "LAYERS names packages that are gone"


def test_the_architecture_doc_places_every_package() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc.split("## The layers", 1)[1].split("\n## ", 1)[0]
    missing = []
    for unit in LAYERS:
        if unit == TOP:
            continue
        name = unit.split(".")[1]
        shown = f"`{name}/`" if (REPO / TOP / name).is_dir() else f"`{name}.py`"
        if shown not in table:
            missing.append(shown)
    assert missing == [], "docs/architecture.md's layers table leaves these out"


def test_pure_code_does_no_io(imports: list[Import]) -> None:
    assert list(impure_imports(imports)) == []


def test_no_module_imports_another_packages_private_parts(imports: list[Import]) -> None:
    assert list(private_imports(imports, KNOWN_PRIVATE_IMPORTS)) == []


def test_front_ends_stand_on_the_sdk_only(imports: list[Import]) -> None:
    assert list(front_end_imports(imports)) == []


def test_packages_form_no_import_cycle(imports: list[Import]) -> None:
    assert list(cycle_problems(imports, KNOWN_CYCLES)) == []


# -- the checker, on trees made to break the rules ----------------------------------------------

def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Writes ``files`` (path below ``root``: source) and every missing ``__init__.py``."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    for directory in [root / TOP, *(root / TOP).rglob("*")]:
        if directory.is_dir() and not (directory / "__init__.py").exists():
            (directory / "__init__.py").write_text("", encoding="utf-8")
    return root


def test_the_checker_resolves_relative_and_from_imports(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "det_hub/cli/main.py": """\
            from . import _render as r
            from ._connect import UserError
            from det_hub.client import Client
            """,
        "det_hub/cli/_render.py": "",
        "det_hub/cli/_connect.py": "",
    })
    found = {(i.path, i.line, i.module, i.name) for i in read_imports(root)}
    assert found == {
        ("det_hub/cli/main.py", 1, "det_hub.cli._render", None),
        ("det_hub/cli/main.py", 2, "det_hub.cli._connect", "UserError"),
        ("det_hub/cli/main.py", 3, "det_hub.client", "Client"),
    }


def test_the_checker_finds_io_in_pure_code(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "det_hub/searcher/asha.py": """\
            import math

            def fetch():
                import requests
                from det_hub.store import Store
                from det_hub.config import SearcherConfig
            """,
        "det_hub/storage/gc.py": "from sqlalchemy import select\n",
        "det_hub/storage/s3.py": "import boto3\n",
    })
    assert sorted(impure_imports(read_imports(root))) == [
        "det_hub/searcher/asha.py:4: det_hub.searcher.asha imports requests, which does I/O; "
        "det_hub.searcher is pure",
        "det_hub/searcher/asha.py:5: det_hub.searcher.asha imports det_hub.store.Store, which "
        "is not pure; det_hub.searcher is pure",
        "det_hub/storage/gc.py:1: det_hub.storage.gc imports sqlalchemy, which does I/O; "
        "det_hub.storage.gc is pure",
    ]


def test_the_checker_finds_private_imports_across_packages(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "det_hub/notebook/_errors.py": """\
            from det_hub.cli._connect import UserError
            from det_hub.notebook._args import MagicArgumentError
            import det_hub.core._http
            from det_hub.client import _settings, Client
            from det_hub.config import _helper
            from det_hub.config.parse import _check
            """,
        "det_hub/notebook/_ok.py": """\
            from det_hub.notebook._args import _private_but_ours
            from det_hub.notebook.magics import _also_ours
            """,
        "det_hub/notebook/magics.py": "",
        "det_hub/config/parse.py": "from det_hub.config._errors import _fail\n",
        "det_hub/config/_errors.py": "",
        "det_hub/notebook/_args.py": "",
        "det_hub/cli/_connect.py": "",
        "det_hub/core/_http.py": "",
        "det_hub/client/_settings.py": "",
        "det_hub/config/__init__.py": "def _helper(): ...\n",
    })
    known = {("det_hub/notebook/_errors.py", "det_hub.core._http"): "kept for now",
             ("det_hub/notebook/_errors.py", "det_hub.exec._serve"): "gone"}
    assert list(private_imports(read_imports(root), known)) == [
        "det_hub/notebook/_errors.py:1: det_hub.notebook._errors imports det_hub.cli._connect, "
        "a private module of det_hub.cli; import a public name of det_hub.cli",
        "det_hub/notebook/_errors.py:4: det_hub.notebook._errors imports "
        "det_hub.client._settings, a private module of det_hub.client; import a public name "
        "of det_hub.client",
        "det_hub/notebook/_errors.py:5: det_hub.notebook._errors imports "
        "det_hub.config._helper, a private name of det_hub.config; import a public name of "
        "det_hub.config",
        "det_hub/notebook/_errors.py:6: det_hub.notebook._errors imports "
        "det_hub.config.parse._check, a private name of det_hub.config; import a public name "
        "of det_hub.config",
        "det_hub/notebook/_errors.py imports det_hub.exec._serve no more: take it out of "
        "KNOWN_PRIVATE_IMPORTS",
    ]


def test_the_checker_keeps_front_ends_apart(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "det_hub/widgets/plot.py": """\
            from det_hub.client import Client
            from det_hub.store.lttb import lttb_indices
            from det_hub.notebook.checkpoint import checkpoint_directory
            """,
        "det_hub/notebook/views.py": """\
            from det_hub.console import render
            from det_hub.cli.experiment import best_trial
            """,
        "det_hub/client/objects.py": "from det_hub.service import app\n",
        "det_hub/notebook/checkpoint.py": "",
        "det_hub/cli/experiment.py": "",
        "det_hub/store/lttb.py": "",
        "det_hub/console/render.py": "",
    })
    problems = list(front_end_imports(read_imports(root)))
    assert [p.split(": ", 1)[0] for p in problems] == [
        "det_hub/client/objects.py:1", "det_hub/notebook/views.py:2",
        "det_hub/widgets/plot.py:2", "det_hub/widgets/plot.py:3",
    ]
    assert "imports det_hub.service, the master's side" in problems[0]
    assert "imports det_hub.cli.experiment, another front end" in problems[1]
    assert "imports det_hub.store.lttb, the master's side" in problems[2]
    assert "imports det_hub.notebook.checkpoint, another front end" in problems[3]


def test_the_checker_finds_cycles_and_stale_exceptions(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "det_hub/client/objects.py": """\
            def download():
                from det_hub.notebook.checkpoint import checkpoint_directory
            """,
        "det_hub/notebook/checkpoint.py": "from det_hub.client import Client\n",
        "det_hub/a.py": "import det_hub.b\n",
        "det_hub/b.py": "from det_hub import a\n",
        "det_hub/c.py": "from det_hub import states\n",
        "det_hub/states.py": "",
    })
    imports = read_imports(root)
    known = {frozenset({"det_hub.a", "det_hub.b"}): "a and b share a helper",
             frozenset({"det_hub.c", "det_hub.states"}): "gone"}
    assert sorted(cycle_problems(imports, known)) == [
        "import cycle det_hub.client -> det_hub.notebook -> det_hub.client: "
        "det_hub/client/objects.py:2: det_hub.client.objects imports "
        "det_hub.notebook.checkpoint; det_hub/notebook/checkpoint.py:1: "
        "det_hub.notebook.checkpoint imports det_hub.client",
        "no import cycle among det_hub.c, det_hub.states any more: take it out of "
        "KNOWN_CYCLES",
    ]


# -- what importing a front end loads -------------------------------------------------------------

#: Modules whose loading is refused, as prefixes of ``sys.modules`` names.
_MASTER = ("sqlalchemy", "alembic", "aiosqlite", "psycopg", "det_hub.store", "det_hub.service")
_TORNADO_SERVERS = ("tornado.web", "tornado.httpserver", "tornado.tcpserver", "jupyter_server")

LIGHT_IMPORTS: dict[str, tuple[str, ...]] = {
    "det_hub.widgets": _MASTER + _TORNADO_SERVERS + ("det_hub.cli", "det_hub.notebook"),
    "det_hub.client": _MASTER + _TORNADO_SERVERS + ("det_hub.notebook", "det_hub.storage"),
    # Every trial imports it: the storage it uses only, not the other backends or GC.
    "det_hub.core": _MASTER + _TORNADO_SERVERS + ("det_hub.storage.gc", "det_hub.storage.s3",
                                                  "det_hub.storage.directory"),
    "det_hub.notebook": _MASTER + _TORNADO_SERVERS + ("det_hub.cli",),
    "det_hub.cli.main": _MASTER + _TORNADO_SERVERS + ("det_hub.notebook", "det_hub.widgets"),
}


@pytest.mark.parametrize("package", sorted(LIGHT_IMPORTS))
def test_importing_a_front_end_loads_no_master(package: str) -> None:
    loaded = json.loads(subprocess.run(
        [sys.executable, "-c", f"import json, sys, {package}; print(json.dumps(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True, cwd=REPO,
    ).stdout)
    refused = [name for name in loaded
               if any(within(name, prefix) for prefix in LIGHT_IMPORTS[package])]
    assert refused == [], f"import {package} loads {', '.join(refused)}"


def test_a_tasks_runner_loads_only_what_a_forked_task_needs() -> None:
    """Every task's runner is an interpreter of its own (det_hub.agents.local_runner), started
    as the task is prepared: what only the runners of tasks they start themselves use
    (subprocess, threading), and typing, are left out of its start."""
    loaded = json.loads(subprocess.run(
        [sys.executable, "-I", "-c", "import json, sys, det_hub.agents.local_runner; "
         "print(json.dumps(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True, cwd=REPO,
    ).stdout)
    refused = [name for name in ("subprocess", "threading", "typing") if name in loaded]
    assert refused == [], f"import det_hub.agents.local_runner loads {', '.join(refused)}"
