"""What ``%%det_experiment`` submits: the cell as a context file, and the config around it."""

from __future__ import annotations

import ast
import io
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from det_hub.client import pack_context
from det_hub.config import ConfigError, parse_override
from det_hub.notebook._args import MagicArgumentError

#: The file the cell is written to in the experiment's context.
CELL_FILE = "det_hub_cell.py"
CELL_MODULE = CELL_FILE.removesuffix(".py")
TRIAL_BASE = "PyTorchTrial"

DEFAULT_METRIC = "loss"
DEFAULT_MAX_LENGTH = 100


def trial_class_name(source: str) -> str | None:
    """The PyTorchTrial subclass the cell defines, or None when it defines none.

    The cell is read, not run (running a training script here would train in the notebook):
    a class counts when one of its bases is named ``PyTorchTrial`` (``pytorch.PyTorchTrial``,
    ``det_hub.pytorch.PyTorchTrial``, ...) or is such a class of the cell. When several are
    defined, the one no other derives from is the trial.

    Raises:
        MagicArgumentError: The cell is not valid Python, or leaves the choice open.
    """
    try:
        tree = ast.parse(source, filename=CELL_FILE)
    except SyntaxError as exc:
        raise MagicArgumentError(f"the cell is not valid Python: line {exc.lineno}: {exc.msg}") \
            from None
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [_last_name(b) for b in node.bases]
    trials: set[str] = set()
    changed = True
    while changed:
        found = {name for name, names in bases.items()
                 if any(b == TRIAL_BASE or b in trials for b in names)}
        changed, trials = found != trials, found
    leaves = sorted(t for t in trials if not any(t in bases[o] for o in trials if o != t))
    if len(leaves) > 1:
        raise MagicArgumentError(
            f"the cell defines several PyTorchTrial subclasses ({', '.join(leaves)}); keep "
            "one, or give a CONFIG whose entrypoint names it")
    return leaves[0] if leaves else None


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def entrypoint_for(source: str) -> str:
    """``det_hub_cell:<Class>`` for a cell defining a PyTorchTrial, else ``python3
    det_hub_cell.py``."""
    name = trial_class_name(source)
    return f"{CELL_MODULE}:{name}" if name else f"python3 {CELL_FILE}"


def parse_hparams(pairs: Iterable[str]) -> dict[str, Any]:
    """``NAME=VALUE`` arguments as hyperparameters, each value read as YAML as ``--config``
    values are (``lr=1e-3`` is a float, ``layers=[8,8]`` a list).

    Raises:
        MagicArgumentError: An argument is not ``NAME=VALUE``, or its value is not YAML.
    """
    hparams: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise MagicArgumentError(f"--hparam {pair!r}: must be NAME=VALUE")
        try:
            hparams[name.strip()] = parse_override(f"value={text}")["value"]
        except ConfigError:
            raise MagicArgumentError(f"--hparam {pair!r}: the value is not YAML") from None
    return hparams


def cell_config(base: Mapping[str, Any] | None, source: str, *, hparams: Mapping[str, Any],
                metric: str | None, max_length: int | None) -> dict[str, Any]:
    """The config the cell is submitted with.

    Without ``base`` (no CONFIG given) it is a single trial: searcher ``single`` on ``metric``
    (default ``loss``, smaller is better) for ``max_length`` batches (default 100), with no
    restarts, since a failing cell is better fixed than retried. With ``base``, its settings
    are kept and those given here replace them. Either way the entrypoint is the cell.
    """
    config: dict[str, Any] = dict(base or {})
    if base is None:
        config["name"] = "notebook cell"
        config["searcher"] = {"name": "single", "metric": metric or DEFAULT_METRIC,
                              "smaller_is_better": True,
                              "max_length": {"batches": max_length or DEFAULT_MAX_LENGTH}}
        config["max_restarts"] = 0
    else:
        searcher = config.get("searcher")
        searcher = dict(searcher) if isinstance(searcher, Mapping) else {}
        if metric is not None:
            searcher["metric"] = metric
        if max_length is not None:
            searcher["max_length"] = {"batches": max_length}
        config["searcher"] = searcher
    config["entrypoint"] = entrypoint_for(source)
    if hparams:
        current = config.get("hyperparameters")
        config["hyperparameters"] = {**(dict(current) if isinstance(current, Mapping) else {}),
                                     **hparams}
    return config


def write_context(source_dir: str | Path, cell: str, target: Path) -> Path:
    """Fills ``target`` with the files of ``source_dir`` that an experiment context would
    hold, plus the cell as :data:`CELL_FILE`, and returns ``target``.

    The files are chosen by :func:`det_hub.client.pack_context` itself (``.detignore``,
    skipped directories, links, the size limit), so the copy holds exactly what submitting
    ``source_dir`` would send.

    Raises:
        ContextError: ``source_dir`` cannot be packed (missing, a link out of it, too large).
    """
    archive = pack_context(source_dir)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(target, filter="data")
    (target / CELL_FILE).write_text(cell, encoding="utf-8")
    return target
