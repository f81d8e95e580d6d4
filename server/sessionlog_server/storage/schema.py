"""Whether a database is ready to serve: it takes writes and its schema is the one this code was
written for, answered without loading Alembic when it is.

A restart finds its database at head nearly every time, and importing Alembic (with the Mako
and Pygments its script directory loads) cost 8 % of a one-process start-up's instructions, and
0.1-0.2 s, in every process that imported it, workers included, for a check one query answers. `prepare` reads the
version table itself and loads `migrate` (Alembic) only when the database is anywhere else:
to migrate it, or to say why it will not be served.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, create_engine, inspect, make_url, text
from sqlalchemy.pool import NullPool

from sessionlog_server.storage.factory import normalise_url, shown_url, sqlite_file

SCHEMA_REVISION = "0006"
"""The Alembic revision the models (storage/models.py) describe: the head of migrations/, which
a test holds this to. A new migration moves both."""

VERSION_TABLE = "alembic_version"
"""Where Alembic keeps a database's revision (its default name; migrations/env.py keeps it)."""


def prepare(url: str, migrate: bool) -> None:
    """Before serving: make sure the database takes writes (`check_writable`), then, unless it
    is at SCHEMA_REVISION already, bring it to head, or, told not to migrate, refuse it
    (`migrate.upgrade`, `migrate.check_at_head`)."""
    check_writable(url)
    if not missing(url) and stored_revisions(url) == [SCHEMA_REVISION]:
        return
    from sessionlog_server.storage import migrate as alembic_chain  # only a database not at head pays for Alembic

    if migrate:
        alembic_chain.upgrade(url)
    else:
        alembic_chain.check_at_head(url)


def stored_revisions(url: str) -> list[str]:
    """The revisions in the database's version table: none if it was never migrated (no table or
    an empty one), one for a database on this linear chain."""
    with connection(url) as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return []
        return [str(row[0]) for row in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]


def check_writable(url: str) -> None:
    """Refuse (ValueError, naming the database) a PostgreSQL database that takes no writes: a
    standby (a replica's address given by mistake) or one whose transactions are read-only
    (`default_transaction_read_only` on the database or the role). Served anyway, reads worked,
    the health check said SERVING and every write failed with STORAGE_UNAVAILABLE, which
    clients retry as if it would pass."""
    parsed = make_url(normalise_url(url))
    if parsed.get_backend_name() != "postgresql":
        return
    with connection(url) as conn:
        standby, read_only = conn.execute(
            text("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')")
        ).one()
    if standby or read_only == "on":
        why = "a standby in recovery" if standby else "its transactions are read-only: default_transaction_read_only"
        raise ValueError(
            f"the database {shown_url(url)} is read-only ({why}); sessionlog writes to it: "
            "point --db (SESSIONLOG_DB) at the primary"
        )


def missing(url: str) -> bool:
    """Whether `url` names a SQLite file that does not exist (and must not be created here)."""
    file = sqlite_file(url)
    return file is not None and not file.exists()


@contextmanager
def connection(url: str) -> Iterator[Connection]:
    """One connection to `url`, for a check before serving or the migration lock: its engine,
    pooling nothing, is disposed of once the connection is done."""
    engine = create_engine(make_url(normalise_url(url)), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()
