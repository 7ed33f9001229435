"""``det-hub shell``: an SSH server on the cluster's slots, reached through the master.

``shell start`` runs a shell task and, once it serves, ``ssh`` into it; ``shell open`` connects
again. The system ``ssh`` client does the talking: its ``ProxyCommand`` is ``det-hub shell
tunnel``, which carries the SSH connection over a WebSocket to the master's proxy path for the
task, with the user's token. The task's server takes only the task's own key, which only its
owner and admins can fetch from the master; it is kept in a file of mode 0600 under the det_hub
data directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from det_hub.env_names import MASTER_ENV, TOKEN_ENV

from ._connect import client_from_args
from .task import add_config_options, add_manage_verbs, wait_until_ready

if TYPE_CHECKING:
    from pathlib import Path

    from det_hub.client import Client, Task


def key_file(client: Client, task: Task) -> Path:
    """The shell's private key, written (mode 0600) where ``ssh -i`` reads it."""
    import hashlib

    from det_hub.client import data_dir
    from det_hub.console import UserError

    if not task.private_key:
        raise UserError(f"only the owner of shell {task.id} or an admin can open it")
    master = hashlib.sha256(client.master.encode()).hexdigest()[:10]
    path = data_dir() / "shell-keys" / f"{master}-{task.id}"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(task.private_key if task.private_key.endswith("\n")
                else task.private_key + "\n")
    return path


def ssh_argv(client: Client, task: Task, extra: list[str]) -> list[str]:
    """The ``ssh`` command line that reaches a shell through the master."""
    import shlex
    import shutil

    from det_hub.console import UserError

    if shutil.which("ssh") is None:
        raise UserError("no ssh client found: install OpenSSH's client (ssh) to open shells")
    tunnel = shlex.join([sys.executable, "-m", "det_hub.cli.main", "shell", "tunnel",
                         str(task.id)])
    return [
        "ssh", "-o", f"ProxyCommand={tunnel}", "-i", str(key_file(client, task)),
        "-o", "IdentitiesOnly=yes",
        # The host key is made fresh by each shell; the master's TLS and the user's token
        # already say which server this is.
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        # Options may follow the destination as well: ssh reads them wherever they are.
        "-o", "LogLevel=ERROR", f"shell-{task.id}", *extra,
    ]


def _ssh(client: Client, task: Task, extra: list[str]) -> int:
    import subprocess

    env = {**os.environ, MASTER_ENV: client.master}
    if client.token:
        env[TOKEN_ENV] = client.token  # for the tunnel, not on any command line
    return subprocess.call(ssh_argv(client, task, extra), env=env)


def _start(args: argparse.Namespace) -> int:
    from det_hub.console import config_overrides

    client = client_from_args(args)
    task = client.start_shell(config=config_overrides(args), context_dir=args.context)
    if args.detach:
        print(task.id)
        return 0
    print(f"Launched shell {task.id} (job {task.job_id}).", file=sys.stderr)
    return _ssh(client, wait_until_ready(client, "shell", task), args.ssh_args)


def _open(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    task = wait_until_ready(client, "shell", client.get_task("shell", args.id))
    return _ssh(client, task, args.ssh_args)


def _show_ssh_command(args: argparse.Namespace) -> int:
    import shlex

    client = client_from_args(args)
    task = client.get_task("shell", args.id)
    print(shlex.join(ssh_argv(client, task, args.ssh_args)))
    return 0


def _tunnel(args: argparse.Namespace) -> int:
    import asyncio

    client = client_from_args(args)
    return asyncio.run(tunnel(client, args.id))


async def tunnel(client: Client, task_id: int) -> int:
    """Join stdin and stdout to the shell's SSH server, through the master's proxy."""
    import asyncio
    import threading

    from tornado.httpclient import HTTPClientError, HTTPRequest
    from tornado.websocket import websocket_connect

    url = client.master.rstrip("/").replace("http", "ws", 1) + f"/proxy/{int(task_id)}/"
    headers = {"Authorization": f"Bearer {client.token}"} if client.token else {}
    try:
        conn = await websocket_connect(HTTPRequest(url, headers=headers, connect_timeout=30),
                                       max_message_size=64 * 1024 * 1024)
    except (OSError, HTTPClientError) as e:
        body = getattr(getattr(e, "response", None), "body", b"") or b""
        print(f"det-hub: cannot reach shell {task_id}: {e} {body.decode(errors='replace')}",
              file=sys.stderr)
        return 255
    loop = asyncio.get_running_loop()

    def read_stdin() -> None:
        while True:
            data = os.read(0, 64 * 1024)
            if not data:
                loop.call_soon_threadsafe(conn.close)
                return
            loop.call_soon_threadsafe(conn.write_message, data, True)

    threading.Thread(target=read_stdin, daemon=True).start()
    while True:
        message = await conn.read_message()
        if message is None:
            return 0
        os.write(1, message if isinstance(message, bytes) else message.encode())


def _ssh_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ssh_args", metavar="SSH_ARGS", nargs=argparse.REMAINDER,
                        help="passed to ssh after the destination: a command to run, or "
                        "options such as -L 8888:localhost:8888")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
             json_parent: argparse.ArgumentParser) -> None:
    """Adds ``shell`` and its verbs."""
    noun = subparsers.add_parser("shell", help="SSH into a task on the cluster's slots")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    start = verbs.add_parser(
        "start", help="start a shell and ssh into it",
        description="Start an SSH server on a slot of the cluster and connect to it with ssh "
        "(through the master). Arguments after the options go to ssh, e.g. a command to run.")
    add_config_options(start, "shell")
    start.add_argument("-d", "--detach", action="store_true",
                       help="print the shell's id and return at once, without connecting")
    _ssh_args(start)
    start.set_defaults(func=_start)

    open_ = verbs.add_parser("open", help="ssh into a running shell")
    open_.add_argument("id", metavar="ID", type=int)
    _ssh_args(open_)
    open_.set_defaults(func=_open)

    show = verbs.add_parser("show-ssh-command", aliases=["show_ssh_command"],
                            help="print the ssh command line that opens a shell")
    show.add_argument("id", metavar="ID", type=int)
    _ssh_args(show)
    show.set_defaults(func=_show_ssh_command)

    tunnel_ = verbs.add_parser("tunnel", help="(ssh's ProxyCommand) carry stdin and stdout to "
                               "a shell's SSH server")
    tunnel_.add_argument("id", metavar="ID", type=int)
    tunnel_.set_defaults(func=_tunnel)

    add_manage_verbs(verbs, "shell", json_parent)
