"""The import alias that serves ``determined`` and its subpackages from det_hub.

A finder at the front of ``sys.meta_path`` answers for ``determined`` and for every name under
``determined.core``, ``determined.pytorch``, ``determined.launch`` and ``determined.exec``. The
top-level ``determined`` is a small module of its own (``det_hub/compat/determined.py``); each
subpackage name resolves to the det_hub module of the same path, as the *same* module object,
so ``determined.core is det_hub.core`` and state kept in a module is never split in two.

The finder steps aside whenever a real ``determined`` can be found by any other finder: an
installed Determined always wins over the alias.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, ModuleType

ALIAS_ROOT = "determined"

#: ``determined.<name>`` -> the det_hub package it is served from. Deeper names follow the same
#: path (``determined.launch.torch_distributed`` -> ``det_hub.launch.torch_distributed``), so
#: relative imports inside an aliased module keep working when it runs under the alias name.
SUBPACKAGES: dict[str, str] = {
    "core": "det_hub.core",
    "pytorch": "det_hub.pytorch",
    "launch": "det_hub.launch",
    "exec": "det_hub.exec",
    "common": "det_hub.compat.common",
}

_TOP_LEVEL_FILE = Path(__file__).with_name("determined.py")

_install_lock = threading.Lock()


def target_of(fullname: str) -> str | None:
    """The det_hub module that serves ``fullname``, or None when the alias has no such name.

    ``determined`` itself maps to ``det_hub.compat.determined``.
    """
    if fullname == ALIAS_ROOT:
        return "det_hub.compat.determined"
    root, dot, rest = fullname.partition(".")
    if root != ALIAS_ROOT or not dot:
        return None
    head, _, tail = rest.partition(".")
    base = SUBPACKAGES.get(head)
    if base is None:
        return None
    return f"{base}.{tail}" if tail else base


def _is_alias_module(module: object) -> bool:
    return bool(getattr(module, "__det_hub_alias__", False))


class AliasLoader(importlib.abc.Loader):
    """Loads an aliased name by handing back the det_hub module itself.

    It also gives ``runpy`` the target's code, so ``python -m determined.launch.torch_distributed``
    runs det_hub's launcher as ``__main__`` without importing it a second time under its own name.
    """

    def __init__(self, target: str, target_spec: importlib.machinery.ModuleSpec) -> None:
        self.target = target
        self.target_spec = target_spec
        self._own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import machinery stamps the alias spec onto the shared module while loading it;
        # give the module its own spec back so that reload(), pickling by module name and
        # tools that read __spec__ keep seeing det_hub's module.
        if self._own_spec is not None:
            module.__spec__ = self._own_spec

    def _target_loader(self) -> importlib.abc.InspectLoader:
        loader = self.target_spec.loader
        if not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(f"{self.target} cannot be run or inspected through the alias")
        return loader

    def get_code(self, fullname: str) -> CodeType | None:
        """The target module's code object (what ``runpy`` runs for ``-m``)."""
        return self._target_loader().get_code(self.target)

    def get_source(self, fullname: str) -> str | None:
        """The target module's source text, for tracebacks and debuggers."""
        return self._target_loader().get_source(self.target)

    def is_package(self, fullname: str) -> bool:
        """Whether the target is a package."""
        return self.target_spec.submodule_search_locations is not None

    def get_filename(self, fullname: str) -> str:
        """The target module's file."""
        if self.target_spec.origin is None:
            raise ImportError(f"{self.target} has no file")
        return self.target_spec.origin


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``determined`` and its aliased subpackages; see the module docstring."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an aliased name, or None to let the other finders answer."""
        if fullname == ALIAS_ROOT:
            return self._top_level_spec()
        target_name = target_of(fullname)
        if target_name is None:
            return None
        # A real Determined imported earlier owns its subpackages too.
        if not _is_alias_module(sys.modules.get(ALIAS_ROOT)):
            return None
        try:
            target_spec = importlib.util.find_spec(target_name)
        except ModuleNotFoundError as exc:
            # Only a missing det_hub package on the target's own path means "no such alias";
            # an import failing deeper inside det_hub is a real error and must surface.
            if exc.name and (target_name == exc.name or target_name.startswith(exc.name + ".")):
                return None
            raise
        if target_spec is None:
            return None
        is_package = target_spec.submodule_search_locations is not None
        spec = importlib.machinery.ModuleSpec(
            fullname,
            AliasLoader(target_name, target_spec),
            origin=target_spec.origin,
            is_package=is_package,
        )
        if is_package:
            spec.submodule_search_locations = list(target_spec.submodule_search_locations or [])
        spec.has_location = target_spec.has_location
        return spec

    def _top_level_spec(self) -> importlib.machinery.ModuleSpec | None:
        # Checked again at import time, not only at install(): the script's directory joins
        # sys.path after sitecustomize runs, and a context may vendor its own determined/.
        if _find_elsewhere(ALIAS_ROOT, skip=self) is not None:
            return None
        # An empty __path__ makes "determined" a package, which submodule imports require;
        # every submodule is answered by this finder, never by a path search.
        return importlib.util.spec_from_file_location(
            ALIAS_ROOT, _TOP_LEVEL_FILE, submodule_search_locations=[]
        )


def _find_elsewhere(name: str, skip: object | None = None) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is skip or isinstance(finder, AliasFinder):
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(name, None)
        if spec is not None:
            return spec
    return None


def installed_finder() -> AliasFinder | None:
    """The alias finder on ``sys.meta_path``, or None."""
    for finder in sys.meta_path:
        if isinstance(finder, AliasFinder):
            return finder
    return None


def real_determined_available() -> bool:
    """Whether a real ``determined`` is imported or can be found without the alias."""
    loaded = sys.modules.get(ALIAS_ROOT)
    if loaded is not None:
        return not _is_alias_module(loaded)
    if installed_finder() is None:
        return importlib.util.find_spec(ALIAS_ROOT) is not None
    return _find_elsewhere(ALIAS_ROOT) is not None


def install() -> bool:
    """Serve ``determined`` from det_hub, unless a real Determined is installed.

    Safe to call more than once.

    Returns:
        True when the alias is active after the call, False when a real ``determined`` was
        found and left alone.
    """
    with _install_lock:
        if installed_finder() is not None:
            return not real_determined_available()
        if real_determined_available():
            return False
        # In front of PathFinder: otherwise a path search of det_hub's own __path__ would load
        # a second copy of, say, det_hub.launch.torch_distributed under the alias name.
        sys.meta_path.insert(0, AliasFinder())
        return True


def uninstall() -> None:
    """Remove the finder and forget every module imported under the alias name."""
    with _install_lock:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AliasFinder)]
        if _is_alias_module(sys.modules.get(ALIAS_ROOT)):
            for name in [n for n in sys.modules if n == ALIAS_ROOT or n.startswith("determined.")]:
                del sys.modules[name]
