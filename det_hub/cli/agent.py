"""``det-hub agent`` and ``det-hub slot``: the cluster's hosts and their slots."""

from __future__ import annotations

import argparse

from . import _render as r
from ._connect import client_from_args


def _list_agents(args: argparse.Namespace) -> int:
    agents = client_from_args(args).list_agents()
    if args.json:
        r.print_json(agents.raw)
        return 0
    r.print_table(
        ["ID", "Type", "Enabled", "Slots", "Used", "Slot types"],
        [
            [a.id, a.type, r.fmt_bool(a.enabled), len(a.slots),
             sum(1 for s in a.slots if s.allocation_id),
             ", ".join(sorted({s.type for s in a.slots})) or r.NONE]
            for a in agents
        ],
    )
    return 0


def _list_slots(args: argparse.Namespace) -> int:
    agents = client_from_args(args).list_agents()
    if args.json:
        # Slots live inside agents in the API; flattened here with their agent's id, as
        # Determined's `det slot list --json` does.
        r.print_json({"slots": [{"agent_id": a.id, **s.raw} for a in agents for s in a.slots]})
        return 0
    r.print_table(
        ["Agent", "Slot", "Type", "Device", "Enabled", "Allocation"],
        [
            [a.id, s.id, s.type, r.or_none(s.device), r.fmt_bool(a.enabled), s.allocation_id or r.NONE]
            for a in agents
            for s in a.slots
        ],
    )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``agent`` (alias ``a``) and ``slot`` (alias ``s``)."""
    agent = subparsers.add_parser("agent", aliases=["a"], help="list agents")
    verbs = agent.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list agents").set_defaults(func=_list_agents)

    slot = subparsers.add_parser("slot", aliases=["s"], help="list slots")
    verbs = slot.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list every agent's slots").set_defaults(func=_list_slots)
