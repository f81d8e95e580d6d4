"""Open the recorder for a database URL (SQLite file by default, PostgreSQL in production)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from sessionlog_server.storage.sqlite_settings import BUSY_TIMEOUT_MS

if TYPE_CHECKING:
    from sessionlog_server.storage.recorder import EventRecorder

SUPPORTED_DRIVERS = frozenset({"sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg"})
"""The URL schemes the service runs on: SQLite (the embedded default) and PostgreSQL (psycopg 3)."""


def check_url(url: str) -> None:
    """Refuse a database URL of any other scheme (ValueError), before a driver is loaded for it."""
    drivername = make_url(url).drivername
    if drivername not in SUPPORTED_DRIVERS:
        raise ValueError(
            f"unsupported database URL scheme {drivername!r}: use sqlite:///PATH or postgresql://USER@HOST/DB"
        )


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names, or None: another database, in-memory SQLite, or a `file:`
    URI (whose path is the driver's to parse)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def shown_url(url: str) -> str:
    """A database URL as logs and errors show it: as the operator wrote it, the password masked."""
    return make_url(url).render_as_string(hide_password=True)


CONNECT_TIMEOUT_S = 10
"""How long a PostgreSQL connection attempt may take (libpq's `connect_timeout`) unless the URL
sets its own. libpq's default is forever: a database host that accepts the TCP connection and
answers nothing (hung, or behind a link that drops everything) held `serve` at start-up with no
log line, and a running service's reader and writer threads on each new connection."""


TCP_DEFAULTS = {
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}
"""libpq's TCP settings for a PostgreSQL connection whose URL sets none of them: a host that
vanishes (a failover that moved its address, a cut link) is given up after about a minute of
silence, where the kernel's defaults took two hours for an idle connection (keepalive probes
first sent after 7,200 s) and about 15 minutes for one waiting on a sent commit
(retransmissions). Keepalives cover the idle pool and the change feed's LISTEN connection;
`tcp_user_timeout` (milliseconds) covers a statement or commit sent and never acknowledged. A
database that is slow but alive (a long checkpoint, a paused process) is not given up: its
host's kernel still answers both."""


def normalise_url(url: str) -> str:
    """Accept `postgresql://` and `postgres://` and use the psycopg 3 driver for them, with a
    `connect_timeout` of CONNECT_TIMEOUT_S where the URL has none, and TCP_DEFAULTS where it sets
    none of them (every connection the service, its migrations and its change feed open is made
    from this URL)."""
    parsed = make_url(url)
    if parsed.get_backend_name() not in {"postgresql", "postgres"}:
        return url
    if "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(CONNECT_TIMEOUT_S)})
    if not TCP_DEFAULTS.keys() & parsed.query.keys() and "keepalives" not in parsed.query:
        parsed = parsed.update_query_dict(TCP_DEFAULTS)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def open_recorder(
    url: str, *, sqlite_synchronous: str = "FULL", sqlite_busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> EventRecorder:
    """The recorder for `url`; the schema must already be migrated (see migrate.upgrade). The
    `sqlite_` settings apply to a SQLite file only. Each recorder is imported here, where it is
    opened: the URL helpers above serve `serve`'s parent, which opens none (storage/schema.py)."""
    check_url(url)
    url = normalise_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        from sessionlog_server.storage.sqlite import SQLiteEventRecorder

        return SQLiteEventRecorder(url, synchronous=sqlite_synchronous, busy_timeout_ms=sqlite_busy_timeout_ms)
    from sessionlog_server.storage.postgres import PostgresEventRecorder

    return PostgresEventRecorder(url)
