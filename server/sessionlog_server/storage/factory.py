"""Open the recorder for a database URL (SQLite file by default, PostgreSQL in production)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.sqlite import BUSY_TIMEOUT_MS, SQLiteEventRecorder


def normalise_url(url: str) -> str:
    """Accept `postgresql://` and `postgres://` and use the psycopg 3 driver for them."""
    parsed = make_url(url)
    if parsed.drivername in {"postgresql", "postgres"}:
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def open_recorder(
    url: str, *, sqlite_synchronous: str = "FULL", sqlite_busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> EventRecorder:
    """The recorder for `url`; the schema must already be migrated (see migrate.upgrade). The
    `sqlite_` settings apply to a SQLite file only."""
    url = normalise_url(url)
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return SQLiteEventRecorder(url, synchronous=sqlite_synchronous, busy_timeout_ms=sqlite_busy_timeout_ms)
    if backend == "postgresql":
        from sessionlog_server.storage.postgres import PostgresEventRecorder

        return PostgresEventRecorder(url)
    raise ValueError(f"unsupported database {backend!r}: use a sqlite:/// or postgresql:// URL")
