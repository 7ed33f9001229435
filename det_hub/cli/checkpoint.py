"""``det-hub checkpoint``: list, describe and delete checkpoints."""

from __future__ import annotations

import argparse
import sys

from ._confirm import confirm
from ._connect import client_from_args


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

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
    from det_hub.console import render as r

    checkpoint = client_from_args(args).get_checkpoint(args.uuid)
    if args.json:
        r.print_json({"checkpoint": checkpoint.raw})
        return 0
    storage = checkpoint.storage
    if storage.get("type") == "s3":
        location = "s3://" + "/".join(
            str(p).strip("/") for p in (storage.get("bucket"), storage.get("prefix")) if p)
    else:
        location = str(storage.get("host_path") or storage.get("container_path") or "")
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


def _delete(args: argparse.Namespace) -> int:
    from det_hub.client import MasterError

    uuids = list(dict.fromkeys(args.uuids))
    if not args.yes and not confirm(
            f"Delete the files of {len(uuids)} checkpoint(s): {', '.join(uuids)}?"):
        print("Nothing deleted.", file=sys.stderr)
        return 1
    client = client_from_args(args)
    failed = 0
    for uuid in uuids:
        # One refusal (a registered checkpoint, say) does not stop the others.
        try:
            checkpoint = client.delete_checkpoint(uuid)
        except MasterError as error:
            failed += 1
            print(f"Error: {error}", file=sys.stderr)
            continue
        print(f"Deleted checkpoint {checkpoint.uuid}")
    return 1 if failed else 0


def _download(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    checkpoint = client_from_args(args).get_checkpoint(args.uuid)
    target = checkpoint.download(args.output)
    print(f"Checkpoint {checkpoint.uuid} ({r.fmt_bytes(checkpoint.size)}, "
          f"{len(checkpoint.resources)} files) is in {target}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``checkpoint`` (alias ``c``) and its verbs."""
    noun = subparsers.add_parser("checkpoint", aliases=["c"], help="inspect, download and delete checkpoints")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    listing = verbs.add_parser("list", parents=[json_parent], help="list an experiment's checkpoints")
    listing.add_argument("experiment_id", metavar="EXP_ID", type=int)
    listing.set_defaults(func=_list)

    describe = verbs.add_parser("describe", parents=[json_parent], help="show a checkpoint")
    describe.add_argument("uuid", metavar="UUID")
    describe.set_defaults(func=_describe)

    download = verbs.add_parser(
        "download", help="copy a checkpoint's files here",
        description="Copy a checkpoint's files from its storage (shared_fs, directory or s3) "
        "into a local directory, checking each file's size against what was saved.")
    download.add_argument("uuid", metavar="UUID")
    download.add_argument("--output", "-o", metavar="DIR", default=None,
                          help="where to put them (default: checkpoints/UUID)")
    download.set_defaults(func=_download)

    delete = verbs.add_parser(
        "delete", help="delete checkpoints' files",
        description="Delete checkpoints' files; they stay listed as DELETED. A checkpoint a "
        "model version names, and the latest checkpoint of a trial that can still run, are "
        "refused.")
    delete.add_argument("uuids", metavar="UUID", nargs="+")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=_delete)
