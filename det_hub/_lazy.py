"""Names of a package loaded from their modules on first use (PEP 562), so that importing
the package costs only what a program uses: ``det-hub --help`` loads neither the SDK's HTTP
client nor the config parser."""

from __future__ import annotations

import importlib
import sys

# Imported by packages whose modules start every task (det_hub.agents.local_runner): typing
# alone costs such a process 11 ms, so it is read by type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose public names come from its
    modules: ``exports`` maps each name to its module's name within the package (a module
    exported under its own name is the module itself). A name is imported once, then found
    in the package like any other."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(f"{package}.{module}")
        value = loaded if name == module else getattr(loaded, name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
