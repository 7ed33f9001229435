"""Trial runs: each start of a trial's process is numbered, metric rows carry the run that
reported them, and rows a later run rolled back are kept apart in ``rolled_back_metrics``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing trials and rows belong to run 0: the runs before runs were counted.
    op.add_column("trials", sa.Column("run_id", sa.Integer(), nullable=False,
                                      server_default="0"))
    trial_run = sa.Column("trial_run", sa.Integer(), nullable=False, server_default="0")
    if op.get_bind().dialect.name == "sqlite":
        # A row rolled back leaves ``metrics``; SQLite would give its id to the next row
        # stored, and a live stream resumes by id. AUTOINCREMENT never gives an id twice: the
        # table is copied into one declared so (PostgreSQL's sequence never did).
        with op.batch_alter_table("metrics", recreate="always",
                                  table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.add_column(trial_run)
    else:
        op.add_column("metrics", trial_run)
    op.create_table(
        "rolled_back_metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=False),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE",
                          name="fk_rolled_back_metrics_trial_id"),
            nullable=False,
        ),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metrics", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
                  nullable=False),
        sa.Column("trial_run", sa.Integer(), nullable=False),
        sa.Column("rolled_back_by_run", sa.Integer(), nullable=False),
        sa.Column("rolled_back_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_rolled_back_metrics_trial_id", "rolled_back_metrics", ["trial_id"])


def downgrade() -> None:
    # Rolled-back rows go with their table; the rows that count stay in ``metrics``.
    op.drop_index("ix_rolled_back_metrics_trial_id", table_name="rolled_back_metrics")
    op.drop_table("rolled_back_metrics")
    with op.batch_alter_table("metrics", recreate="auto") as batch:
        batch.drop_column("trial_run")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("run_id")
