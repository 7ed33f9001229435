"""``det-hub checkpoint``: list and describe checkpoints."""

from __future__ import annotations

import argparse

from . import _render as r
from ._connect import client_from_args


def _list(args: argparse.Namespace) -> int:
    checkpoints = client_from_args(args).list_checkpoints(args.experiment_id)
    if args.json:
        r.print_json(checkpoints.raw)
        return 0
    r.print_table(
        ["UUID", "Trial", "Steps", "State", "Size", "Files", "Reported"],
        [
            [c.uuid, c.trial_id, c.steps_completed, c.state, r.fmt_bytes(c.size), len(c.resources),
             r.fmt_time(c.report_time)]
            for c in checkpoints
        ],
    )
    return 0


def _describe(args: argparse.Namespace) -> int:
    checkpoint = client_from_args(args).get_checkpoint(args.uuid)
    if args.json:
        r.print_json({"checkpoint": checkpoint.raw})
        return 0
    storage = checkpoint.storage
    location = storage.get("host_path") or storage.get("bucket") or ""
    if storage.get("storage_path"):
        location = f"{location}/{storage['storage_path']}" if location else str(storage["storage_path"])
    r.print_fields([
        ("UUID", checkpoint.uuid),
        ("Experiment", checkpoint.experiment_id),
        ("Trial", checkpoint.trial_id),
        ("Allocation", r.or_none(checkpoint.allocation_id)),
        ("State", checkpoint.state),
        ("Steps completed", checkpoint.steps_completed),
        ("Reported", r.fmt_time(checkpoint.report_time)),
        ("Size", r.fmt_bytes(checkpoint.size)),
        ("Storage", f"{storage.get('type', r.NONE)} {location}".strip()),
        ("Metadata", r.fmt_mapping(checkpoint.metadata)),
    ])
    if checkpoint.resources:
        print()
        r.print_table(["File", "Size"], [[name, r.fmt_bytes(size)] for name, size in sorted(checkpoint.resources.items())])
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``checkpoint`` (alias ``c``) and its verbs."""
    noun = subparsers.add_parser("checkpoint", aliases=["c"], help="inspect checkpoints")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    listing = verbs.add_parser("list", parents=[json_parent], help="list an experiment's checkpoints")
    listing.add_argument("experiment_id", metavar="EXP_ID", type=int)
    listing.set_defaults(func=_list)

    describe = verbs.add_parser("describe", parents=[json_parent], help="show a checkpoint")
    describe.add_argument("uuid", metavar="UUID")
    describe.set_defaults(func=_describe)
