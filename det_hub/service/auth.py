"""Who is calling, and the users: tokens, hub sign-ins, and the Unix accounts tasks run as.

:class:`Principal` is what every manager's method is given to decide what the caller may do;
:class:`UserManager` finds it from a token, and keeps the users and their links to Unix
accounts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub.scopes import ADMIN_SCOPE, MANAGE_SCOPE
from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound
from det_hub.service.unix_accounts import AgentUserGroup, link_problems
from det_hub.store import Store, StoreConflict, hash_token

if TYPE_CHECKING:
    from det_hub.service.cluster import Allocation, Cluster
    from det_hub.service.hub import HubIdentity
    from det_hub.store import User

log = logging.getLogger("det_hub.master")


_USERNAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.@-]{0,63}$")


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who is calling: a user, or the training code of one allocation. A hub user brings the
    det_hub scopes the hub granted them (:data:`det_hub.scopes.CUSTOM_SCOPES`)."""

    user: User | None = None
    allocation: Allocation | None = None
    scopes: frozenset[str] = frozenset()

    @property
    def is_admin(self) -> bool:
        return self.user is not None and (self.user.admin or ADMIN_SCOPE in self.scopes)

    def may(self, scope: str) -> bool:
        """Whether an admin, or a user holding this det_hub scope."""
        return self.user is not None and (self.is_admin or scope in self.scopes)

    def may_change(self, owner_id: int) -> bool:
        """Whether the caller may change work this user owns: its owner, an admin, or one
        who may manage anyone's work."""
        return self.user is not None and (self.user.id == owner_id or self.may(MANAGE_SCOPE))

    @property
    def trial_id(self) -> int | None:
        return self.allocation.spec.trial_id if self.allocation else None


class UserManager:
    """Authentication and the users (see the module's docstring).

    Args:
        store: The master's store.
        cluster: Knows the allocations, whose tokens training code calls with.
        hub: Who hub tokens belong to, when JupyterHub runs the master.
        task_account: The Unix ``(uid, gid)`` that runs the tasks of users linked to no
            account of their own (see :meth:`task_identity`).
    """

    def __init__(self, store: Store, cluster: Cluster, *, hub: HubIdentity | None,
                 task_account: tuple[int, int]) -> None:
        self.store = store
        self.cluster = cluster
        self.hub = hub
        self.task_account = task_account
        self._usernames: dict[int, str] = {}
        #: (uid, gid) of each user's linked Unix account, None when unlinked; see agent_user.
        self._agent_users: dict[int, tuple[int, int] | None] = {}
        self._token_cache: dict[str, tuple[float, Principal]] = {}

    async def ensure_admin_token(self, path: Path) -> str:
        """The admin token in ``path``, made (with the admin user) on first start."""
        if path.exists():
            token = path.read_text().strip()
            if token and await self.store.user_for_token(hash_token(token)) is not None:
                return token
        admin = await self.store.get_user("admin") or await self.store.create_user(
            "admin", admin=True)
        token = new_api_token()
        await self.store.add_token(admin.id, hash_token(token), description="admin token")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    async def authenticate(self, token: str) -> Principal | None:
        """Who calls with this token: the allocation whose training code holds it, else its
        user (hub tokens too, when the hub runs the master); None when nobody. A user's
        token is looked up again after 30 seconds."""
        token_hash = hash_token(token)
        alloc = self.cluster.allocations.by_token(token_hash)
        if alloc is not None:
            return Principal(allocation=alloc)
        cached = self._token_cache.get(token_hash)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        user = await self.store.user_for_token(token_hash)
        principal = Principal(user=user) if user is not None else None
        if principal is None and self.hub is not None:
            principal = await self._hub_principal(token)
        if principal is None:
            return None
        self._token_cache[token_hash] = (time.monotonic() + 30.0, principal)
        return principal

    async def _hub_principal(self, token: str) -> Principal | None:
        """Who a hub token belongs to (see :meth:`hub_principal`), None if nobody."""
        assert self.hub is not None
        model = await self.hub.user_for_token(token)
        return None if model is None else await self.hub_principal(model)

    async def hub_principal(self, model: dict[str, Any]) -> Principal:
        """The caller a hub user stands for (signed in through the hub, or holding a hub
        token), given the hub's model of them (``name``, ``admin``): the det_hub user of that
        name, made on first sight, an admin exactly while the hub says they are one."""
        name, admin = str(model["name"]), bool(model.get("admin"))
        user = await self.store.get_user(name)
        if user is None:
            try:
                user = await self.store.create_user(name, admin=admin)
            except StoreConflict:  # made by a request at the same moment
                user = await self.store.get_user(name)
        if user is not None and user.admin != admin:
            user = await self.store.update_user(user.id, admin=admin)
        if user is not None and user.agent_uid is None and self.hub is not None:
            account = await self.hub.unix_account(name)  # when HubIdentity.link_unix_users
            if account is not None:
                user = await self._store_agent_link(user.id, account)
                log.info("linked hub user %s to Unix account %s (uid %d, gid %d)", name,
                         account.user, account.uid, account.gid)
        return Principal(user=user, scopes=frozenset(model.get("scopes") or ()))

    async def username(self, user_id: int) -> str:
        """The name of the user with this id (``user-<id>`` for one that is gone); read once,
        then answered from memory."""
        if user_id not in self._usernames:
            user = await self.store.get_user_by_id(user_id)
            self._usernames[user_id] = user.username if user else f"user-{user_id}"
        return self._usernames[user_id]

    async def get(self, username: str) -> User | None:
        """The user of this name, None when there is none."""
        return await self.store.get_user(username)

    async def all(self) -> list[User]:
        """Every user, by id."""
        return await self.store.list_users()

    async def create(self, who: Principal, username: str, admin: bool) -> tuple[User, str]:
        """Create a user (admins only), with an API token shown only in this answer.

        Raises:
            Forbidden: The caller is not an admin.
            BadRequest: Not a valid username.
            Conflict: The name is taken."""
        if not who.is_admin:
            raise Forbidden("only admins can create users")
        if not _USERNAME.match(username):
            raise BadRequest(f"invalid username {username!r}: use letters, digits, '_', '.', "
                             "'@' and '-', at most 64 characters")
        try:
            user = await self.store.create_user(username, admin=admin)
        except StoreConflict:
            raise Conflict(f"user {username!r} already exists") from None
        token = new_api_token()
        await self.store.add_token(user.id, hash_token(token), description="created by admin")
        return user, token

    async def _linkable_user(self, who: Principal, username: str) -> User:
        if not who.is_admin:
            raise Forbidden("only admins can link users to Unix accounts")
        user = await self.store.get_user(username)
        if user is None:
            raise NotFound(f"user {username!r} not found")
        return user

    async def link_agent_user(self, who: Principal, username: str, agent_uid: Any,
                              agent_gid: Any, agent_user: Any = None,
                              agent_group: Any = None) -> User:
        """Link a user to the Unix account their tasks run as (admins only), replacing any
        earlier link. The names are optional; uid and gid are what tasks get.

        Raises:
            Forbidden: the caller is not an admin.
            NotFound: no such user.
            BadRequest: a uid or gid that is not an integer from 1 to 4294967294 (0, root,
                is refused), or a name that is not a Unix name; each is a detail naming its
                field.
        """
        user = await self._linkable_user(who, username)
        problems = link_problems(agent_uid, agent_gid, agent_user, agent_group)
        if problems:
            raise BadRequest(f"cannot link user {username!r}: " + "; ".join(
                f"{p['path']} {p['message']}" for p in problems), problems)
        return await self._store_agent_link(
            user.id, AgentUserGroup(agent_uid, agent_gid, agent_user, agent_group))

    async def unlink_agent_user(self, who: Principal, username: str) -> User:
        """Forget a user's Unix account (admins only); unlinking an unlinked user is no
        error.

        Raises:
            Forbidden: the caller is not an admin.
            NotFound: no such user.
        """
        user = await self._linkable_user(who, username)
        user = await self.store.unlink_agent_user(user.id)
        self._agent_users[user.id] = None
        return user

    async def _store_agent_link(self, user_id: int, account: AgentUserGroup) -> User:
        user = await self.store.link_agent_user(
            user_id, agent_uid=account.uid, agent_gid=account.gid, agent_user=account.user,
            agent_group=account.group)
        self._agent_users[user_id] = (account.uid, account.gid)
        return user

    async def agent_user(self, user_id: int) -> tuple[int, int] | None:
        """(uid, gid) of the Unix account a user's tasks run as, None when the user is not
        linked to one (or does not exist). Answered from memory after the first ask; links
        and unlinks made through this master update it."""
        if user_id not in self._agent_users:
            user = await self.store.get_user_by_id(user_id)
            found = (None if user is None or user.agent_uid is None or user.agent_gid is None
                     else (user.agent_uid, user.agent_gid))
            # setdefault: a link made while this read was in flight wins over what it read.
            self._agent_users.setdefault(user_id, found)
        return self._agent_users[user_id]

    async def run_as(self, user_id: int) -> tuple[int, int]:
        """The ``(uid, gid)`` a user's tasks run as, where an agent can choose: their linked
        Unix account's, else the master's task account (from memory, as :meth:`agent_user`)."""
        return await self.agent_user(user_id) or self.task_account

    async def task_identity(self, owner_id: int) -> tuple[tuple[int, int], bool]:
        """Who a user's tasks run as (:meth:`run_as`), and whether they are an admin (read
        afresh: an admin may have been made or unmade since)."""
        user = await self.store.get_user_by_id(owner_id)
        return await self.run_as(owner_id), bool(user is not None and user.admin)


def new_api_token() -> str:
    """A new API token: 64 hex digits. Never starting with ``-``, it is safe to give as
    ``det-hub --token TOKEN`` (argparse takes ``-x...`` for an option) and in a shell."""
    return secrets.token_hex(32)
