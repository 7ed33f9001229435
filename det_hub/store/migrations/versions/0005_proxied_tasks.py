"""Notebooks, shells and TensorBoards: what a task's type needs, its secret, its proxy address.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-08
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("details", _json(), nullable=True))
        batch.add_column(sa.Column("secret", sa.Text(), nullable=True))
        batch.add_column(sa.Column("proxy_address", sa.String(255), nullable=True))


def downgrade() -> None:
    # Tasks of the new types have no meaning in the older schema.
    for table in ("task_logs", "allocations", "task_contexts"):
        op.execute(f"DELETE FROM {table} WHERE task_id IN "
                   "(SELECT id FROM tasks WHERE type <> 'COMMAND')")
    op.execute("DELETE FROM tasks WHERE type <> 'COMMAND'")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("proxy_address")
        batch.drop_column("secret")
        batch.drop_column("details")
