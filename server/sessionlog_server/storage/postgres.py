"""The PostgreSQL backend (production): psycopg 3, pooled connections.

Several service instances may share one database; correctness does not depend on any
in-process lock, because every append fences itself in its own transaction (see recorder).
Event data is TEXT (the exact JSON accepted); a NUL in a string is escaped in JSON text, so
nothing has to leave the column for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog_server.storage.changes import CHANNEL, ChangeFeed, PostgresChangeFeed, notify_payload
from sessionlog_server.storage.driver import DriverSQL, DriverTransaction, StatementLost
from sessionlog_server.storage.recorder import EventRecorder, contiguous, session_runs
from sessionlog_server.storage.records import PendingBatch
from sessionlog_server.storage.rows import EVENT_COLUMNS, advance_params, event_params

# One statement for a group commit: `fence` holds each session's compare-and-set (the
# parameters of `advance_sql`, then its change notice), `batch` every event of the group. Only
# the sessions the UPDATE moved get their events and a notice; the statement returns them.
_FENCE_TYPES = ("bigint", "bigint", "boolean", "bigint", "text", "text", "bigint", "bigint", "text")
_FENCE_COLUMNS = "next_seq, last_time, open_turn, lease_expires_at, id, writer_id, epoch, expected, payload"
# The events' columns in EVENT_COLUMNS order; the two jsonb columns arrive as JSON text.
_EVENT_TYPES = (
    "text", "bigint", "bigint", "text", "bytea", "text", "boolean", "text", "bigint", "bigint", "text", "text"
)  # fmt: skip
SMALL_GROUP_PARAMETERS = 50
"""Up to this many parameters a group is sent as rows of parameters (`VALUES`), beyond it as one
array per column (`unnest`). psycopg keeps the parsed form of a statement of at most 50
parameters, so a small group's statement (one or two sessions' one-event batches, the shape of
a trickle) is parsed once; the array form costs ~80 µs more there to adapt its 21 lists
(0.26 against 0.18 ms of CPU per group). Beyond it, the rows form is parsed again on every
commit and is a new statement to PostgreSQL each time (16 sessions' single events: 0.84-0.90
ms of CPU per group; 500: 21-65 ms), while the array form has one text whatever the group's
size, parsed once and prepared by psycopg after a few runs (0.43-0.46 ms; 6 ms)."""


def group_statement(fences: Sequence[tuple[Any, ...]], rows: Sequence[tuple[Any, ...]]) -> tuple[str, tuple[Any, ...]]:
    """The group statement and its parameters for these fence rows and event rows."""
    if len(fences) * len(_FENCE_TYPES) + len(rows) * len(_EVENT_TYPES) <= SMALL_GROUP_PARAMETERS:
        flat = tuple(value for params in (*fences, *rows) for value in params)
        return _group_sql(_values(_FENCE_TYPES, len(fences)), _values(_EVENT_TYPES, len(rows))), flat
    return _ARRAYS_SQL, (*_columns(fences, len(_FENCE_TYPES)), *_columns(rows, len(_EVENT_TYPES)))


def _group_sql(fence_rows: str, event_rows: str) -> str:
    return (
        f"WITH fence ({_FENCE_COLUMNS}) AS ({fence_rows}), "
        "moved AS (UPDATE sessions AS s SET next_seq = f.next_seq, last_time = f.last_time, "
        "open_turn = f.open_turn, lease_expires_at = f.lease_expires_at FROM fence AS f "
        "WHERE s.id = f.id AND s.writer_id = f.writer_id AND s.epoch = f.epoch AND s.next_seq = f.expected "
        "RETURNING s.id), "
        f"batch ({EVENT_COLUMNS}) AS ({event_rows}), "
        f"written AS (INSERT INTO events ({EVENT_COLUMNS}) "
        "SELECT b.session_id, b.seq, b.time, b.type, convert_from(b.data, 'UTF8'), b.event_id, b.ignorable, "
        "b.surface_op, b.replace_start_seq, b.replace_end_seq, b.source_event_seqs::jsonb, b.blob_refs::jsonb "
        "FROM batch AS b JOIN moved AS m ON m.id = b.session_id RETURNING 1) "
        f"SELECT m.id, pg_notify('{CHANNEL}', f.payload) FROM moved AS m JOIN fence AS f ON f.id = m.id"
    )


def _values(types: tuple[str, ...], count: int) -> str:
    """`count` rows of parameters."""
    row = "(" + ", ".join(f"%s::{kind}" for kind in types) + ")"
    return "VALUES " + ", ".join(row for _ in range(count))


def _unnest(types: tuple[str, ...]) -> str:
    """One array parameter per column, zipped back into rows. The data goes in binary (`%b`):
    its raw UTF-8 bytes, where the text form would hex-encode them."""
    arrays = ", ".join(f"{'%b' if kind == 'bytea' else '%s'}::{kind}[]" for kind in types)
    return f"SELECT * FROM unnest({arrays})"


_ARRAYS_SQL = _group_sql(_unnest(_FENCE_TYPES), _unnest(_EVENT_TYPES))


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """`rows` column by column (`width` empty columns when there are no rows)."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


class PostgresEventRecorder(EventRecorder):
    """EventRecorder on PostgreSQL."""

    advance_sql = (
        "UPDATE sessions SET next_seq = %s, last_time = %s, open_turn = %s, lease_expires_at = %s "
        "WHERE id = %s AND writer_id = %s AND epoch = %s AND next_seq = %s"
    )
    placeholder = "%s"
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

    def commit_batches(self, batches: Sequence[PendingBatch]) -> list[SessionLogError | None]:
        """A group that is its group statement and nothing else commits as that statement alone,
        in one round trip (`CommitConnection.run_alone`): no blob, no snapshot, and each
        session's batches following each other (a stored eventId is refused by the unique
        index, as in the base class). Any other group and the sessions whose fence missed (the
        statement wrote nothing of theirs) take the base class's way: one transaction, which
        names each batch's error; so does a group the database refused as a whole
        (`after_refusal`).
        """
        runs = session_runs(batches)
        alone = all(not b.blobs and b.snapshot is None for b in batches) and all(
            contiguous([batches[i] for i in run]) for run in runs
        )
        if not alone:
            return super().commit_batches(batches)
        try:
            written = self._commits.run_alone(*group_statement(*self._group_rows(batches, runs)))
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
            moved = {session_id for session_id, _ in written}
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

    def _group_rows(
        self, batches: Sequence[PendingBatch], runs: Sequence[Sequence[int]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The group statement's fence rows (one per run, with its change notice) and event rows."""
        fences = [
            (
                *advance_params(batches[run[0]], batches[run[-1]]),
                notify_payload(self.instance, batches[run[0]].session_id),
            )
            for run in runs
        ]
        rows = [
            event_params(batches[i].session_id, event, stored)
            for run in runs
            for i in run
            for event, stored in zip(batches[i].events, batches[i].stored, strict=True)
        ]
        return fences, rows

    def _fence_and_insert(
        self,
        conn: DriverTransaction,
        batches: Sequence[PendingBatch],
        runs: Sequence[Sequence[int]],
        results: list[SessionLogError | None],
    ) -> list[PendingBatch]:
        """The whole group in one statement (`group_statement`): every session's fence, the
        events of the sessions whose fence holds, and their change notices.

        The base class's way (pipelined fences, an executemany, a notify) costs psycopg three
        round trips and about twice the CPU of the database's own work; measured here, one
        statement costs what a bare INSERT and COMMIT do. The sessions it returns were fenced
        and written; a run it did not return (its fence missed, or its batches do not follow
        each other) wrote nothing, and is fenced batch by batch as in the base class. A group
        of any size is one statement: a large one sends each column as one array.
        """
        whole = [run for run in runs if contiguous([batches[i] for i in run])]
        written: set[str] = set()
        if whole:
            statement, params = group_statement(*self._group_rows(batches, whole))
            written = {session_id for session_id, _ in conn.exec_driver_sql(statement, params)}
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
