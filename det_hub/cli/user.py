"""``det-hub user``: list and create users, link them to Unix accounts, tell who you are, and
sign in through JupyterHub."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from det_hub.env_names import MASTER_ENV, TOKEN_ENV

from ._connect import client_from_args

if TYPE_CHECKING:
    from det_hub.client import AgentUserGroup


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    users = client_from_args(args).list_users()
    if args.json:
        r.print_json(users.raw)
        return 0
    r.print_table(["ID", "Username", "Admin", "Agent user", "Agent group"],
                  [[u.id, u.username, r.fmt_bool(u.admin), *_agent_cells(u.agent_user_group)] for u in users])
    return 0


def _agent_cells(link: AgentUserGroup | None) -> list[str]:
    """The linked account and group as ``name (id)``, or the id alone when the link has no name."""
    from det_hub.console import render as r

    if link is None:
        return [r.NONE, r.NONE]
    return [f"{name} ({number})" if name else str(number)
            for name, number in ((link.agent_user, link.agent_uid), (link.agent_group, link.agent_gid))]


def _link(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    user = client_from_args(args).link_with_agent_user(
        args.username, args.agent_uid, args.agent_gid, args.agent_user, args.agent_group)
    if args.json:
        r.print_json({"user": user.raw})
        return 0
    account, group = _agent_cells(user.agent_user_group)
    print(f"Linked {user.username} to Unix user {account}, group {group}: their tasks run as that account")
    return 0


def _unlink(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    user = client_from_args(args).unlink_agent_user(args.username)
    if args.json:
        r.print_json({"user": user.raw})
        return 0
    print(f"Unlinked {user.username} from their Unix account")
    return 0


def _create(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    created = client_from_args(args).create_user(args.username, admin=args.admin)
    if args.json:
        r.print_json(created.raw)
        return 0
    role = "admin" if created.user.admin else "user"
    print(f"Created {role} {created.user.username} (id {created.user.id})")
    print(f"Token: {created.token}")
    print(f"The token is shown only this once; give it to the user as {TOKEN_ENV}.", file=sys.stderr)
    return 0


def _whoami(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    client = client_from_args(args)
    user = client.me()
    if args.json:
        r.print_json({"user": user.raw})
        return 0
    role = " (admin)" if user.admin else ""
    print(f"You are {user.username}{role} on {client.master}")
    return 0


def hub_url(master: str) -> str:
    """The JupyterHub in front of a master served as a hub service (``.../services/NAME``).

    Raises:
        UserError: The master is not behind a hub.
    """
    from det_hub.console import UserError

    head, found, _ = master.partition("/services/")
    if not found:
        raise UserError(f"the master at {master} is not served by a JupyterHub (its URL has no "
                        f"/services/ part): use a token of its own as {TOKEN_ENV}")
    return head


def hub_token(hub: str, username: str, password: str) -> str:
    """A new API token of ``username``'s, from the hub's sign-in and token pages."""
    import requests

    from det_hub.console import UserError

    browser = requests.Session()
    try:
        browser.get(f"{hub}/hub/login", timeout=30)
        signed = browser.post(f"{hub}/hub/login", timeout=30, allow_redirects=False, data={
            "username": username, "password": password,
            "_xsrf": browser.cookies.get("_xsrf", path="/hub/") or ""})
        if signed.status_code != 302:
            raise UserError(f"the hub at {hub} did not sign {username} in: wrong name or "
                            "password")
        made = browser.post(
            f"{hub}/hub/api/users/{username}/tokens", timeout=30,
            json={"note": "det-hub CLI"},
            headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/") or ""})
        if made.status_code != 201:
            raise UserError(f"the hub at {hub} made no token for {username}: "
                            f"{made.status_code} {made.text[:200]}")
        return str(made.json()["token"])
    except requests.RequestException as e:
        raise UserError(f"cannot reach the hub at {hub}: {e}") from None
    finally:
        browser.close()


def _login(args: argparse.Namespace) -> int:
    import getpass

    from det_hub.client import Client, resolve_master, save_token

    master = resolve_master(getattr(args, "master", None))
    hub = hub_url(master)
    username = args.username or input("Hub user name: ").strip()
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else \
        getpass.getpass(f"Password for {username} at {hub}: ")
    path = save_token(master, hub_token(hub, username, password))
    user = Client(master, None).me()
    print(f"Signed in as {user.username}{' (admin)' if user.admin else ''} on {master}; the "
          f"token is kept in {path}")
    return 0


def _logout(args: argparse.Namespace) -> int:
    from det_hub.client import resolve_master, save_token

    master = resolve_master(getattr(args, "master", None))
    save_token(master, None)
    print(f"Forgot the saved token for {master}")
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

    link = verbs.add_parser(
        "link-with-agent-user", parents=[json_parent],
        help="run a user's tasks as a Unix account (admins only)",
        description="Link a user to the Unix account their tasks run as where the master starts "
        "them as root, replacing any earlier link. uid and gid are what tasks get (1 to "
        "4294967294: never root); the names are for people reading the link.")
    link.add_argument("username", metavar="NAME")
    link.add_argument("--agent-uid", type=int, required=True, metavar="UID", help="the account's uid")
    link.add_argument("--agent-gid", type=int, required=True, metavar="GID", help="the group's gid")
    link.add_argument("--agent-user", metavar="USER", help="the account's name")
    link.add_argument("--agent-group", metavar="GROUP", help="the group's name")
    link.set_defaults(func=_link)

    unlink = verbs.add_parser("unlink-agent-user", parents=[json_parent],
                              help="forget the Unix account a user is linked to (admins only)")
    unlink.add_argument("username", metavar="NAME")
    unlink.set_defaults(func=_unlink)

    verbs.add_parser("whoami", parents=[json_parent], help="show the user of your token").set_defaults(func=_whoami)

    login = verbs.add_parser(
        "login", help="sign in through the JupyterHub the master is served by, and keep a token",
        description=f"Sign in at the hub in front of the master ({MASTER_ENV}, e.g. "
        "https://hub/services/det-hub), make a hub API token, and keep it for this master in "
        f"~/.det_hub/tokens.json (mode 0600); later commands use it unless {TOKEN_ENV} is set.")
    login.add_argument("username", metavar="NAME", nargs="?", help="the hub user (asked when "
                       "left out)")
    login.add_argument("--password-stdin", action="store_true",
                       help="read the password from standard input instead of asking")
    login.set_defaults(func=_login)
    verbs.add_parser("logout", help="forget the token saved for the master").set_defaults(
        func=_logout)
