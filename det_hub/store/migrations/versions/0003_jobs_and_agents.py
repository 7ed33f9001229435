"""Job queue settings on experiments, multi-agent allocations and agent settings.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("queue_position", sa.Float(), nullable=True))
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("placements", _json(), nullable=True))
    op.create_table(
        "agent_settings",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("agent_settings")
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("placements")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("queue_position")
        batch.drop_column("weight")
