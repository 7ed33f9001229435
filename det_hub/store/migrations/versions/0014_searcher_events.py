"""Searcher events: what a search method was told since its whole state was last stored.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing experiments keep their whole state in experiments.searcher_state, with no
    # events after it: that is what a state without "events_through" means.
    op.create_table(
        "searcher_events",
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE",
                          name="fk_searcher_events_experiment_id"),
            primary_key=True,
        ),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("event", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
                  nullable=False),
    )


def downgrade() -> None:
    # An older master reads only experiments.searcher_state: events not yet folded into it
    # are lost, so a live search loses what happened since its state was last stored whole.
    op.drop_table("searcher_events")
