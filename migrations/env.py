"""Alembic environment: runs sessionlog's migrations against the URL the caller configured."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection, Engine, create_engine, event, pool

from sessionlog_server.storage.factory import normalise_url
from sessionlog_server.storage.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    """Emit SQL without a connection (`alembic upgrade --sql`)."""
    context.configure(
        url=normalise_url(config.get_main_option("sqlalchemy.url") or ""),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live database; SQLite needs batch mode to alter tables."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(normalise_url(config.get_main_option("sqlalchemy.url") or ""), poolclass=pool.NullPool)
    if engine.dialect.name == "sqlite":
        _transactional_sqlite(engine)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _transactional_sqlite(engine: Engine) -> None:
    """Run each SQLite migration step in a transaction of its own, its revision bump included.

    Alembic begins one per step, but pysqlite sends BEGIN only before INSERT, UPDATE and
    DELETE, so CREATE, DROP and ALTER ran each on its own: a step stopped partway (`db
    upgrade` killed, a failure inside it) left the tables it had made at the old revision,
    and every later upgrade failed on them ("table fold_snapshots already exists"). SQLite's
    DDL is transactional once the transaction is ours; IMMEDIATE takes the write lock at
    once, as the service's writer does.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # transactions are begun below, not by pysqlite

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
