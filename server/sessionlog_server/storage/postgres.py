"""The PostgreSQL backend (production): psycopg 3, pooled connections.

Several service instances may share one database; correctness does not depend on any
in-process lock, because every append fences itself in its own transaction (see recorder).
Event data is TEXT (the exact JSON accepted); a NUL in a string is escaped in JSON text, so
nothing has to leave the column for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog_server.storage.changes import ChangeFeed
from sessionlog_server.storage.driver import StatementLost
from sessionlog_server.storage.postgres_changes import PostgresChangeFeed
from sessionlog_server.storage.postgres_group import PostgresGroupCommit, written_sessions
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import PendingBatch
from sessionlog_server.storage.rows import EVENT_COLUMNS


class PostgresEventRecorder(EventRecorder):
    """EventRecorder on PostgreSQL."""

    _group: PostgresGroupCommit

    advance_sql = (
        "UPDATE sessions SET next_seq = %s, last_time = %s, open_turn = %s, lease_expires_at = %s "
        "WHERE id = %s AND writer_id = %s AND epoch = %s AND next_seq = %s"
    )
    placeholder = "%s"
    driver_autocommit = True
    # data arrives as UTF-8 bytes (storage/records.py StoredData): convert_from makes it TEXT.
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

    def _lock_namespace(self, conn: Connection, namespace: str) -> None:
        """A transaction-scoped advisory lock on the namespace: instances sharing the database
        count its sessions one transaction at a time (READ COMMITTED would let two counts pass)."""
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:namespace, 0))"), {"namespace": namespace})

    def group_commit(self) -> PostgresGroupCommit:
        return PostgresGroupCommit(self.advance_sql, self.insert_events_sql, self.instance)

    def commit_batches(self, batches: Sequence[PendingBatch]) -> list[SessionLogError | None]:
        """A group that is its group statement and nothing else commits as that statement alone,
        in one round trip (`CommitConnection.run_alone`): no blob, no snapshot, and each
        session's batches following each other (a stored eventId is refused by the unique
        index, as in the base class). Any other group and the sessions whose fence missed (the
        statement wrote nothing of theirs) take the base class's way: one transaction, which
        names each batch's error; so does a group the database refused as a whole
        (`after_refusal`).
        """
        alone = self._group.statement_alone(batches)
        if alone is None:
            return super().commit_batches(batches)
        runs, statement, params = alone
        try:
            written = self._commits.run_alone(statement, params)
        except StatementLost as lost:
            found = self._moved_after_loss(batches, runs)
            if found is None:
                raise Unavailable(
                    "COMMIT_OUTCOME_UNKNOWN", f"the connection broke during the commit: {lost}; retry with event ids"
                ) from lost
            moved = found
        except SessionLogError as refusal:  # refused as a whole: nothing of it was written
            return self.after_refusal(refusal, batches)
        else:
            if written is None:
                return super().commit_batches(batches)
            moved = written_sessions(written)
        results: list[SessionLogError | None] = [None] * len(batches)
        missed = [i for i, batch in enumerate(batches) if batch.session_id not in moved]
        if missed:
            outcomes = super().commit_batches([batches[i] for i in missed])
            for index, outcome in zip(missed, outcomes, strict=True):
                results[index] = outcome
        return results

    def _moved_after_loss(self, batches: Sequence[PendingBatch], runs: Sequence[Sequence[int]]) -> set[str] | None:
        """Which sessions the group statement moved, read back after its connection broke while
        it was out, or None if that cannot be told.

        The fence is a compare-and-set on (writer, epoch, next_seq), and only this writer thread
        moves a session it holds: a session still held by the run's writer and epoch is at the
        run's new next_seq if the statement committed, at its expected one if it did not. A
        session held by anyone else now may have been taken over before or after: unknown. So is
        everything while the database cannot be read (it is restarting).
        """
        expected = {batches[run[0]].session_id: (batches[run[0]], batches[run[-1]].new_next_seq) for run in runs}
        try:
            with self.read_engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    "SELECT id, writer_id, epoch, next_seq FROM sessions WHERE id = ANY(%s)", (list(expected),)
                ).all()
        except SQLAlchemyError:  # the database is away (restarting): the outcome stays unknown
            return None
        moved: set[str] = set()
        for session_id, writer_id, epoch, next_seq in rows:
            first, after = expected[session_id]
            if (writer_id, epoch) != (first.writer_id, first.epoch) or next_seq not in (first.expected_next_seq, after):
                return None
            if next_seq == after:
                moved.add(session_id)
        return moved if len(rows) == len(expected) else None

    def shares_database(self, workers: int) -> bool:
        """Always: PostgreSQL is how several instances share sessions."""
        return True

    def change_feed(self) -> ChangeFeed:
        url = self.write_engine.url.set(drivername="postgresql")
        return PostgresChangeFeed(url.render_as_string(hide_password=False), self.instance)
