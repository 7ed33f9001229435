"""Webhooks: URLs the master POSTs to on experiment state changes and custom alerts.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("webhook_type", sa.String(16), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "webhook_triggers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "webhook_id",
            sa.Integer(),
            sa.ForeignKey("webhooks.id", ondelete="CASCADE",
                          name="fk_webhook_triggers_webhook_id"),
            nullable=False,
        ),
        sa.Column("trigger_type", sa.String(32), nullable=False),
        sa.Column("condition", _json(), nullable=False),
    )
    op.create_index("ix_webhook_triggers_webhook_id", "webhook_triggers", ["webhook_id"])


def downgrade() -> None:
    # Registered webhooks are lost; nothing else refers to them.
    op.drop_index("ix_webhook_triggers_webhook_id", table_name="webhook_triggers")
    op.drop_table("webhook_triggers")
    op.drop_table("webhooks")
