"""``det-hub resource-pool``: the scheduler's pools."""

from __future__ import annotations

import argparse

from ._connect import client_from_args


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    pools = client_from_args(args).list_resource_pools()
    if args.json:
        r.print_json(pools.raw)
        return 0
    r.print_table(
        ["Name", "Type", "Agents", "Slots used", "Slots total", "Scheduler", "Preemption",
         "Default", "Description"],
        [[p.name, r.or_none(p.type), p.agents, p.slots_used, p.slots_total,
          r.or_none(p.scheduler), r.fmt_bool(p.preemption), r.fmt_bool(p.default),
          r.or_none(p.description)] for p in pools],
    )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``resource-pool`` (alias ``rp``)."""
    pool = subparsers.add_parser("resource-pool", aliases=["rp"], help="list resource pools")
    verbs = pool.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list resource pools").set_defaults(func=_list)
