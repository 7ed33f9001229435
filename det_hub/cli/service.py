"""``det-hub master`` and ``det-hub up``: start the master (alone, or with hub and agent).

The master lives in :mod:`det_hub.service.app` and ``det-hub up`` in :mod:`det_hub.hub.up`;
each is imported only when asked for, so the rest of the CLI works (and starts fast) where the
service's dependencies are not installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: CLI verb -> the module and its function that take the rest of the command line.
ENTRY_POINTS = {"master": ("det_hub.service.app", "main"), "up": ("det_hub.hub.up", "main")}


def run_service(verb: str, argv: Sequence[str]) -> int:
    """Hands the command line after ``master``/``up`` to the service, untouched."""
    module_name, function_name = ENTRY_POINTS[verb]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(
            f"Error: `det-hub {verb}` needs the det_hub master ({module_name}), "
            f"which cannot be imported here: {exc}",
            file=sys.stderr,
        )
        return 1
    entry = getattr(module, function_name, None)
    if entry is None:
        print(f"Error: {module_name} has no {function_name}(); this installation is incomplete",
              file=sys.stderr)
        return 1
    result = entry(list(argv))
    return result if isinstance(result, int) else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``master`` and ``up`` to the help; :func:`det_hub.cli.main.main` dispatches them
    before argparse sees their options, since those belong to the service."""
    for verb, text in (
        ("master", "run the master (options: det-hub master --help)"),
        ("up", "run hub, master and a local agent (options: det-hub up --help)"),
    ):
        parser = subparsers.add_parser(verb, help=text, add_help=False)
        parser.add_argument("service_argv", nargs=argparse.REMAINDER)
        parser.set_defaults(service_verb=verb)
