"""A group commit's statements: fence each session's run of batches, insert the events of
those whose fence holds, their blobs and snapshots, and announce them to other processes.

The recorder (storage/recorder.py) opens the transaction on the writer thread's own driver
connection (storage/driver.py) and hands it here; what differs by database is the SQL
(`GroupCommit`'s fields, the recorder's class attributes) and on PostgreSQL the whole group as
one statement (`storage/postgres_group.py`, a subclass). This module is compiled
(setup.py): it runs once for every commit, and an event sent alone is a commit of its own, so
its ~25 interpreted calls were a good part of a slow writer's event. No SQLAlchemy here; the
driver runs the statements.

Fencing follows Temporal's history service: the append transaction advances
`sessions.next_seq` with a compare-and-set on `(writer_id, epoch, next_seq)`. If another
writer took the lease (epoch moved) or the log moved, the update matches no row and nothing
of the batch is written.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from sessionlog.core.errors import ExpectedSeqMismatch, NotFound, OwnershipLost, SessionLogError
from sessionlog_server.storage.driver import DriverSQL, DriverTransaction
from sessionlog_server.storage.records import EventIdsStored, PendingBatch
from sessionlog_server.storage.rows import advance_params, event_params


class GroupCommit:
    """The statements of a group commit on one database.

    `advance_sql` is the fenced compare-and-set (parameters: `rows.advance_params`);
    `advance_keeping_turn_sql` the same fence for a row that already holds the new
    `open_turn`, which it leaves out of its SET (None: `advance_sql` alone; see `fence`);
    `insert_events_sql` the event insert (an executemany, `rows.EVENT_COLUMNS` order);
    `placeholder` the driver's parameter marker.
    """

    def __init__(
        self, advance_sql: str, insert_events_sql: str, placeholder: str, advance_keeping_turn_sql: str | None
    ) -> None:
        self.advance_sql = advance_sql
        self.insert_events_sql = insert_events_sql
        self.placeholder = placeholder
        self.advance_keeping_turn_sql = advance_keeping_turn_sql

    def commit(
        self, conn: DriverTransaction, batches: Sequence[PendingBatch], look_up_ids: bool
    ) -> list[SessionLogError | None]:
        """Fence every session once, insert the events of those whose fence holds
        (`fence_and_insert`), then their blobs and snapshots; with `look_up_ids`, a run whose
        unvouched eventIds are stored goes in not at all. Each batch's error, or None.

        A session's batches in one group are contiguous (its writer planned them in order under
        its lock), so one compare-and-set from the first batch's expected seq to the last
        batch's new one fences them all. A run whose fence misses is fenced batch by batch,
        which also explains the failure of each.
        """
        results: list[SessionLogError | None] = [None] * len(batches)
        runs: list[list[int]] = []
        for indexes in session_runs(batches):
            stored = self.stored_ids(conn, [batches[i] for i in indexes]) if look_up_ids else {}
            if stored:  # planned on the belief that these ids were new: none of the run may go in
                for index in indexes:
                    results[index] = EventIdsStored(batches[index].session_id, stored)
            else:
                runs.append(indexes)
        accepted = self.fence_and_insert(conn, batches, runs, results)
        blobs: dict[str, bytes] = {}
        snapshots: list[tuple[str, int, int, bytes]] = []
        for batch in accepted:
            if batch.blobs:
                blobs.update(batch.blobs)
            snapshot = batch.snapshot
            if snapshot is not None:
                snapshots.append((snapshot.session_id, snapshot.seq, snapshot.fold_version, snapshot.state))
        if blobs:
            self.insert_blobs(conn, blobs)
        if snapshots:
            mark = self.placeholder
            conn.exec_driver_sql(
                "INSERT INTO fold_snapshots (session_id, seq, fold_version, state) "
                f"VALUES ({mark}, {mark}, {mark}, {mark})",
                snapshots,
            )
        return results

    def fence_and_insert(
        self,
        conn: DriverTransaction,
        batches: Sequence[PendingBatch],
        runs: Sequence[Sequence[int]],
        results: list[SessionLogError | None],
    ) -> list[PendingBatch]:
        """Fence each session's run of batches, insert the events of those that hold, and
        announce them; the batches accepted. A run's error goes to `results`.

        All fences go out together (one round trip on a driver that pipelines), then one
        executemany of every accepted event, then the change notice.
        """
        fenced = self.fence(
            conn,
            [(batches[run[0]], batches[run[-1]]) if contiguous([batches[i] for i in run]) else None for run in runs],
        )
        accepted: list[PendingBatch] = []
        for run, moved in zip(runs, fenced, strict=True):
            if moved == 1:
                accepted.extend([batches[i] for i in run])
            else:
                accepted.extend(self.fence_one_by_one(conn, batches, run, results))
        self.insert_and_announce(conn, accepted)
        return accepted

    def fence_one_by_one(
        self,
        conn: DriverTransaction,
        batches: Sequence[PendingBatch],
        run: Sequence[int],
        results: list[SessionLogError | None],
    ) -> list[PendingBatch]:
        """A run whose fence as a whole missed, fenced batch by batch: those that hold, and
        each of the others' error (in `results`)."""
        accepted: list[PendingBatch] = []
        for index in run:
            batch = batches[index]
            if self.fence(conn, [(batch, batch)]) == [1]:
                accepted.append(batch)
            else:
                results[index] = self.fencing_error(
                    conn, batch.session_id, batch.writer_id, batch.epoch, batch.expected_next_seq
                )
        return accepted

    def insert_and_announce(self, conn: DriverSQL, accepted: Sequence[PendingBatch]) -> None:
        """One executemany of the accepted batches' events, then the change notice."""
        rows = event_rows(accepted)
        if rows:
            conn.exec_driver_sql(self.insert_events_sql, rows)
            self.announce(conn, sorted({batch.session_id for batch in accepted}))

    def announce(self, conn: DriverSQL, session_ids: list[str]) -> None:
        """Tell other processes, inside the commit, which sessions it appends to (see
        storage/changes.py): nothing here, where they watch the database file itself (SQLite's
        `PRAGMA data_version`)."""

    def insert_blobs(self, conn: DriverSQL, blobs: dict[str, bytes]) -> None:
        """Insert blobs, skipping those already stored (content-addressed, so equal)."""
        mark = self.placeholder
        conn.exec_driver_sql(
            f"INSERT INTO blobs (sha256, size, content) VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (sha256) DO NOTHING",
            [(digest, len(content), content) for digest, content in blobs.items()],
        )

    def stored_ids(self, conn: DriverSQL, run: Sequence[PendingBatch]) -> dict[str, int]:
        """Which of the run's unvouched eventIds the session stores already (the unique index, one
        query per session, on the writer thread inside a commit after a refusal)."""
        return self.find_event_ids(conn, run[0].session_id, [eid for batch in run for eid in batch.verify_ids])

    def find_event_ids(self, conn: DriverSQL, session_id: str, event_ids: Sequence[str]) -> dict[str, int]:
        """Which of `event_ids` the session itself stores, with their seqs (the unique index;
        driver SQL, as it runs inside group commits)."""
        if not event_ids:
            return {}
        mark = self.placeholder
        sql = (
            f"SELECT event_id, seq FROM events WHERE session_id = {mark} "
            f"AND event_id IN ({', '.join([mark for _ in event_ids])})"
        )
        found: dict[str, int] = {}
        for row in conn.exec_driver_sql(sql, (session_id, *event_ids)):
            found[row[0]] = row[1]
        return found

    def fence(self, conn: DriverTransaction, runs: Sequence[tuple[PendingBatch, PendingBatch] | None]) -> list[int]:
        """The fence of each run, from its first batch to its last (None: skipped, 0), and how
        many rows each moved.

        Where `advance_keeping_turn_sql` is set (SQLite), a run that neither opens nor closes a
        turn (most of them) moves the row without `open_turn` in the SET: SQLite rewrites the
        index entry of every column a SET names, changed or not, and `ix_sessions_open_turn` was
        one more page in the WAL of every commit. That statement compares the row's `open_turn`
        with the run's instead; a row it misses (one that disagrees with its log, as a restore
        could leave it, or whose fence does not hold) is tried with `advance_sql`, whose answer
        stands: so a row's `open_turn` never stays behind its log's.
        """
        keeping_turn = self.advance_keeping_turn_sql
        if keeping_turn is None:
            return conn.rowcounts(
                self.advance_sql, [None if run is None else advance_params(run[0], run[1]) for run in runs]
            )
        moved: list[int] = []
        for run in runs:  # one statement at a time: SQLite has no pipeline to fill
            if run is None:
                moved.append(0)
                continue
            first, last = run
            params = advance_params(first, last)
            hit = 0
            if first.open_turn_before == last.open_turn:
                hit = conn.exec_driver_sql(keeping_turn, params).rowcount
            moved.append(hit or conn.exec_driver_sql(self.advance_sql, params).rowcount)
        return moved

    def fencing_error(
        self, conn: DriverSQL, session_id: str, writer_id: str, epoch: int, expected: int | None
    ) -> SessionLogError:
        """Explain why a fenced update matched no row."""
        found = list(
            conn.exec_driver_sql(
                f"SELECT writer_id, epoch, next_seq FROM sessions WHERE id = {self.placeholder}", (session_id,)
            )
        )
        if not found:
            return NotFound("SESSION_NOT_FOUND", f"session {session_id!r} not found", session_id=session_id)
        holder, current_epoch, next_seq = found[0][0], found[0][1], found[0][2]
        if holder != writer_id or current_epoch != epoch:
            now_held = f"writer {holder!r}" if holder is not None else "the lease released"
            return OwnershipLost(
                "OWNERSHIP_LOST",
                f"writer {writer_id!r} (epoch {epoch}) no longer holds session {session_id!r}: "
                f"now epoch {current_epoch}, {now_held}; reopen the writer",
                session_id=session_id,
                epoch=current_epoch,
                holder=holder,
            )
        return ExpectedSeqMismatch(
            "EXPECTED_SEQ_MISMATCH",
            f"session {session_id!r} is at seq {next_seq}, the batch expected {expected}",
            session_id=session_id,
            next_seq=next_seq,
            expected=expected,
        )


def event_rows(batches: Sequence[PendingBatch]) -> list[tuple[Any, ...]]:
    """The insert's parameters of every event of `batches`, in order (`rows.event_params`)."""
    return [
        event_params(batch.session_id, event, stored)
        for batch in batches
        for event, stored in zip(batch.events, batch.stored, strict=True)
    ]


def session_runs(batches: Sequence[PendingBatch]) -> list[list[int]]:
    """The indexes of each session's batches in a group, sessions in order of first batch."""
    by_session: dict[str, list[int]] = {}
    for index, batch in enumerate(batches):
        run = by_session.get(batch.session_id)
        if run is None:
            by_session[batch.session_id] = [index]
        else:
            run.append(index)
    return list(by_session.values())


def contiguous(run: Sequence[PendingBatch]) -> bool:
    """Whether one writer's batches follow each other seq for seq."""
    for a, b in itertools.pairwise(run):
        if b.writer_id != a.writer_id or b.epoch != a.epoch or b.expected_next_seq != a.new_next_seq:
            return False
    return True


__all__ = ["GroupCommit", "contiguous", "event_rows", "session_runs"]
