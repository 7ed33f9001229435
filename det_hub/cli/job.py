"""``det-hub job``: the scheduler's queue."""

from __future__ import annotations

import argparse

from . import _render as r
from ._connect import client_from_args


def _list(args: argparse.Namespace) -> int:
    jobs = client_from_args(args).list_jobs()
    if args.json:
        r.print_json(jobs.raw)
        return 0
    r.print_table(
        ["Allocation", "Experiment", "Trial", "Owner", "State", "Slots", "Priority", "Queued", "Waited"],
        [
            [j.allocation_id, r.or_none(j.experiment_id), r.or_none(j.trial_id), r.or_none(j.owner),
             j.state, j.slots, r.or_none(j.priority), r.fmt_time(j.queued_at),
             r.fmt_duration(j.queued_at) if j.state == "QUEUED" else r.NONE]
            for j in jobs
        ],
    )
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``job`` (alias ``j``)."""
    job = subparsers.add_parser("job", aliases=["j"], help="show the job queue")
    verbs = job.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list queued and running jobs").set_defaults(func=_list)
