"""Tasks that are not trials (commands first): their table, and allocations and logs of them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column(
            "owner_id",
            sa.Integer(),
            sa.ForeignKey("users.id", name="fk_tasks_owner_id"),
            nullable=False,
        ),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("config", _json(), nullable=False),
        sa.Column("resource_pool", sa.String(255), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("queue_position", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sa.Text(), nullable=True),
    )
    op.create_index("ix_tasks_owner_id", "tasks", ["owner_id"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "task_contexts",
        sa.Column(
            "task_id",
            sa.Integer(),
            sa.ForeignKey("tasks.id", ondelete="CASCADE", name="fk_task_contexts_task_id"),
            primary_key=True,
        ),
        sa.Column("archive", sa.LargeBinary(), nullable=False),
    )
    # SQLite cannot alter a column in place: batch mode copies the table (rows kept).
    with op.batch_alter_table("allocations") as batch:
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=True)
        batch.add_column(sa.Column("task_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_allocations_task_id", "tasks", ["task_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_allocations_task_id", ["task_id"])
    with op.batch_alter_table("task_logs") as batch:
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=True)
        batch.add_column(sa.Column("task_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_task_logs_task_id", "tasks", ["task_id"], ["id"],
                                 ondelete="CASCADE")
        batch.create_index("ix_task_logs_task_id_id", ["task_id", "id"])


def downgrade() -> None:
    # Rows of tasks have no place in the older schema.
    op.execute("DELETE FROM task_logs WHERE task_id IS NOT NULL")
    op.execute("DELETE FROM allocations WHERE task_id IS NOT NULL")
    with op.batch_alter_table("task_logs") as batch:
        batch.drop_index("ix_task_logs_task_id_id")
        batch.drop_constraint("fk_task_logs_task_id", type_="foreignkey")
        batch.drop_column("task_id")
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=False)
    with op.batch_alter_table("allocations") as batch:
        batch.drop_index("ix_allocations_task_id")
        batch.drop_constraint("fk_allocations_task_id", type_="foreignkey")
        batch.drop_column("task_id")
        batch.alter_column("trial_id", existing_type=sa.Integer(), nullable=False)
    op.drop_table("task_contexts")
    op.drop_index("ix_tasks_state", table_name="tasks")
    op.drop_index("ix_tasks_owner_id", table_name="tasks")
    op.drop_table("tasks")
