"""Metric chunks: a reported batch is stored as one row of packed columns (``metric_chunks``)
instead of one row per point (``metrics``).

Existing rows are packed into chunks that list their rows' ids, so that every id a stream, a
summary or a rolled-back row holds stays valid; a chunk holds a run of rows with consecutive
ids of one trial, group and run, so chunks' id ranges never overlap. Chunks stored afterwards
number their rows above every id given so far.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from det_hub.store.packing import ROW_BITS, Pack, to_micros

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

#: The most rows of the old table packed into one chunk.
_LEGACY_CHUNK_ROWS = 1_000

_json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_time = sa.DateTime(timezone=True)

_metrics = sa.table(
    "metrics",
    sa.column("id", sa.BigInteger()),
    sa.column("trial_id", sa.Integer()),
    sa.column("group_name", sa.String()),
    sa.column("steps_completed", sa.BigInteger()),
    sa.column("report_time", _time),
    sa.column("metrics", _json),
    sa.column("trial_run", sa.Integer()),
)
_chunks = sa.table(
    "metric_chunks",
    sa.column("id", sa.BigInteger()),
    sa.column("trial_id", sa.Integer()),
    sa.column("group_name", sa.String()),
    sa.column("trial_run", sa.Integer()),
    sa.column("count", sa.Integer()),
    sa.column("first_step", sa.BigInteger()),
    sa.column("last_step", sa.BigInteger()),
    sa.column("first_id", sa.BigInteger()),
    sa.column("last_id", sa.BigInteger()),
    sa.column("report_time", _time),
    sa.column("payload", sa.LargeBinary()),
)


def _runs(rows: Iterator[Any]) -> Iterator[list[Any]]:
    """Rows by id, cut into runs of one trial, group and run, of consecutive ids."""
    run: list[Any] = []
    for row in rows:
        if run and (len(run) >= _LEGACY_CHUNK_ROWS or row.id != run[-1].id + 1
                    or (row.trial_id, row.group_name, row.trial_run)
                    != (run[0].trial_id, run[0].group_name, run[0].trial_run)):
            yield run
            run = []
        run.append(row)
    if run:
        yield run


def _all_rows(bind: sa.Connection) -> Iterator[Any]:
    """The old table's rows by id, read a page at a time."""
    after = 0
    while True:
        page = bind.execute(sa.select(_metrics).where(_metrics.c.id > after)
                            .order_by(_metrics.c.id).limit(10_000)).all()
        yield from page
        if len(page) < 10_000:
            return
        after = page[-1].id


def upgrade() -> None:
    op.create_table(
        "metric_chunks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("trial_id", sa.Integer(),
                  sa.ForeignKey("trials.id", ondelete="CASCADE",
                                name="fk_metric_chunks_trial_id"),
                  nullable=False),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("trial_run", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("first_id", sa.BigInteger(), nullable=True),
        sa.Column("last_id", sa.BigInteger(), nullable=True),
        sa.Column("report_time", _time, nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_metric_chunks_trial_group_last", "metric_chunks",
                    ["trial_id", "group_name", "last_step"])
    bind = op.get_bind()
    chunks = 0
    for run in _runs(_all_rows(bind)):
        pack = Pack.of_metrics([r.steps_completed for r in run], [r.metrics for r in run])
        pack.ids = [r.id for r in run]
        pack.times = [to_micros(r.report_time) for r in run]
        bind.execute(sa.insert(_chunks).values(
            trial_id=run[0].trial_id, group_name=run[0].group_name,
            trial_run=run[0].trial_run, count=len(run),
            first_step=min(pack.steps), last_step=max(pack.steps),
            first_id=run[0].id, last_id=run[-1].id,
            report_time=run[0].report_time, payload=pack.encode()))
        chunks += 1
    # New chunks number their rows above every id given so far, rolled-back rows' included.
    highest = max(int(bind.scalar(sa.text(f"SELECT max(id) FROM {table}")) or 0)
                  for table in ("metrics", "rolled_back_metrics"))
    first_new = max(chunks, highest >> ROW_BITS) + 1
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("SELECT setval(pg_get_serial_sequence('metric_chunks', 'id'), "
                             ":next, false)"), {"next": first_new})
    elif first_new - 1 > chunks:
        bind.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'metric_chunks'"))
        bind.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) "
                             "VALUES ('metric_chunks', :last)"), {"last": first_new - 1})
    op.drop_index("ix_metrics_trial_group_steps", table_name="metrics")
    op.drop_table("metrics")


def downgrade() -> None:
    op.create_table(
        "metrics",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("trial_id", sa.Integer(),
                  sa.ForeignKey("trials.id", ondelete="CASCADE",
                                name="fk_metrics_trial_id"),
                  nullable=False),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("steps_completed", sa.BigInteger(), nullable=False),
        sa.Column("report_time", _time, nullable=False),
        sa.Column("metrics", _json, nullable=False),
        sa.Column("trial_run", sa.Integer(), nullable=False, server_default="0"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_metrics_trial_group_steps", "metrics",
                    ["trial_id", "group_name", "steps_completed", "id"])
    bind = op.get_bind()
    for chunk in bind.execute(sa.select(_chunks).order_by(_chunks.c.id)).all():
        pack = Pack.decode(chunk.payload)
        times = pack.report_times(chunk.report_time)
        bind.execute(sa.insert(_metrics), [
            {"id": row_id, "trial_id": chunk.trial_id, "group_name": chunk.group_name,
             "steps_completed": step, "report_time": time, "metrics": metrics,
             "trial_run": chunk.trial_run}
            for row_id, step, time, metrics in zip(
                pack.row_ids(chunk.id), pack.steps, times, pack.all_metrics(), strict=True)])
    if bind.dialect.name == "postgresql":
        bind.execute(sa.text("SELECT setval(pg_get_serial_sequence('metrics', 'id'), "
                             "coalesce((SELECT max(id) FROM metrics), 0) + 1, false)"))
    op.drop_index("ix_metric_chunks_trial_group_last", table_name="metric_chunks")
    op.drop_table("metric_chunks")
