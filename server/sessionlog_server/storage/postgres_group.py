"""PostgreSQL's group commit: the whole group as one statement (`group_statement`), which
fences every session, inserts the events of those whose fence holds and sends their change
notices, in one round trip.

The base class's way (storage/group_commit.py: pipelined fences, an executemany, a notify)
costs psycopg three round trips and about twice the CPU of the database's own work; measured
here, one statement costs what a bare INSERT and COMMIT do. Compiled, as group_commit.py is:
it runs for every commit. The recorder (storage/postgres.py) sends a group that is this
statement and nothing else as a transaction of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sessionlog.core.errors import SessionLogError
from sessionlog_server.storage.changes import CHANNEL, notify_payload
from sessionlog_server.storage.driver import DriverSQL, DriverTransaction
from sessionlog_server.storage.group_commit import GroupCommit, contiguous, event_rows, session_runs
from sessionlog_server.storage.records import PendingBatch
from sessionlog_server.storage.rows import EVENT_COLUMNS, advance_params

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
        shape = (len(fences), len(rows))
        statement = _SMALL_STATEMENTS.get(shape)
        if statement is None:
            statement = _group_sql(_values(_FENCE_TYPES, shape[0]), _values(_EVENT_TYPES, shape[1]))
            _SMALL_STATEMENTS[shape] = statement
        return statement, flat
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


_SMALL_STATEMENTS: dict[tuple[int, int], str] = {}
"""The rows form's text by its (fences, events) shape, built once: a few dozen shapes at most
fit SMALL_GROUP_PARAMETERS."""
_ARRAYS_SQL = _group_sql(_unnest(_FENCE_TYPES), _unnest(_EVENT_TYPES))


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """`rows` column by column (`width` empty columns when there are no rows)."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


class PostgresGroupCommit(GroupCommit):
    """`GroupCommit` with the group as one statement, and change notices by `pg_notify`
    carrying this recorder's `instance` (so its own feed skips them)."""

    def __init__(self, advance_sql: str, insert_events_sql: str, instance: str) -> None:
        super().__init__(advance_sql, insert_events_sql, "%s", None)
        self.instance = instance

    def statement_alone(self, batches: Sequence[PendingBatch]) -> tuple[list[list[int]], str, tuple[Any, ...]] | None:
        """The group as its one statement, when that statement is all of it (no blob, no
        snapshot, each session's batches following each other): its runs by session, the
        statement and its parameters. None for any other group."""
        for batch in batches:
            if batch.blobs or batch.snapshot is not None:
                return None
        runs = session_runs(batches)
        for run in runs:
            if not contiguous([batches[i] for i in run]):
                return None
        statement, params = group_statement(*self.group_rows(batches, runs))
        return runs, statement, params

    def group_rows(
        self, batches: Sequence[PendingBatch], runs: Sequence[Sequence[int]]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The group statement's fence rows (one per run, with its change notice) and event rows."""
        fences: list[tuple[Any, ...]] = []
        for run in runs:
            first = batches[run[0]]
            fences.append((*advance_params(first, batches[run[-1]]), notify_payload(self.instance, first.session_id)))
        return fences, event_rows([batches[i] for run in runs for i in run])

    def fence_and_insert(
        self,
        conn: DriverTransaction,
        batches: Sequence[PendingBatch],
        runs: Sequence[Sequence[int]],
        results: list[SessionLogError | None],
    ) -> list[PendingBatch]:
        """The whole group in one statement (`group_statement`): every session's fence, the
        events of the sessions whose fence holds, and their change notices.

        The sessions it returns were fenced and written; a run it did not return (its fence
        missed, or its batches do not follow each other) wrote nothing, and is fenced batch by
        batch as in the base class. A group of any size is one statement: a large one sends
        each column as one array.
        """
        whole = [run for run in runs if contiguous([batches[i] for i in run])]
        written: set[str] = set()
        if whole:
            statement, params = group_statement(*self.group_rows(batches, whole))
            written = written_sessions(conn.exec_driver_sql(statement, params))
        accepted: list[PendingBatch] = []
        missed: list[PendingBatch] = []
        for run in runs:
            if batches[run[0]].session_id in written:
                accepted.extend([batches[i] for i in run])
            else:
                missed.extend(self.fence_one_by_one(conn, batches, run, results))
        self.insert_and_announce(conn, missed)
        return accepted + missed

    def announce(self, conn: DriverSQL, session_ids: list[str]) -> None:
        conn.exec_driver_sql(
            "SELECT pg_notify(%s, %s)", [(CHANNEL, notify_payload(self.instance, sid)) for sid in session_ids]
        )


def written_sessions(rows: Iterable[Any]) -> set[str]:
    """The sessions the group statement returned: those it fenced and wrote."""
    return {row[0] for row in rows}


__all__ = ["SMALL_GROUP_PARAMETERS", "PostgresGroupCommit", "group_statement", "written_sessions"]
