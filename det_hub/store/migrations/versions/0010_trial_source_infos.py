"""Trial source infos: the checkpoints and model versions a trial reported using.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trial_source_infos",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE",
                          name="fk_trial_source_infos_trial_id"),
            nullable=False,
        ),
        sa.Column(
            "checkpoint_uuid",
            sa.String(64),
            sa.ForeignKey("checkpoints.uuid", ondelete="CASCADE",
                          name="fk_trial_source_infos_checkpoint_uuid"),
            nullable=False,
        ),
        sa.Column(
            "model_version_id",
            sa.Integer(),
            sa.ForeignKey("model_versions.id", ondelete="CASCADE",
                          name="fk_trial_source_infos_model_version_id"),
            nullable=True,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        # Also the index of a trial's links, as its first column.
        sa.UniqueConstraint("trial_id", "checkpoint_uuid", "model_version_id",
                            name="uq_trial_source_infos_trial_id"),
    )
    op.create_index("ix_trial_source_infos_checkpoint_uuid", "trial_source_infos",
                    ["checkpoint_uuid"])
    op.create_index("ix_trial_source_infos_model_version_id", "trial_source_infos",
                    ["model_version_id"])


def downgrade() -> None:
    # The links are lost; the trials, checkpoints and versions they named stay.
    op.drop_index("ix_trial_source_infos_model_version_id", table_name="trial_source_infos")
    op.drop_index("ix_trial_source_infos_checkpoint_uuid", table_name="trial_source_infos")
    op.drop_table("trial_source_infos")
