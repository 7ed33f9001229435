"""``det-hub command``: run a command on the cluster's slots, list, follow and kill commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from det_hub.client import Client, Command

from . import _render as r
from ._connect import UserError, client_from_args
from .experiment import config_overrides
from .trial import print_logs

HEADERS = ["ID", "Owner", "Description", "State", "Exit code", "Pool", "Slots", "Started",
           "Ended"]


def command_rows(commands: Iterable[Command]) -> list[list[Any]]:
    """Rows of a commands table, in the columns of :data:`HEADERS`."""
    return [
        [c.id, r.or_none(c.owner), c.description, c.state, r.or_none(c.exit_code),
         c.resource_pool, c.slots, r.fmt_time(c.created_at), r.fmt_time(c.ended_at)]
        for c in commands
    ]


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


def _list(args: argparse.Namespace) -> int:
    commands = client_from_args(args).list_commands()
    if args.json:
        r.print_json(commands.raw)
        return 0
    r.print_table(HEADERS, command_rows(commands))
    return 0


def _logs(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    return print_logs(client.command_logs(args.id, follow=args.follow, after_id=args.after_id),
                      as_json=args.json, follow=args.follow,
                      stopped=f"Stopped following command {args.id}; it keeps running.")


def _kill(args: argparse.Namespace) -> int:
    command = client_from_args(args).kill_command(args.id)
    if args.json:
        r.print_json({"command": command.raw})
        return 0
    print(f"Command {command.id} is {command.state}.")
    return 0


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
    run.add_argument("--config-file", metavar="FILE",
                     help="command config (YAML): resources, environment, bind_mounts, "
                     "description, idle_timeout, ...")
    run.add_argument("--config", dest="overrides", action="append", metavar="KEY=VALUE",
                     help="change one setting, e.g. resources.slots=2 (repeatable; the value "
                     "is YAML)")
    run.add_argument("--context", metavar="DIR",
                     help="a directory sent along and unpacked as the command's working "
                     "directory")
    run.add_argument("-d", "--detach", action="store_true",
                     help="print the command's id and return at once")
    run.add_argument("entrypoint", metavar="CMD", nargs=argparse.REMAINDER,
                     help="the command and its arguments")
    run.set_defaults(func=_run)

    listing = verbs.add_parser("list", aliases=["ls"], parents=[json_parent],
                               help="list commands")
    listing.set_defaults(func=_list)

    logs = verbs.add_parser("logs", parents=[json_parent],
                            help="print a command's logs (--json: one JSON object per line)")
    logs.add_argument("id", metavar="ID", type=int)
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing until the command ends")
    logs.add_argument("--after-id", type=int, default=0, help="only lines after this log id")
    logs.set_defaults(func=_logs)

    kill = verbs.add_parser("kill", parents=[json_parent], help="kill a command")
    kill.add_argument("id", metavar="ID", type=int)
    kill.set_defaults(func=_kill)
