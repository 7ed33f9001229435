"""The Unix accounts det_hub users are linked to (Determined's ``link-with-agent-user``), and
the one that runs the tasks of users linked to none.

Where the master starts tasks as root, a linked user's tasks run with the account's uid and
gid; an unlinked user's run as the task account (``MasterApp.task_user``, ``nobody`` unless
the operator names another). A link is four values: uid and gid, which matter, and the user and group names, which
are for people reading the link. Root is never linked: a task that ran as uid 0 or gid 0
would own the host.
"""

from __future__ import annotations

import dataclasses
import grp
import pwd
import re
from typing import Any

#: The account that runs unlinked users' tasks unless the operator names another.
DEFAULT_TASK_USER = "nobody"
#: The largest uid or gid a link may name; 2**32 - 1 is ``(uid_t) -1``, "no account".
MAX_ID = 2**32 - 2
#: The names of the account and group: what Debian's ``adduser`` and POSIX portable names
#: allow, upper case too, with an optional ``$`` at the end (Samba machine accounts).
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\$?$")
_NAME_MAX = 32
_NAME_RULE = (f"must be a Unix name: a letter or '_', then letters, digits, '_', '.' or '-' "
              f"(and an optional '$' at the end), at most {_NAME_MAX} characters")


@dataclasses.dataclass(frozen=True)
class AgentUserGroup:
    """A Unix account as a link names it."""

    uid: int
    gid: int
    user: str | None = None
    group: str | None = None


def link_problems(agent_uid: Any, agent_gid: Any, agent_user: Any,
                  agent_group: Any) -> list[dict[str, str]]:
    """What is wrong with a link's four values, one ``{"path", "message"}`` per field; empty
    when it may be stored. The names may be None (unknown)."""
    problems: list[dict[str, str]] = []
    for path, value, root in (("agent_uid", agent_uid, "0 is root"),
                              ("agent_gid", agent_gid, "0 is root's group")):
        # bool is an int in Python, but true is no uid.
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append({"path": path, "message": f"must be an integer from 1 to {MAX_ID}"})
        elif value == 0:
            problems.append({"path": path, "message": f"{root}; tasks never run as root"})
        elif not 1 <= value <= MAX_ID:
            problems.append({"path": path, "message": f"must be from 1 to {MAX_ID}"})
    for path, value in (("agent_user", agent_user), ("agent_group", agent_group)):
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > _NAME_MAX or not _NAME.match(value):
            problems.append({"path": path, "message": _NAME_RULE})
    return problems


def unix_account(name: str) -> AgentUserGroup | None:
    """The account of this name on this host, with its primary group, from the system's user
    database (``/etc/passwd``, or whatever NSS is set up to ask); None when there is none.

    Blocking: NSS may ask a directory server. Call it off the event loop.
    """
    try:
        account = pwd.getpwnam(name)
    except (KeyError, ValueError):  # no such account; a name with a NUL in it
        return None
    try:
        group: str | None = grp.getgrgid(account.pw_gid).gr_name
    except KeyError:  # a primary group without a name
        group = None
    return AgentUserGroup(account.pw_uid, account.pw_gid, account.pw_name, group)


def task_account(spec: str = DEFAULT_TASK_USER) -> tuple[int, int]:
    """The task account ``spec`` (an account name, or ``uid[:gid]``) as ``(uid, gid)``.

    Raises:
        ValueError: no such account, or it is root: tasks never run as root.
    """
    name, _, group = spec.partition(":")
    if name.isdigit():
        uid = int(name)
        gid = int(group) if group.isdigit() else uid
    else:
        account = unix_account(name)
        if account is None:
            raise ValueError(f"no Unix account {name!r}")
        uid, gid = account.uid, account.gid
    if uid == 0 or gid == 0:
        raise ValueError(f"{spec!r} is root: tasks never run as root")
    return uid, gid


__all__ = ["DEFAULT_TASK_USER", "MAX_ID", "AgentUserGroup", "link_problems", "task_account",
           "unix_account"]
