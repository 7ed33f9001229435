"""``det-hub job``: the job queue, and changing a job's priority, weight or place in it."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._connect import client_from_args

if TYPE_CHECKING:
    from det_hub.client import Job

HEADERS = ["#", "ID", "Type", "Name", "Priority", "Weight", "Submitted",
           "Slots (acquired/needed)", "Status", "User"]


def job_rows(jobs: Iterable[Job]) -> list[list[Any]]:
    """Rows of a jobs table, in the columns of :data:`HEADERS`."""
    from det_hub.console import render as r

    return [
        [r.or_none(j.queue_position), j.job_id, j.type, r.or_none(j.name), r.or_none(j.priority),
         r.fmt_value(j.weight), r.fmt_time(j.submitted),
         f"{j.slots_allocated}/{j.slots_requested}",
         f"{j.state} ({j.reason})" if j.reason else j.state, r.or_none(j.owner)]
        for j in jobs
    ]


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    jobs = client_from_args(args).list_jobs(resource_pool=args.resource_pool)
    if args.json:
        r.print_json(jobs.raw)
        return 0
    r.print_table(HEADERS, job_rows(jobs))
    return 0


def _update(args: argparse.Namespace) -> int:
    from det_hub.console import UserError
    from det_hub.console import render as r

    if args.priority is None and args.weight is None and args.ahead_of is None:
        raise UserError("nothing to change: give --priority, --weight or --ahead-of")
    job = client_from_args(args).update_job(
        args.job_id, priority=args.priority, weight=args.weight, ahead_of=args.ahead_of)
    if args.json:
        r.print_json({"job": job.raw})
        return 0
    r.print_table(HEADERS, job_rows([job]))
    return 0


def _priority(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= 99:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 99")
    return value


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number greater than 0")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``job`` (alias ``j``)."""
    job = subparsers.add_parser("job", aliases=["j"], help="show and reorder the job queue")
    verbs = job.add_subparsers(dest="verb", metavar="VERB", required=True)

    listing = verbs.add_parser(
        "list", parents=[json_parent],
        help="list queued and running jobs, in the order the scheduler considers them")
    listing.add_argument("--resource-pool", "-p", metavar="POOL",
                         help="only the jobs of this resource pool")
    listing.set_defaults(func=_list)

    update = verbs.add_parser(
        "update", parents=[json_parent], help="change a job's priority, weight or place",
        description="Change a job's priority, weight or place in its pool's queue; prints the "
        "job's new row. Only the job's owner or an admin may.")
    update.add_argument("job_id", metavar="JOB_ID",
                        help="the job: exp-ID (or the experiment's ID), or cmd-ID")
    place = update.add_mutually_exclusive_group()
    place.add_argument("--priority", type=_priority, metavar="N",
                       help="1 to 99; smaller runs first")
    place.add_argument("--ahead-of", metavar="JOB_ID",
                       help="move right before this job of the same pool, taking its priority")
    update.add_argument("--weight", type=_weight, metavar="W",
                        help="share of a fair-share pool, greater than 0")
    update.set_defaults(func=_update)
