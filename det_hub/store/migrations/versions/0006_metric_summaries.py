"""Metric summaries: per-block extremes of every numeric metric, for drawing long curves.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-15
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BACKFILL_BATCH = 20_000


def upgrade() -> None:
    point: list[sa.Column[Any]] = []
    for corner in ("first", "last", "min", "max"):
        point += [
            sa.Column(f"{corner}_step", sa.BigInteger(), nullable=False),
            sa.Column(f"{corner}_id", sa.BigInteger(), nullable=False),
            sa.Column(f"{corner}_value", sa.Float(53), nullable=False),
        ]
    op.create_table(
        "metric_summaries",
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE", name="fk_metric_summaries_trial_id"),
            primary_key=True,
        ),
        sa.Column("group_name", sa.String(64), primary_key=True),
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("level", sa.Integer(), primary_key=True),
        sa.Column("block", sa.BigInteger(), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        *point,
    )
    _backfill()


def _backfill() -> None:
    """Summarise the metrics already stored, one trial and group at a time."""
    # Imported here: only this step needs the summarising code, and it is the same code that
    # keeps summaries current afterwards.
    from det_hub.store.summaries import summarize

    bind = op.get_bind()
    metrics = sa.table(
        "metrics",
        sa.column("id"), sa.column("trial_id"), sa.column("group_name"),
        sa.column("steps_completed"), sa.column("metrics", sa.JSON()),
    )
    summaries = sa.table("metric_summaries", *(sa.column(c) for c in _COLUMNS))
    series = bind.execute(
        sa.select(metrics.c.trial_id, metrics.c.group_name).distinct()
    ).all()
    for trial_id, group in series:
        blocks: dict[Any, Any] = {}
        after = -1
        while True:
            batch = bind.execute(
                sa.select(metrics.c.id, metrics.c.steps_completed, metrics.c.metrics)
                .where(metrics.c.trial_id == trial_id, metrics.c.group_name == group,
                       metrics.c.id > after)
                .order_by(metrics.c.id)
                .limit(_BACKFILL_BATCH)
            ).all()
            if not batch:
                break
            summarize(((i, s, m) for i, s, m in batch), into=blocks)
            after = batch[-1][0]
        if blocks:
            bind.execute(summaries.insert(), [
                {"trial_id": trial_id, "group_name": group, **b.row()} for b in blocks.values()
            ])


_COLUMNS = (
    "trial_id", "group_name", "name", "level", "block", "count",
    *(f"{corner}_{part}" for corner in ("first", "last", "min", "max")
      for part in ("step", "id", "value")),
)


def downgrade() -> None:
    op.drop_table("metric_summaries")
