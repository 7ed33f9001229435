"""What ``det-hub command``, ``notebook``, ``shell`` and ``tensorboard`` share: the options of
a task's config, waiting for a task to serve, and the ``list``, ``logs`` and ``kill`` verbs."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._connect import client_from_args
from .trial import print_logs

if TYPE_CHECKING:
    from det_hub.client import Client, Task

HEADERS = ["ID", "Owner", "Description", "State", "Exit code", "Pool", "Slots", "Started",
           "Ended"]

#: How often a waiting CLI asks for the task's state.
POLL_SECONDS = 0.5


def task_rows(tasks: Iterable[Task]) -> list[list[Any]]:
    """Rows of a tasks table, in the columns of :data:`HEADERS`."""
    from det_hub.console import render as r

    return [
        [t.id, r.or_none(t.owner), t.description, t.state, r.or_none(t.exit_code),
         t.resource_pool, t.slots, r.fmt_time(t.created_at), r.fmt_time(t.ended_at)]
        for t in tasks
    ]


def add_config_options(parser: argparse.ArgumentParser, what: str, *,
                       context: bool = True) -> None:
    """``--config-file``, ``--config KEY=VALUE`` and (unless not wanted) ``--context``."""
    parser.add_argument("--config-file", metavar="FILE",
                        help=f"{what} config (YAML): resources, environment, bind_mounts, "
                        "description, idle_timeout, ...")
    parser.add_argument("--config", dest="overrides", action="append", metavar="KEY=VALUE",
                        help="change one setting, e.g. resources.slots=2 (repeatable; the "
                        "value is YAML)")
    if context:
        parser.add_argument("--context", metavar="DIR",
                            help=f"a directory sent along and unpacked as the {what}'s "
                            "working directory")


def wait_until_ready(client: Client, kind: str, task: Task) -> Task:
    """Wait until a proxied task serves, saying on stderr where it is meanwhile (its state,
    and its place in the queue while it waits for slots).

    Raises:
        UserError: It ended before it served.
    """
    from det_hub.console import UserError

    said = ""
    while not task.ready:
        if task.is_terminal:
            raise UserError(f"{kind} {task.id} ended before it served: "
                            f"{task.exit_reason or 'no reason given'} "
                            f"(det-hub {kind} logs {task.id})")
        news = f"{kind.capitalize()} {task.id} is {task.state}"
        if task.state == "QUEUED":
            news += _queue_place(client, task)
        if news != said:
            print(news + "...", file=sys.stderr, flush=True)
            said = news
        time.sleep(POLL_SECONDS)
        task = client.get_task(kind, task.id)
    return task


def _queue_place(client: Client, task: Task) -> str:
    from det_hub.client import MasterError

    try:
        job = client.get_job(task.job_id)
    except MasterError:
        return ""
    if job.queue_position is None:
        return ""
    return f" (place {job.queue_position} in resource pool {job.resource_pool}'s queue)"


def open_url(client: Client, task: Task, *, browser: bool) -> int:
    """Print the URL of a notebook or TensorBoard and open it in a browser if asked."""
    import webbrowser

    from det_hub.console import UserError

    if not task.url:
        raise UserError(f"only the owner of {task.type.lower()} {task.id} or an admin can "
                        "open it")
    url = client.master.rstrip("/") + task.url
    print(url)
    if browser:
        try:
            webbrowser.open(url)
        except webbrowser.Error:
            pass  # no browser here: the URL is printed
    return 0


def add_manage_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser], kind: str,
                     json_parent: argparse.ArgumentParser) -> None:
    """``list``, ``logs`` and ``kill`` for the tasks of one type."""
    listing = verbs.add_parser("list", aliases=["ls"], parents=[json_parent],
                               help=f"list {kind}s")
    listing.set_defaults(func=_list, kind=kind)

    logs = verbs.add_parser("logs", parents=[json_parent],
                            help=f"print a {kind}'s logs (--json: one JSON object per line)")
    logs.add_argument("id", metavar="ID", type=int)
    logs.add_argument("-f", "--follow", action="store_true",
                      help=f"keep printing until the {kind} ends")
    logs.add_argument("--after-id", type=int, default=0, help="only lines after this log id")
    logs.set_defaults(func=_logs, kind=kind)

    kill = verbs.add_parser("kill", parents=[json_parent], help=f"kill a {kind}")
    kill.add_argument("id", metavar="ID", type=int)
    kill.set_defaults(func=_kill, kind=kind)


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    tasks = client_from_args(args).list_tasks(args.kind)
    if args.json:
        r.print_json(tasks.raw)
        return 0
    r.print_table(HEADERS, task_rows(tasks))
    return 0


def _logs(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    return print_logs(
        client.task_logs(args.kind, args.id, follow=args.follow, after_id=args.after_id),
        as_json=args.json, follow=args.follow,
        stopped=f"Stopped following {args.kind} {args.id}; it keeps running.")


def _kill(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    task = client_from_args(args).kill_task(args.kind, args.id)
    if args.json:
        r.print_json({args.kind: task.raw})
        return 0
    print(f"{args.kind.capitalize()} {task.id} is {task.state}.")
    return 0
