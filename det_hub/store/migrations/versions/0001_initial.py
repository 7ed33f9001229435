"""The initial schema: users, tokens, experiments, trials, allocations, metrics, checkpoints, logs.

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _big_id() -> sa.types.TypeEngine:
    # SQLite autoincrements only a column declared exactly INTEGER.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("username", name="uq_users_username"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "user_id",
            sa.Integer(),
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_tokens_user_id"),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("token_hash", name="uq_tokens_token_hash"),
    )
    op.create_index("ix_tokens_user_id", "tokens", ["user_id"])

    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_experiments_owner_id"),
            nullable=False,
        ),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("archived", sa.Boolean(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("config", _json(), nullable=False),
        sa.Column("original_config", sa.Text(), nullable=False),
        sa.Column("searcher_metric", sa.String(255), nullable=False),
        sa.Column("smaller_is_better", sa.Boolean(), nullable=False),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("searcher_state", _json(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
    )
    op.create_index("ix_experiments_owner_id", "experiments", ["owner_id"])
    op.create_index("ix_experiments_state", "experiments", ["state"])

    op.create_table(
        "experiment_contexts",
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey(
                "experiments.id", ondelete="CASCADE", name="fk_experiment_contexts_experiment_id"
            ),
            primary_key=True,
        ),
        sa.Column("archive", sa.LargeBinary(), nullable=False),
    )

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE", name="fk_trials_experiment_id"),
            nullable=False,
        ),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("run_state", sa.String(32), nullable=True),
        sa.Column("hparams", _json(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("latest_checkpoint", sa.String(64), nullable=True),
        sa.Column("best_validation", _json(), nullable=True),
        sa.Column("latest_validation", _json(), nullable=True),
        sa.Column("searcher_metric_value", sa.Float(), nullable=True),
        sa.Column("runner_state", sa.String(255), nullable=True),
    )
    op.create_index("ix_trials_experiment_id", "trials", ["experiment_id"])

    op.create_table(
        "allocations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE", name="fk_allocations_trial_id"),
            nullable=False,
        ),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(255), nullable=True),
        sa.Column("slot_ids", _json(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("workdir", sa.Text(), nullable=True),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.Column("preempt", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.Text(), nullable=True),
        sa.UniqueConstraint("token_hash", name="uq_allocations_token_hash"),
    )
    op.create_index("ix_allocations_trial_id", "allocations", ["trial_id"])
    op.create_index("ix_allocations_ended_at", "allocations", ["ended_at"])

    op.create_table(
        "metrics",
        sa.Column("id", _big_id(), primary_key=True, autoincrement=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE", name="fk_metrics_trial_id"),
            nullable=False,
        ),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metrics", _json(), nullable=False),
    )
    op.create_index(
        "ix_metrics_trial_group_steps",
        "metrics",
        ["trial_id", "group_name", "steps_completed", "id"],
    )

    op.create_table(
        "checkpoints",
        sa.Column("uuid", sa.String(64), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE", name="fk_checkpoints_trial_id"),
            nullable=False,
        ),
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey(
                "experiments.id", ondelete="CASCADE", name="fk_checkpoints_experiment_id"
            ),
            nullable=False,
        ),
        sa.Column("allocation_id", sa.String(64), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("report_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resources", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("storage", _json(), nullable=False),
    )
    op.create_index("ix_checkpoints_trial_id", "checkpoints", ["trial_id"])
    op.create_index("ix_checkpoints_experiment_id", "checkpoints", ["experiment_id"])

    op.create_table(
        "task_logs",
        sa.Column("id", _big_id(), primary_key=True, autoincrement=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE", name="fk_task_logs_trial_id"),
            nullable=False,
        ),
        sa.Column("allocation_id", sa.String(64), nullable=True),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("stdtype", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
    )
    op.create_index("ix_task_logs_trial_id_id", "task_logs", ["trial_id", "id"])


def downgrade() -> None:
    for table in (
        "task_logs",
        "checkpoints",
        "metrics",
        "allocations",
        "trials",
        "experiment_contexts",
        "experiments",
        "tokens",
        "users",
    ):
        op.drop_table(table)
