"""PostgreSQL's one statement storing a metric chunk: the key claimed, the trial's steps raised,
the chunk inserted and announced and its block summaries merged, built for each combination of
what a write asks (see :meth:`.metric_writes.MetricWriteQueries.insert_pack`).
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Integer,
    LargeBinary,
    String,
    TextClause,
    bindparam,
    text,
)
from sqlalchemy.dialects import postgresql as pg

from det_hub.states import TrialState

from ._common import numbered
from .columns import UTCDateTime
from .metric_summaries import merge_rules
from .models import MetricSummary
from .packing import ROW_BITS
from .summaries import LEVELS

#: The states of a trial that takes no more metrics.
ENDED = tuple(s.value for s in TrialState if s.terminal)

#: The block summary columns after trial and group, with their PostgreSQL types, read off
#: the ``metric_summaries`` table (what :meth:`.summaries.Block.row` fills).
_SUMMARY_TYPES = {c.name: c.type.compile(dialect=pg.dialect())
                  for c in MetricSummary.__table__.c if c.name not in ("trial_id", "group_name")}
_SUMMARY_COLUMNS = tuple(_SUMMARY_TYPES)


def _summaries_cte() -> str:
    """The CTE of :func:`chunk_sql` merging the chunk's block summaries (given as one JSON
    array of :meth:`.summaries.Block.row` objects, ``:summaries``, row ids relative to the
    chunk; the coarse ones past the trial's mark left out) into ``metric_summaries`` by
    :func:`.metric_summaries.merge_rules`, as :func:`.metric_summaries.upsert_statement`
    does."""
    record = ", ".join(f"{c} {_SUMMARY_TYPES[c]}" for c in _SUMMARY_COLUMNS)
    values = ", ".join(
        f"(CAST(chunk.id AS bigint) << {ROW_BITS}) + u.{c}" if c.endswith("_id") else f"u.{c}"
        for c in _SUMMARY_COLUMNS)

    table: Any = MetricSummary.__table__
    rules = merge_rules(table.c, pg.insert(table).excluded)
    merge = ", ".join(f"{name} = {rule.compile(dialect=pg.dialect())}"
                      for name, rule in rules.items())
    # The finest blocks, and the coarser ones below the trial's mark as the trial's row
    # lock let it be read (see .summaries.is_summarised_eagerly).
    return (f"summaries AS (INSERT INTO metric_summaries (trial_id, group_name, "
            f"{', '.join(_SUMMARY_COLUMNS)}) SELECT :trial_id, :group_name, {values} "
            "FROM chunk CROSS JOIN run CROSS JOIN json_to_recordset(:summaries) "
            f"AS u({record}) WHERE u.level = {LEVELS[0]} "
            "OR (u.block << u.level) < run.summaries_below "
            "ON CONFLICT (trial_id, group_name, name, level, block) "
            f"DO UPDATE SET {merge} RETURNING 1)")


#: The types of :func:`chunk_sql`'s parameters.
_CHUNK_TYPES: dict[str, Any] = {
    "trial_id": BigInteger(), "group_name": String(), "count": Integer(),
    "first_step": BigInteger(), "last_step": BigInteger(), "first_id": BigInteger(),
    "last_id": BigInteger(), "report_time": UTCDateTime(), "payload": LargeBinary(),
    "key": String(), "rows": Integer(), "steps_completed": BigInteger(),
    "channel": String(), "token_hash": String(), "summaries": JSON()}


@functools.cache
def chunk_sql(claim: bool, advance: bool, notify: bool, guard: bool, summaries: bool,
              finest_only: bool = False) -> str:
    """PostgreSQL's one statement storing a chunk (``:name`` parameters), with the parameters
    of :meth:`.metric_writes.MetricWriteQueries._insert_chunk_pg`. It reads the trial's run,
    raising its ``steps_completed`` (``advance``), with ``guard`` only while an open
    allocation of the trial holds ``token_hash`` and the trial has not ended; then claims the
    batch's ``key``
    (``claim``), inserts the chunk in that run if the key was new, announces it on
    ``channel`` (``notify``), and merges its block summaries (``summaries``,
    :func:`_summaries_cte`). It answers one row: whether the key was claimed, the chunk's id
    and run (NULL when nothing was inserted), the trial's summary mark
    (``Trial.summaries_below``), and whether the chunk was refused for want of its coarse
    blocks.

    The trial's row is locked first, and once: a copy of the batch sent again waits there
    for the first, then finds its key taken. Raising the steps again for a copy changes
    nothing, as they are never lowered.

    With ``finest_only`` the summaries hold the chunk's finest blocks alone, which serve every
    chunk whose rows all lie at or past the trial's mark as the lock lets it be read (their
    coarse blocks are made by a later roll-up, see .summaries). A chunk with rows below the
    mark stores nothing, claims no key, leaves the steps, and answers that it needs its
    coarse blocks."""
    where = ["t.id = :trial_id"]
    if guard:
        ended = ", ".join(f"'{s}'" for s in ENDED)
        where.append(f"t.state NOT IN ({ended}) AND EXISTS (SELECT 1 FROM allocations a "
                     "WHERE a.trial_id = t.id AND a.token_hash = :token_hash "
                     "AND a.ended_at IS NULL)")
    fits = ":first_step >= t.summaries_below" if finest_only else "true"
    if advance:
        # Never lower: the row is updated (and its run read) even when its steps stay.
        run = ("run AS (UPDATE trials t SET steps_completed = CASE WHEN "
               f"({fits}) AND (t.steps_completed IS NULL OR t.steps_completed < :steps_completed)"
               " THEN :steps_completed ELSE t.steps_completed END "
               f"WHERE {' AND '.join(where)} "
               f"RETURNING t.run_id, t.summaries_below, {fits} AS fits)")
    else:
        # Locked as the update would: a roll-up of the trial's summaries waits for this
        # statement, or this one for it and then reads the mark it left (see .summaries).
        run = (f"run AS (SELECT t.run_id, t.summaries_below, {fits} AS fits FROM trials t "
               f"WHERE {' AND '.join(where)} FOR SHARE OF t)")
    ctes = [run]
    stored_if = "run.fits"
    if claim:
        # The key is claimed only for a trial that may take the batch: a refused batch
        # leaves no key behind, even where the statement commits by itself.
        ctes.append("claim AS (INSERT INTO metric_batches (trial_id, key, rows, created_at) "
                    "SELECT :trial_id, :key, :rows, :report_time FROM run WHERE run.fits "
                    "ON CONFLICT (trial_id, key) DO NOTHING RETURNING 1)")
        stored_if = "EXISTS (SELECT 1 FROM claim)"
    announce = (", pg_notify(:channel, :trial_id || ' ' || id || ' ' || :last_step || ' ' || "
                ":group_name)" if notify else "")
    ctes.append(
        "chunk AS (INSERT INTO metric_chunks (trial_id, group_name, trial_run, count, "
        "first_step, last_step, first_id, last_id, report_time, payload) "
        "SELECT :trial_id, :group_name, run.run_id, :count, :first_step, :last_step, "
        f":first_id, :last_id, :report_time, :payload FROM run WHERE {stored_if} "
        f"RETURNING id, trial_run{announce})")
    if summaries:
        ctes.append(_summaries_cte())
    claimed = "(SELECT count(*) FROM claim)" if claim else "1"
    return (f"WITH {', '.join(ctes)} SELECT {claimed} AS claimed, chunk.id, chunk.trial_run, "
            "(SELECT summaries_below FROM run) AS summaries_below, "
            "EXISTS (SELECT 1 FROM run WHERE NOT run.fits) AS needs_coarse "
            "FROM (SELECT 1) AS one LEFT JOIN chunk ON true")


@functools.cache
def chunk_statement(claim: bool, advance: bool, notify: bool, guard: bool) -> TextClause:
    """:func:`chunk_sql` without summaries, for a session's transaction."""
    sql = chunk_sql(claim, advance, notify, guard, False)
    names = [n for n in _CHUNK_TYPES if f":{n}" in sql]
    return text(sql).bindparams(*(bindparam(n, type_=_CHUNK_TYPES[n]) for n in names))


@functools.cache
def direct_chunk_sql(claim: bool, advance: bool, notify: bool, guard: bool,
                     finest_only: bool) -> tuple[str, tuple[str, ...]]:
    """:func:`chunk_sql` with summaries, numbered for :meth:`.store.Store._write_direct`, and
    its parameters' names in order."""
    return numbered(chunk_sql(claim, advance, notify, guard, True, finest_only), {
        name: type_.compile(dialect=pg.dialect()) for name, type_ in _CHUNK_TYPES.items()})


__all__ = ["ENDED", "chunk_sql", "chunk_statement", "direct_chunk_sql"]
