"""``det-hub agent`` and ``det-hub slot``: the cluster's hosts and their slots."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._connect import client_from_args

if TYPE_CHECKING:
    from det_hub.client import Agent

HEADERS = ["ID", "Type", "Pool", "Enabled", "Connected", "Slots", "Used", "Slot types",
           "Address"]


def _agent_row(a: Agent) -> list[object]:
    from det_hub.console import render as r

    return [a.id, a.type, r.or_none(a.resource_pool), r.fmt_bool(a.enabled),
            r.fmt_bool(a.connected), len(a.slots), sum(1 for s in a.slots if s.allocation_id),
            ", ".join(sorted({s.type for s in a.slots})) or r.NONE, r.or_none(a.address)]


def _list_agents(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    agents = client_from_args(args).list_agents()
    if args.json:
        r.print_json(agents.raw)
        return 0
    r.print_table(HEADERS, (_agent_row(a) for a in agents))
    return 0


def _show(agent: Agent, args: argparse.Namespace) -> None:
    from det_hub.console import render as r

    if args.json:
        r.print_json({"agent": agent.raw})
    else:
        r.print_table(HEADERS, [_agent_row(agent)])


def _enable(args: argparse.Namespace) -> int:
    _show(client_from_args(args).enable_agent(args.agent_id), args)
    return 0


def _disable(args: argparse.Namespace) -> int:
    agent = client_from_args(args).disable_agent(args.agent_id, drain=args.drain)
    _show(agent, args)
    return 0


def _list_slots(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

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
    agent = subparsers.add_parser("agent", aliases=["a"], help="list, enable and disable agents")
    verbs = agent.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list agents").set_defaults(func=_list_agents)

    enable = verbs.add_parser("enable", parents=[json_parent],
                              help="let a disabled agent take new work (admins only)")
    enable.add_argument("agent_id", metavar="AGENT_ID")
    enable.set_defaults(func=_enable)

    disable = verbs.add_parser(
        "disable", parents=[json_parent], help="stop an agent from taking new work (admins only)",
        description="Stop an agent from taking new work. Without --drain, the trials running "
        "there are asked to checkpoint and exit, and go on from that checkpoint on another "
        "agent when one is free (Determined's `det agent disable` stops them instead). With "
        "--drain they run there until they finish.")
    disable.add_argument("agent_id", metavar="AGENT_ID")
    disable.add_argument("--drain", action="store_true",
                         help="let the trials running there finish instead of moving them")
    disable.set_defaults(func=_disable)

    slot = subparsers.add_parser("slot", aliases=["s"], help="list slots")
    verbs = slot.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list every agent's slots").set_defaults(func=_list_slots)
