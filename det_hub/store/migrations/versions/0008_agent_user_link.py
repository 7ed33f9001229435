"""Users may be linked to the Unix account their tasks run as (uid, gid and their names).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_COLUMNS = ("agent_uid", "agent_gid", "agent_user", "agent_group")


def upgrade() -> None:
    # Plain ALTER TABLE, no batch copy, on SQLite too: copying ``users`` would drop the
    # original, and with foreign keys on that deletes every user's tokens (ON DELETE CASCADE).
    # Every existing user starts unlinked: all four columns are NULL.
    op.add_column("users", sa.Column("agent_uid", sa.BigInteger(), nullable=True))
    op.add_column("users", sa.Column("agent_gid", sa.BigInteger(), nullable=True))
    op.add_column("users", sa.Column("agent_user", sa.String(32), nullable=True))
    op.add_column("users", sa.Column("agent_group", sa.String(32), nullable=True))


def downgrade() -> None:
    # The links are lost; the users stay. SQLite drops a column in place since 3.35.
    for name in reversed(_COLUMNS):
        op.drop_column("users", name)
