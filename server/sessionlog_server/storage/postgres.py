"""The PostgreSQL backend (production): psycopg 3, pooled connections.

Several service instances may share one database; correctness does not depend on any
in-process lock, because every append fences itself in its own transaction (see recorder).
Event data is TEXT (the exact JSON accepted); a NUL in a string is escaped in JSON text, so
nothing has to leave the column for it.
"""

from __future__ import annotations

from sqlalchemy import create_engine

from sessionlog.core import jsonvalue
from sessionlog_server.storage.changes import CHANNEL, ChangeFeed, PostgresChangeFeed, notify_payload
from sessionlog_server.storage.driver import DriverSQL
from sessionlog_server.storage.recorder import EVENT_COLUMNS, EventRecorder


class PostgresEventRecorder(EventRecorder):
    """EventRecorder on PostgreSQL."""

    advance_sql = (
        "UPDATE sessions SET next_seq = %s, last_time = %s, open_turn = %s, lease_expires_at = %s "
        "WHERE id = %s AND writer_id = %s AND epoch = %s AND next_seq = %s"
    )
    placeholder = "%s"
    # data arrives as UTF-8 bytes (storage/recorder.py StoredData): convert_from makes it TEXT.
    insert_events_sql = (
        f"INSERT INTO events ({EVENT_COLUMNS}) "
        "VALUES (%s, %s, %s, %s, convert_from(%s, 'UTF8'), %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)"
    )

    def __init__(self, url: str, *, pool_size: int = 8) -> None:
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=True,
            json_serializer=jsonvalue.dumps,
            json_deserializer=jsonvalue.loads,
        )
        super().__init__(engine)

    def _announce(self, conn: DriverSQL, session_ids: list[str]) -> None:
        conn.exec_driver_sql(
            "SELECT pg_notify(%s, %s)", [(CHANNEL, notify_payload(self.instance, sid)) for sid in session_ids]
        )

    def shares_database(self, workers: int) -> bool:
        """Always: PostgreSQL is how several instances share sessions."""
        return True

    def change_feed(self) -> ChangeFeed:
        url = self.write_engine.url.set(drivername="postgresql")
        return PostgresChangeFeed(url.render_as_string(hide_password=False), self.instance)
