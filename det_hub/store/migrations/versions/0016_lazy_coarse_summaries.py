"""Coarse block summaries follow a trial's rows in spans: ``trials.summaries_below`` is the
step below which the coarse levels hold the trial's rows (see :mod:`det_hub.store.summaries`).

The coarse levels of existing trials hold every row they have, so their mark is set past any
step: their rows go on being summarised at every level as they arrive, as before.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

#: Past any step a trial reports (steps are whole numbers below 2**63).
_PAST_EVERY_STEP = 1 << 62


def upgrade() -> None:
    op.add_column("trials", sa.Column("summaries_below", sa.BigInteger(), nullable=False,
                                      server_default="0"))
    trials = sa.table("trials", sa.column("summaries_below", sa.BigInteger()))
    op.execute(trials.update().values(summaries_below=_PAST_EVERY_STEP))


def downgrade() -> None:
    # The older code reads coarse blocks as holding every row: each trial's finest blocks
    # from its mark on are rolled up into them first.
    from det_hub.store.metric_summaries import roll_up_in

    conn = op.get_bind()
    trials = sa.table("trials", sa.column("id", sa.Integer()),
                      sa.column("summaries_below", sa.BigInteger()))
    for (trial_id,) in conn.execute(sa.select(trials.c.id)
                                    .where(trials.c.summaries_below < _PAST_EVERY_STEP)):
        roll_up_in(conn, trial_id, _PAST_EVERY_STEP)
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("summaries_below")
