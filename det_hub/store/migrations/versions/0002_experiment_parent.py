"""Experiments remember the experiment they were forked from.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite cannot add a foreign key to an existing table, so there the table is
    # copied; PostgreSQL gets plain ALTER TABLE statements.
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            "fk_experiments_parent_id", "experiments", ["parent_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_constraint("fk_experiments_parent_id", type_="foreignkey")
        batch.drop_column("parent_id")
