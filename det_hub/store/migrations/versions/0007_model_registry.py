"""The model registry: named models and their numbered versions, each naming a checkpoint.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-22
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_models_owner_id"),
            nullable=False,
        ),
        sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.UniqueConstraint("name", name="uq_models_name"),
    )
    op.create_index("ix_models_owner_id", "models", ["owner_id"])
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "model_id",
            sa.Integer(),
            sa.ForeignKey("models.id", ondelete="CASCADE", name="fk_model_versions_model_id"),
            nullable=False,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        # No cascade: a registered checkpoint's row must outlive anything that would take it.
        sa.Column(
            "checkpoint_uuid",
            sa.String(64),
            sa.ForeignKey("checkpoints.uuid", name="fk_model_versions_checkpoint_uuid"),
            nullable=False,
        ),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_model_versions_owner_id"),
            nullable=False,
        ),
        sa.Column("creation_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_updated_time", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("model_id", "version", name="uq_model_versions_model_id"),
    )
    op.create_index(
        "ix_model_versions_checkpoint_uuid", "model_versions", ["checkpoint_uuid"]
    )


def downgrade() -> None:
    # The registry's rows have no place in the older schema; the checkpoints they named stay.
    op.drop_index("ix_model_versions_checkpoint_uuid", table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index("ix_models_owner_id", table_name="models")
    op.drop_table("models")
