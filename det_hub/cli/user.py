"""``det-hub user``: list and create users, and tell who you are."""

from __future__ import annotations

import argparse
import sys

from . import _render as r
from ._connect import client_from_args


def _list(args: argparse.Namespace) -> int:
    users = client_from_args(args).list_users()
    if args.json:
        r.print_json(users.raw)
        return 0
    r.print_table(["ID", "Username", "Admin"], [[u.id, u.username, r.fmt_bool(u.admin)] for u in users])
    return 0


def _create(args: argparse.Namespace) -> int:
    created = client_from_args(args).create_user(args.username, admin=args.admin)
    if args.json:
        r.print_json(created.raw)
        return 0
    role = "admin" if created.user.admin else "user"
    print(f"Created {role} {created.user.username} (id {created.user.id})")
    print(f"Token: {created.token}")
    print("The token is shown only this once; give it to the user as DET_HUB_TOKEN.", file=sys.stderr)
    return 0


def _whoami(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    user = client.me()
    if args.json:
        r.print_json({"user": user.raw})
        return 0
    role = " (admin)" if user.admin else ""
    print(f"You are {user.username}{role} on {client.master}")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``user`` (alias ``u``) and its verbs."""
    noun = subparsers.add_parser("user", aliases=["u"], help="manage users")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    verbs.add_parser("list", parents=[json_parent], help="list users").set_defaults(func=_list)

    create = verbs.add_parser("create", parents=[json_parent], help="create a user (admins only) and print its token")
    create.add_argument("username", metavar="NAME")
    create.add_argument("--admin", action="store_true", help="make the user an admin")
    create.set_defaults(func=_create)

    verbs.add_parser("whoami", parents=[json_parent], help="show the user of your token").set_defaults(func=_whoami)
