"""``det-hub notebook`` and ``det-hub tensorboard``: start one on the cluster's slots and open
it in a browser through the master's proxy; list, read the logs of, and kill them."""

from __future__ import annotations

import argparse
import sys

from ._connect import client_from_args
from .task import add_config_options, add_manage_verbs, open_url, wait_until_ready


def _start(args: argparse.Namespace) -> int:
    from det_hub.console import config_overrides

    client = client_from_args(args)
    if args.kind == "tensorboard":
        task = client.start_tensorboard(args.experiment_ids, config=config_overrides(args))
    else:
        task = client.start_notebook(config=config_overrides(args), context_dir=args.context)
    if args.detach:
        print(task.id)
        return 0
    print(f"Launched {args.kind} {task.id} (job {task.job_id}).", file=sys.stderr)
    return open_url(client, wait_until_ready(client, args.kind, task), browser=args.browser)


def _open(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    task = wait_until_ready(client, args.kind, client.get_task(args.kind, args.id))
    return open_url(client, task, browser=args.browser)


def _browser_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-browser", dest="browser", action="store_false",
                        help="print the URL only, do not open a browser")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
             json_parent: argparse.ArgumentParser) -> None:
    """Adds ``notebook`` and ``tensorboard`` and their verbs."""
    for kind, what in (("notebook", "JupyterLab on the cluster's slots"),
                       ("tensorboard", "TensorBoards over experiments' metrics")):
        noun = subparsers.add_parser(kind, help=what)
        verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)
        start = verbs.add_parser(
            "start", help=f"start a {kind} and open it",
            description=f"Start a {kind} on the cluster's slots, wait until it serves, and "
            "print (and open in a browser) its URL through the master.")
        if kind == "tensorboard":
            start.add_argument("experiment_ids", metavar="EXPERIMENT_ID", type=int, nargs="+",
                               help="the experiments to show (their trials' metrics)")
        add_config_options(start, kind, context=kind == "notebook")
        start.add_argument("-d", "--detach", action="store_true",
                           help=f"print the {kind}'s id and return at once")
        _browser_option(start)
        start.set_defaults(func=_start, kind=kind)

        open_ = verbs.add_parser("open", help=f"print and open a running {kind}'s URL")
        open_.add_argument("id", metavar="ID", type=int)
        _browser_option(open_)
        open_.set_defaults(func=_open, kind=kind)

        add_manage_verbs(verbs, kind, json_parent)
