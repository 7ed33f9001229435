"""``det-hub command``: run a command on the cluster's slots, list, follow and kill commands."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ._connect import client_from_args
from .task import add_config_options, add_manage_verbs
from .trial import print_logs

if TYPE_CHECKING:
    from det_hub.client import Client


def follow_command(client: Client, command_id: int, *, as_json: bool = False) -> int:
    """Prints a command's logs until it ends; returns its exit code (1 when a signal ended it
    or it never ran), or 130 on Ctrl-C, which stops following only."""
    if print_logs(client.command_logs(command_id, follow=True), as_json=as_json, follow=True,
                  stopped=f"Stopped following command {command_id}; it keeps running. "
                          f"(det-hub command kill {command_id} stops it.)"):
        return 130
    command = client.get_command(command_id)
    if command.exit_code is None:
        return 1
    return command.exit_code


def _run(args: argparse.Namespace) -> int:
    from det_hub.console import UserError, config_overrides

    config = config_overrides(args)
    if not args.entrypoint and not config.get("entrypoint"):
        raise UserError("no command to run: give it after the options (det-hub command run "
                        "python3 prep.py), or as entrypoint in --config-file")
    client = client_from_args(args)
    command = client.run_command(args.entrypoint or None, config=config,
                                 context_dir=args.context)
    if args.detach:
        print(command.id)
        return 0
    print(f"Launched command {command.id} (job {command.job_id}).", file=sys.stderr)
    return follow_command(client, command.id, as_json=args.json)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``command`` (alias ``cmd``) and its verbs."""
    noun = subparsers.add_parser("command", aliases=["cmd"],
                                 help="run commands on the cluster's slots")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    run = verbs.add_parser(
        "run", parents=[json_parent], help="run a command on the cluster",
        description="Run CMD ARGS... on a slot of the cluster (as Determined's det cmd run). "
        "Without -d the command's output is printed until it ends, and det-hub exits with the "
        "command's exit code.")
    add_config_options(run, "command")
    run.add_argument("-d", "--detach", action="store_true",
                     help="print the command's id and return at once")
    run.add_argument("entrypoint", metavar="CMD", nargs=argparse.REMAINDER,
                     help="the command and its arguments")
    run.set_defaults(func=_run)

    add_manage_verbs(verbs, "command", json_parent)
