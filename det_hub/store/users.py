"""Users and their API tokens: queries of the ``users`` and ``tokens`` tables.

:class:`UserQueries` is mixed into :class:`det_hub.store.Store`. A token is stored, and looked
up, by its hash (:func:`hash_token`), never by its secret.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from sqlalchemy import or_, select

from ._common import Queries, plain
from .columns import utcnow
from .models import Token, User


def hash_token(secret: str) -> str:
    """The form in which a token is stored and looked up: sha256 hex of the secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class UserQueries(Queries):
    """Queries of the ``users`` and ``tokens`` tables (see :class:`Store`)."""

    async def create_user(self, username: str, *, admin: bool = False) -> User:
        """Add an active user.

        Raises:
            StoreConflict: the username is taken.
        """
        user = User(username=username, admin=admin, active=True, created_at=utcnow())
        await self._write(lambda session: session.add(user))
        return user

    async def get_user(self, username: str) -> User | None:
        """The user with this name, active or not."""
        async with self._reading() as session:
            return await session.scalar(select(User).where(User.username == username))

    async def get_user_by_id(self, user_id: int) -> User | None:
        """The user with this id, active or not."""
        async with self._reading() as session:
            return await session.get(User, user_id)

    async def list_users(self) -> list[User]:
        """All users, by id."""
        async with self._reading() as session:
            return list(await session.scalars(select(User).order_by(User.id)))

    async def update_user(self, user_id: int, **fields: Any) -> User:
        """Set columns of a user (``active``, ``admin``, ...).

        Raises:
            NotFound: no such user.
            StoreConflict: a new username is taken.
            ValueError: a name that is not a column, or the primary key.
        """
        return await self._update(User, user_id, fields)

    async def link_agent_user(self, user_id: int, *, agent_uid: int, agent_gid: int,
                              agent_user: str | None = None,
                              agent_group: str | None = None) -> User:
        """Link a user to the Unix account their tasks run as, replacing any earlier link
        (all four columns are written, so no part of an old link is left behind).

        Raises:
            NotFound: no such user.
        """
        return await self._update(User, user_id, {
            "agent_uid": agent_uid, "agent_gid": agent_gid, "agent_user": agent_user,
            "agent_group": agent_group})

    async def unlink_agent_user(self, user_id: int) -> User:
        """Forget a user's Unix account; unlinking a user without one changes nothing.

        Raises:
            NotFound: no such user.
        """
        return await self._update(User, user_id, {
            "agent_uid": None, "agent_gid": None, "agent_user": None, "agent_group": None})

    async def add_token(
        self,
        user_id: int,
        token_hash: str,
        *,
        description: str = "",
        expires_at: dt.datetime | None = None,
    ) -> Token:
        """Record a user token by its hash (see :func:`hash_token`).

        Raises:
            StoreConflict: the hash is already recorded.
            NotFound: no such user.
        """
        token = Token(
            user_id=user_id,
            token_hash=token_hash,
            description=description,
            created_at=utcnow(),
            expires_at=plain(expires_at),
        )
        await self._write(lambda session: session.add(token))
        return token

    async def user_for_token(self, token_hash: str) -> User | None:
        """The active user owning an unexpired token with this hash, else ``None``."""
        stmt = (
            select(User)
            .join(Token, Token.user_id == User.id)
            .where(
                Token.token_hash == token_hash,
                User.active.is_(True),
                or_(Token.expires_at.is_(None), Token.expires_at > utcnow()),
            )
        )
        async with self._reading() as session:
            return await session.scalar(stmt)


__all__ = ["UserQueries", "hash_token"]
