"""The PostgreSQL backend (production): psycopg 3, pooled connections.

Several service instances may share one database; correctness does not depend on any
in-process lock, because every append fences itself in its own transaction (see recorder).
Event data is TEXT (the exact JSON accepted); a NUL in a string is escaped in JSON text, so
nothing has to leave the column for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import create_engine

from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError
from sessionlog_server.storage.changes import CHANNEL, ChangeFeed, PostgresChangeFeed, notify_payload
from sessionlog_server.storage.driver import DriverSQL, DriverTransaction
from sessionlog_server.storage.recorder import EVENT_COLUMNS, EventRecorder, advance_params, contiguous, event_params
from sessionlog_server.storage.records import PendingBatch

# One statement for a group commit: `fence` holds each session's compare-and-set (the
# parameters of `advance_sql`, then its change notice), `batch` every event of the group.
# Only the sessions the UPDATE moved get their events and a notice; the statement returns them.
_FENCE_TYPES = ("bigint", "bigint", "boolean", "bigint", "text", "text", "bigint", "bigint", "text")
_FENCE_COLUMNS = "next_seq, last_time, open_turn, lease_expires_at, id, writer_id, epoch, expected, payload"
# The events' columns in EVENT_COLUMNS order; the two jsonb columns arrive as JSON text.
_EVENT_TYPES = (
    "text", "bigint", "bigint", "text", "bytea", "text", "boolean", "text", "bigint", "bigint", "text", "text"
)  # fmt: skip
MAX_PARAMETERS = 65535
"""Most parameters one statement may carry (the wire protocol counts them in 16 bits)."""


def group_commit_sql(sessions: int, events: int) -> str:
    """The group statement for `sessions` fences and `events` events."""

    def values(types: tuple[str, ...], count: int) -> str:
        row = "(" + ", ".join(f"%s::{kind}" for kind in types) + ")"
        return ", ".join(row for _ in range(count))

    return (
        f"WITH fence ({_FENCE_COLUMNS}) AS (VALUES {values(_FENCE_TYPES, sessions)}), "
        "moved AS (UPDATE sessions AS s SET next_seq = f.next_seq, last_time = f.last_time, "
        "open_turn = f.open_turn, lease_expires_at = f.lease_expires_at FROM fence AS f "
        "WHERE s.id = f.id AND s.writer_id = f.writer_id AND s.epoch = f.epoch AND s.next_seq = f.expected "
        "RETURNING s.id), "
        f"batch ({EVENT_COLUMNS}) AS (VALUES {values(_EVENT_TYPES, events)}), "
        f"written AS (INSERT INTO events ({EVENT_COLUMNS}) "
        "SELECT b.session_id, b.seq, b.time, b.type, convert_from(b.data, 'UTF8'), b.event_id, b.ignorable, "
        "b.surface_op, b.replace_start_seq, b.replace_end_seq, b.source_event_seqs::jsonb, b.blob_refs::jsonb "
        "FROM batch AS b JOIN moved AS m ON m.id = b.session_id RETURNING 1) "
        f"SELECT m.id, pg_notify('{CHANNEL}', f.payload) FROM moved AS m JOIN fence AS f ON f.id = m.id"
    )


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

    def _fence_and_insert(
        self,
        conn: DriverTransaction,
        batches: Sequence[PendingBatch],
        runs: Sequence[Sequence[int]],
        results: list[SessionLogError | None],
    ) -> list[PendingBatch]:
        """The whole group in one statement (`group_commit_sql`): every session's fence, the
        events of the sessions whose fence holds, and their change notices.

        The base class's way (pipelined fences, an executemany, a notify) costs psycopg three
        round trips and about twice the CPU of the database's own work; measured here, one
        statement costs what a bare INSERT and COMMIT do. The sessions it returns were fenced
        and written; a run it did not return (its fence missed, or its batches do not follow
        each other) wrote nothing, and is fenced batch by batch as in the base class.
        """
        whole = [run for run in runs if contiguous([batches[i] for i in run])]
        events = sum(len(batches[i].events) for run in whole for i in run)
        if len(whole) * len(_FENCE_TYPES) + events * len(_EVENT_TYPES) > MAX_PARAMETERS:
            return super()._fence_and_insert(conn, batches, runs, results)
        fences = [
            (
                *advance_params(batches[run[0]], batches[run[-1]]),
                notify_payload(self.instance, batches[run[0]].session_id),
            )
            for run in whole
        ]
        rows = [
            event_params(batches[i].session_id, event, stored)
            for run in whole
            for i in run
            for event, stored in zip(batches[i].events, batches[i].stored, strict=True)
        ]
        written: set[str] = set()
        if whole:
            statement = group_commit_sql(len(fences), len(rows))
            flat = [value for params in (*fences, *rows) for value in params]
            written = {session_id for session_id, _ in conn.exec_driver_sql(statement, tuple(flat))}
        accepted: list[PendingBatch] = []
        missed: list[PendingBatch] = []
        for run in runs:
            if batches[run[0]].session_id in written:
                accepted.extend(batches[i] for i in run)
            else:
                missed.extend(self._fence_one_by_one(conn, batches, run, results))
        self._insert_and_announce(conn, missed)
        return accepted + missed

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
