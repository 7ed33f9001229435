"""Alembic environment for the det_hub store.

:meth:`det_hub.store.Store.open` passes a ready connection in ``config.attributes["connection"]``;
the ``alembic`` command line works too, given ``sqlalchemy.url``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection

from det_hub.store.models import Base

# Any constant shared by every master that may migrate the same database at once.
_PG_MIGRATION_LOCK = 0x6465745F687562  # "det_hub"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite does roll back DDL; running the whole upgrade in one transaction means a failed
        # or interrupted upgrade leaves the previous schema intact.
        transactional_ddl=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Masters starting together must not both create the schema. The lock is released
            # at commit; the second one then finds the version table at head. (On SQLite the
            # transaction begins with BEGIN IMMEDIATE, which serialises the same way.)
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
            )
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("det_hub migrations run online only")
run_migrations_online()
