"""det_hub.env_names is the register of the ``DET_HUB_*`` environment variables: every name
det_hub's source mentions is one of its constants, and each constant is named after its
variable."""

from __future__ import annotations

import re
from pathlib import Path

from det_hub import env_names

SOURCE = Path(env_names.__file__).resolve().parent
#: What det_hub's source is written in: its modules, and the master's pages and scripts.
TEXT_SUFFIXES = frozenset({".py", ".html", ".js", ".css", ".sh", ".json", ".yaml", ".toml"})
NAME = re.compile(r"\bDET_HUB_[A-Z0-9_]*[A-Z0-9]\b")


def registered() -> dict[str, str]:
    """The module's constants: ``{"MASTER_ENV": "DET_HUB_MASTER", ...}``."""
    return {name: value for name, value in vars(env_names).items() if name.endswith("_ENV")}


def mentioned() -> dict[str, set[str]]:
    """Every ``DET_HUB_*`` name in det_hub's source, with the files that mention it."""
    found: dict[str, set[str]] = {}
    for path in sorted(SOURCE.rglob("*")):
        if path.suffix not in TEXT_SUFFIXES or "__pycache__" in path.parts:
            continue
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(SOURCE.parent)))
    return found


def test_every_variable_the_source_names_is_registered() -> None:
    known = set(registered().values())
    unknown = {name: sorted(files) for name, files in mentioned().items() if name not in known}
    assert unknown == {}, "add these to det_hub/env_names.py, with who sets and who reads them"


def test_each_constant_is_named_after_its_variable_and_exported() -> None:
    constants = registered()
    assert {name: value for name, value in constants.items()
            if value != "DET_HUB_" + name.removesuffix("_ENV")} == {}
    assert sorted(env_names.__all__) == sorted(constants)
    assert len(set(constants.values())) == len(constants)


def test_the_register_lists_what_det_hub_sets_and_reads() -> None:
    # The names the master gives a trial's process are the contract with training code
    # (docs/rest-api.md); they are literal here on purpose.
    assert {"DET_HUB_MASTER", "DET_HUB_ALLOCATION_TOKEN", "DET_HUB_ALLOCATION_ID",
            "DET_HUB_TRIAL_ID", "DET_HUB_EXPERIMENT_ID", "DET_HUB_CLUSTER_INFO",
            "DET_HUB_TOKEN", "DET_HUB_DATA_CACHE"} <= set(registered().values())
