"""The event recorder: what sessionlog stores and the one place that talks SQL.

`EventRecorder` holds the rules that are the same on every database; `SQLiteEventRecorder`
and `PostgresEventRecorder` (in their own modules) hold only what differs: engine set-up,
transaction start, and the upsert used for blobs. Public methods open a transaction; `_`
twins take a connection, so several steps (lease, events, blobs) join one commit. How a record
becomes a row's parameters and a row a record is storage/rows.py; the statements of a group
commit (the fenced compare-and-set that follows Temporal's history service, the event insert,
the change notice) are storage/group_commit.py, compiled.
"""

from __future__ import annotations

import functools
import hmac
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from typing import ClassVar

from sqlalchemy import Connection, Engine, and_, func, or_, select, update
from sqlalchemy import exc as sa_exc

from sessionlog.core.errors import (
    AlreadyExists,
    LimitExceeded,
    NotFound,
    OwnershipLost,
    SessionLogError,
    Unavailable,
    WriterHeld,
)
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog_server.storage import blobs as blob_store
from sessionlog_server.storage import queries
from sessionlog_server.storage.changes import ChangeFeed
from sessionlog_server.storage.driver import CommitConnection, DriverTransaction, sqlalchemy_error
from sessionlog_server.storage.group_commit import GroupCommit
from sessionlog_server.storage.queries import SESSIONS
from sessionlog_server.storage.records import PendingBatch, SessionRecord, StoredSnapshot
from sessionlog_server.storage.rows import (
    event_from_row,
    event_params,
    session_record,
    stored_form,
)

NO_SEQ_BOUND = 2**63 - 1
"""A seq bound that bounds nothing (the largest seq a BIGINT column holds)."""

LEASE_RACE_ATTEMPTS = 5
"""How many times a grant reads the session's row again after another instance's grant committed
between its read and its write (`acquire_lease`), before it gives up WRITER_HELD."""


def held_until(record: SessionRecord) -> str:
    """`is held by writer 'w' (epoch 2) until 2026-12-07T18:20:58.123Z`: when the lease lapses
    as a time a reader takes in at once (it said `until 1796667457322 (Unix ms, ...)`); the
    `expires_at` metadata keeps the milliseconds."""
    expires = record.lease_expires_at or 0
    stamp = datetime.fromtimestamp(expires / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"is held by writer {record.writer_id!r} (epoch {record.epoch}) until {stamp}"


class EventRecorder(ABC):
    """Stores sessions, their writer leases, events and blobs in one SQL database."""

    #: The fenced compare-and-set (driver SQL: built once, no per-batch statement construction).
    #: Parameters: next_seq, last_time, open_turn, lease_expires_at; id, writer_id, epoch, expected.
    advance_sql: ClassVar[str]
    #: The same fence for a row that already holds the new `open_turn`, which it leaves out of
    #: its SET (the same parameters; None: `advance_sql` alone). See `_fence`.
    advance_keeping_turn_sql: ClassVar[str | None] = None
    #: The event insert (driver SQL, executemany), parameters in `EVENT_COLUMNS` order.
    insert_events_sql: ClassVar[str]
    #: The driver's parameter marker (`?` for sqlite3, `%s` for psycopg).
    placeholder: ClassVar[str]
    #: The statement that opens a group commit's transaction (storage/driver.py).
    begin_write_sql: ClassVar[str] = "BEGIN"
    #: Whether the writer thread's driver connection is put in autocommit mode (psycopg's; the
    #: SQLite engine sets sqlite3's for every connection): see `CommitConnection`.
    driver_autocommit: ClassVar[bool] = False

    def __init__(self, write_engine: Engine, read_engine: Engine | None = None) -> None:
        self.write_engine = write_engine
        self.read_engine = read_engine or write_engine
        self._commits = CommitConnection(
            write_engine, self.begin_write_sql, self._turn, driver_autocommit=self.driver_autocommit
        )
        """The writer thread's own connection: group commits run on the driver (storage/driver.py)."""
        self.instance = uuid.uuid4().hex[:12]
        """This recorder among the processes sharing the database (change notifications)."""
        self._group = self.group_commit()
        """The statements a group commit runs (storage/group_commit.py)."""

    def group_commit(self) -> GroupCommit:
        """This database's group commit statements (PostgreSQL: one statement, its subclass)."""
        return GroupCommit(self.advance_sql, self.insert_events_sql, self.placeholder, self.advance_keeping_turn_sql)

    # --- transactions -------------------------------------------------------------------

    def _turn(self) -> AbstractContextManager[None]:
        """Held around every write transaction: nothing here; on SQLite, this process's turn to
        write the file (storage/writer_turn.py)."""
        return nullcontext()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction; driver errors become sessionlog errors at this edge."""
        try:
            with self._turn(), self.write_engine.begin() as conn:
                yield conn
        except SessionLogError:
            raise
        except (sa_exc.DBAPIError, OverflowError) as exc:
            raise sqlalchemy_error(exc) from exc

    def storage_lost(self) -> str | None:
        """Why this process can write no more until it is restarted (a SQLite file deleted
        under it), or None: the health service reports NOT_SERVING then. A database that fails
        for a while (a full disk, a lost connection) is not lost: its calls fail and retry."""
        return None

    def _lock_namespace(self, conn: Connection, namespace: str) -> None:
        """Make other writers' transactions that count `namespace`'s sessions wait for this one:
        nothing here, where write transactions take turns (SQLite: `BEGIN IMMEDIATE`)."""
        return

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self.read_engine.connect() as conn:
                yield conn
        except (sa_exc.DBAPIError, OverflowError) as exc:
            raise sqlalchemy_error(exc) from exc

    def close(self) -> None:
        """Release every pooled connection."""
        self._commits.close()
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()

    # --- sessions -----------------------------------------------------------------------

    def create_session(self, record: SessionRecord, seed: Sequence[Event] = (), *, quota: int = 0) -> SessionRecord:
        """Insert a session (and, for a fork, its own first events) in one transaction; with a
        `quota` (0: none), only while its namespace holds fewer sessions than that, counted in
        the same transaction under the namespace's lock, so creations at once cannot all pass
        one count."""
        with self._write() as conn:
            if conn.execute(queries.SESSION_EXISTS, {"session_id": record.id}).first():
                raise AlreadyExists("SESSION_EXISTS", f"session {record.id!r} already exists", session_id=record.id)
            if quota:
                self._lock_namespace(conn, record.namespace)
                held = select(func.count()).select_from(SESSIONS).where(SESSIONS.c.namespace == record.namespace)
                if conn.execute(held).scalar_one() >= quota:
                    raise LimitExceeded(
                        "SESSION_QUOTA_EXCEEDED",
                        f"namespace {record.namespace!r} already holds its limit of {quota} sessions",
                        limit=quota,
                        namespace=record.namespace,
                    )
            conn.execute(
                queries.INSERT_SESSION,
                {
                    "id": record.id,
                    "namespace": record.namespace,
                    "create_time": record.create_time,
                    "cwd": record.cwd,
                    "metadata": record.stored_metadata,
                    "parent_id": record.parent_id,
                    "fork_seq": record.fork_seq,
                    "next_seq": record.next_seq,
                    "last_time": record.last_time,
                    "epoch": 0,
                    "open_turn": record.open_turn,
                },
            )
            if seed:
                self._insert_events(conn, record.id, seed, threshold=None)
        return record

    def get_session(self, session_id: str) -> SessionRecord:
        """The session, or NotFound."""
        with self._read() as conn:
            return self._get_session(conn, session_id)

    def _get_session(self, conn: Connection, session_id: str) -> SessionRecord:
        row = conn.execute(queries.SESSION_BY_ID, {"session_id": session_id}).mappings().first()
        if row is None:
            raise NotFound("SESSION_NOT_FOUND", f"session {session_id!r} not found", session_id=session_id)
        return session_record(row)

    def list_sessions(
        self,
        namespace: str,
        page_size: int,
        after: tuple[int, str] | None = None,
        parent_id: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions ordered by (create_time, id), starting after the `after` key."""
        query = select(SESSIONS).where(SESSIONS.c.namespace == namespace)
        if parent_id is not None:
            query = query.where(SESSIONS.c.parent_id == parent_id)
        if after is not None:
            created, sid = after
            query = query.where(
                or_(SESSIONS.c.create_time > created, and_(SESSIONS.c.create_time == created, SESSIONS.c.id > sid))
            )
        query = query.order_by(SESSIONS.c.create_time, SESSIONS.c.id).limit(page_size)
        with self._read() as conn:
            return [session_record(row) for row in conn.execute(query).mappings()]

    def sessions_to_repair(self, now: int) -> list[SessionRecord]:
        """Sessions with an open turn and no live writer: an indexed query, no event scan."""
        query = select(SESSIONS).where(
            SESSIONS.c.open_turn.is_(True),
            or_(SESSIONS.c.writer_id.is_(None), SESSIONS.c.lease_expires_at <= now),
        )
        with self._read() as conn:
            return [session_record(row) for row in conn.execute(query).mappings()]

    def extend_lapsed_leases(self, *, now: int, ttl_ms: int) -> int:
        """Give every lease that lapsed mid-turn `ttl_ms` more from `now`; how many. For the
        start of the service: a lease that lapsed while no service ran (a restart that took
        longer than the lease's time to live) gets the time its writer needs to reconnect, where
        the start-up repair completed its turn as interrupted under it, and the writer, which
        had been reconnecting all along, found its lease gone. The same open-turn predicate as
        `sessions_to_repair`, so the same index finds them."""
        with self._write() as conn:
            result = conn.execute(
                update(SESSIONS)
                .where(
                    SESSIONS.c.open_turn.is_(True),
                    SESSIONS.c.writer_id.is_not(None),
                    SESSIONS.c.lease_expires_at <= now,
                )
                .values(lease_expires_at=now + ttl_ms)
            )
            return result.rowcount

    # --- leases -------------------------------------------------------------------------

    def acquire_lease(
        self,
        session_id: str,
        writer_id: str,
        *,
        takeover: bool,
        now: int,
        ttl_ms: int,
        token_hash: str,
        presented_hashes: Sequence[str] = (),
        claims_lease: bool = False,
    ) -> SessionRecord:
        """Grant the writer lease at a new epoch; refuse while another live writer holds it.

        A live lease is taken again only with `takeover` or by its holder, who proves it by
        presenting its token (the hash of one of `presented_hashes`): a reconnect after a broken
        stream, or a retry of a grant asked for with a request_id (leases.py). The holder
        keeps its token (so a grant whose answer was lost costs nothing: the token still
        works) and where its lease began (`lease_since_seq`); anyone else gets the new
        `token_hash`, its lease beginning at the session's next seq. Either way the new epoch
        fences whatever the old grant still had in flight. The writer id is never checked.

        A caller that `claims_lease` (it presented a lease token, without `takeover`) and is
        not the holder is refused OWNERSHIP_LOST, whether or not the lease is live: the lease
        its token stood for was given back, taken over, or lapsed and taken (by the service's
        repair too), and others may have written since. Granted a fresh lease instead, the old
        holder would go on writing as if it had held the session throughout.
        """
        with self._write() as conn:
            # The grant is a compare-and-set on the epoch read: another instance's grant that
            # commits in between (PostgreSQL's READ COMMITTED lets both read the same epoch)
            # makes it take nothing. The row is read again and the rules applied to what it now
            # holds: a takeover takes it from that grant (as it would a moment later), anyone
            # else is refused by name. Refused at once instead, two instances taking a session
            # over together failed one try in five with WRITER_HELD, naming nobody.
            for _ in range(LEASE_RACE_ATTEMPTS):
                current = self._get_session(conn, session_id)
                holder = any(_same_hash(current.lease_token_hash, presented) for presented in presented_hashes)
                if claims_lease and not holder and not takeover:
                    raise lease_not_held(session_id)
                if current.lease_live(now) and not takeover and not holder:
                    raise WriterHeld(
                        "WRITER_HELD",
                        f"session {session_id!r} {held_until(current)}: a writer that is connected renews "
                        "its lease, so this moves on while the holder lives; if the holder is gone, take "
                        "the session over (takeover), which fences it out",
                        session_id=session_id,
                        holder=current.writer_id,
                        expires_at=current.lease_expires_at,
                        epoch=current.epoch,
                    )
                result = conn.execute(
                    queries.TAKE_LEASE,
                    {
                        "session_id": session_id,
                        "seen_epoch": current.epoch,
                        "new_writer_id": writer_id,
                        "new_epoch": current.epoch + 1,
                        "new_expires_at": now + ttl_ms,
                        "new_token_hash": current.lease_token_hash if holder else token_hash,
                        "new_since_seq": current.next_seq
                        if not holder or current.lease_since_seq is None
                        else current.lease_since_seq,
                    },
                )
                if result.rowcount == 1:
                    return self._get_session(conn, session_id)
            current = self._get_session(conn, session_id)
            raise WriterHeld(
                "WRITER_HELD",
                f"session {session_id!r} was granted to other writers {LEASE_RACE_ATTEMPTS} times while this "
                f"grant was made; it {held_until(current)}",
                session_id=session_id,
                holder=current.writer_id,
                expires_at=current.lease_expires_at,
                epoch=current.epoch,
            )

    def renew_lease(self, session_id: str, token_hash: str, epoch: int, *, now: int, ttl_ms: int) -> SessionRecord:
        """Extend the lease held under `token_hash` at `epoch`; OwnershipLost if it is not current."""
        with self._write() as conn:
            result = conn.exec_driver_sql(self._renew_sql(), (now + ttl_ms, session_id, token_hash, epoch))
            if result.rowcount != 1:
                raise lease_not_held(session_id)
            return self._get_session(conn, session_id)

    def renew_leases(self, leases: Sequence[tuple[str, str, int]], *, now: int, ttl_ms: int) -> list[bool]:
        """Extend many leases, each `(session_id, token_hash, epoch)`, in one transaction: one
        commit (one fsync) for all, where one `renew_lease` each would pay one per lease. Per
        lease: whether it was still current (False: taken over or released meanwhile).

        One statement renews them all. Only when it renewed fewer than all (a stream lost its
        lease meanwhile: rare) are they renewed again one by one, to learn which: renewing a
        renewed lease again changes nothing. One statement per lease kept the writer thread
        (and the appends queued behind it) ~4x longer on PostgreSQL: 200 leases took 13.5 ms
        there, 3.5 ms now (SQLite: 0.70 -> 0.63 ms).
        """
        expires_at = now + ttl_ms
        mark = self.placeholder
        # `id IN (...)` finds the rows by the primary key; the row values alone made SQLite
        # scan the whole table.
        ids = ", ".join(mark for _ in leases)
        held = ", ".join(f"({mark}, {mark}, {mark})" for _ in leases)
        every = (
            f"UPDATE sessions SET lease_expires_at = {mark} "
            f"WHERE id IN ({ids}) AND (id, lease_token_hash, epoch) IN (VALUES {held})"
        )
        params = (expires_at, *(lease[0] for lease in leases), *(value for lease in leases for value in lease))
        each = [(expires_at, *lease) for lease in leases]

        def renew(conn: DriverTransaction) -> list[bool]:
            if not leases or conn.exec_driver_sql(every, params).rowcount == len(leases):
                return [True] * len(leases)
            return [count == 1 for count in conn.rowcounts(self._renew_sql(), each)]

        return self._commits.run(renew)

    def _renew_sql(self) -> str:
        """The renewal: a new expiry for the lease held under a token hash at an epoch
        (parameters: expires_at, session_id, token_hash, epoch)."""
        mark = self.placeholder
        return (
            f"UPDATE sessions SET lease_expires_at = {mark} "
            f"WHERE id = {mark} AND lease_token_hash = {mark} AND epoch = {mark}"
        )

    def release_lease(self, session_id: str, token_hash: str, epoch: int) -> bool:
        """Give up the lease held under `token_hash` at `epoch` if it is still current; True if it was."""
        with self._write() as conn:
            result = conn.execute(
                queries.RELEASE_LEASE, {"session_id": session_id, "held_token_hash": token_hash, "held_epoch": epoch}
            )
            return result.rowcount == 1

    # --- appends ------------------------------------------------------------------------

    def commit_batches(self, batches: Sequence[PendingBatch]) -> list[SessionLogError | None]:
        """Group commit: every batch in one transaction, each session fenced on its own.

        A session whose fence fails gets its error; the others commit together. The group does
        not look up the eventIds the service could not vouch for (`verify_ids`): a long
        session's ids past the service's memory are nearly always new, and a look-up per
        session per group cost a query each (on PostgreSQL three more round trips, as the group
        could no longer be its one statement alone). The unique index on (session_id, eventId)
        refuses a stored one instead, with the whole transaction (`after_refusal`).
        """
        try:
            return self._commits.run(functools.partial(self._group.commit, batches=batches, look_up_ids=False))
        except SessionLogError as refusal:
            return self.after_refusal(refusal, batches)

    def after_refusal(self, refusal: SessionLogError, batches: Sequence[PendingBatch]) -> list[SessionLogError | None]:
        """The outcomes of a group the database refused as a whole (nothing of it was written).

        A conflict in a group with unvouched eventIds is most likely one of them stored after
        all: the group is committed again with them looked up first, so the runs that hold one
        write nothing and get EVENT_IDS_STORED with their seqs, and the rest commit together.
        A refusal that says the storage is unavailable (SQLite's turn to write not free within
        its bound, a connection lost) is every batch's: retried one by one, a group of N would
        wait N bounds more for the same answer. Any other refusal, or one that recurs, is the
        error of a lone batch; in a group, each batch is retried on its own (`_commit_each`), so
        one bad batch cannot take the others down with it.
        """
        if isinstance(refusal, AlreadyExists) and any(batch.verify_ids for batch in batches):
            try:
                return self._commits.run(functools.partial(self._group.commit, batches=batches, look_up_ids=True))
            except SessionLogError as again:
                refusal = again
        if len(batches) == 1:
            raise refusal
        if isinstance(refusal, Unavailable):
            return [refusal] * len(batches)
        return self._commit_each(batches)

    def _commit_each(self, batches: Sequence[PendingBatch]) -> list[SessionLogError | None]:
        """Each batch in a transaction of its own (its unvouched eventIds looked up first), each
        with its own outcome."""
        results: list[SessionLogError | None] = []
        for batch in batches:
            try:
                results.extend(
                    self._commits.run(functools.partial(self._group.commit, batches=[batch], look_up_ids=True))
                )
            except SessionLogError as exc:
                results.append(exc)
        return results

    @abstractmethod
    def shares_database(self, workers: int) -> bool:
        """Whether other processes may append to this database (so a change feed is worth it)."""

    @abstractmethod
    def change_feed(self) -> ChangeFeed:
        """How this process learns of other processes' commits (storage/changes.py)."""

    def _insert_events(self, conn: Connection, session_id: str, events: Sequence[Event], threshold: int | None) -> None:
        rows = []
        all_blobs: dict[str, bytes] = {}
        for event in events:
            ext = blob_store.externalize(event.data, threshold or 1 << 62)
            all_blobs.update(ext.blobs)
            rows.append(event_params(session_id, event, stored_form(ext.data, ext.refs)))
        if all_blobs:
            self._group.insert_blobs(conn, all_blobs)
        conn.exec_driver_sql(self.insert_events_sql, rows)

    # --- reads --------------------------------------------------------------------------

    def read_events(self, session_id: str, from_seq: int, to_seq: int | None, limit: int) -> list[Event]:
        """The session's own stored events with from_seq <= seq <= to_seq, blobs resolved."""
        params = {"session_id": session_id, "from_seq": from_seq, "to_seq": to_seq, "limit": limit}
        query = queries.EVENTS_FROM if to_seq is None else queries.EVENTS_BETWEEN
        with self._read() as conn:
            rows = list(conn.execute(query, params).mappings())
            digests = {ref[1] for row in rows for ref in (row["blob_refs"] or ())}
            contents = self._fetch_blobs(conn, digests) if digests else {}
        return [event_from_row(row, contents) for row in rows]

    def _fetch_blobs(self, conn: Connection, digests: set[str]) -> dict[str, bytes]:
        rows = conn.execute(queries.BLOBS_BY_DIGEST, {"digests": list(digests)})
        return {sha: bytes(content) for sha, content in rows}

    def read_events_at(self, session_id: str, seqs: Sequence[int]) -> list[Event]:
        """The session's own stored events at `seqs` (any order in, seq order out), blobs resolved."""
        if not seqs:
            return []
        with self._read() as conn:
            rows = list(conn.execute(queries.EVENTS_AT, {"session_id": session_id, "seqs": list(seqs)}).mappings())
            digests = {ref[1] for row in rows for ref in (row["blob_refs"] or ())}
            contents = self._fetch_blobs(conn, digests) if digests else {}
        return [event_from_row(row, contents) for row in rows]

    def read_surface_ops(self, session_id: str, from_seq: int, to_seq: int, limit: int) -> list[Event]:
        """The session's own surface events in a seq range as light events: seq, type and surface
        op only (empty data, time 0): what a fold of the surface needs, without payloads."""
        params = {"session_id": session_id, "from_seq": from_seq, "to_seq": to_seq, "limit": limit}
        with self._read() as conn:
            rows = list(conn.execute(queries.SURFACE_OPS, params))
        return [
            Event(seq, 0, kind, {}, surface_op=APPEND if op == "append" else Replace(start, end))
            for seq, kind, op, start, end in rows
        ]

    def find_event_ids(self, session_id: str, event_ids: Sequence[str], max_seq: int | None = None) -> dict[str, int]:
        """Which of `event_ids` the session itself stores (at or before `max_seq`: the part a
        fork inherits), with their seqs (the unique index)."""
        with self._read() as conn:
            found = self._group.find_event_ids(conn, session_id, event_ids)
        return found if max_seq is None else {eid: seq for eid, seq in found.items() if seq <= max_seq}

    def recent_event_ids(self, session_id: str, limit: int, max_seq: int | None = None) -> list[tuple[str, int]]:
        """The session's own latest `limit` eventIds (at or before `max_seq`) with their seqs,
        newest first."""
        params = {"session_id": session_id, "max_seq": NO_SEQ_BOUND if max_seq is None else max_seq, "limit": limit}
        with self._read() as conn:
            return [(eid, seq) for eid, seq in conn.execute(queries.RECENT_EVENT_IDS, params)]

    def snapshots_before(self, session_id: str, max_seq: int, fold_version: int, limit: int) -> list[StoredSnapshot]:
        """The session's own latest `limit` snapshots written by fold code `fold_version` at or
        before `max_seq`, newest first (those of other fold code are skipped in the query: after
        a fold-version bump they are many, and none of them would do)."""
        params = {"session_id": session_id, "max_seq": max_seq, "fold_version": fold_version, "limit": limit}
        with self._read() as conn:
            rows = conn.execute(queries.SNAPSHOTS_BEFORE, params)
            return [StoredSnapshot(sid, seq, version, bytes(state)) for sid, seq, version, state in rows]

    def save_snapshots(self, snapshots: Sequence[StoredSnapshot]) -> None:
        """Store snapshots in one transaction. One already stored at a seq stays if it was
        written by the same fold code (it is equal) or newer; one of an older fold version is
        replaced: it is ignored on every load, and a new one at its seq would else never be
        stored, so loads there would fold from further back every time."""
        mark = self.placeholder
        with self._write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO fold_snapshots (session_id, seq, fold_version, state) "
                f"VALUES ({mark}, {mark}, {mark}, {mark}) "
                "ON CONFLICT (session_id, seq) DO UPDATE "
                "SET fold_version = excluded.fold_version, state = excluded.state "
                "WHERE fold_snapshots.fold_version < excluded.fold_version",
                [(s.session_id, s.seq, s.fold_version, s.state) for s in snapshots],
            )

    def discard_snapshots(self, snapshots: Sequence[StoredSnapshot]) -> None:
        """Delete stored snapshots a load could not use (damaged, or of a format this code does
        not read under its fold version), so the next one stored at their seq goes in: one of
        the same fold version would else be kept as equal, and every load there would ignore
        it and fold from further back. A row whose state changed since it was read stays."""
        mark = self.placeholder
        with self._write() as conn:
            conn.exec_driver_sql(
                f"DELETE FROM fold_snapshots WHERE session_id = {mark} AND seq = {mark} "
                f"AND fold_version = {mark} AND state = {mark}",
                [(s.session_id, s.seq, s.fold_version, s.state) for s in snapshots],
            )


def lease_not_held(session_id: str, *, presented: bool = True) -> OwnershipLost:
    """The answer to a lease token that does not hold the session's current lease.

    The same for a token that was taken over, released, or never granted, so the answer tells
    a caller nothing about other writers; the holder of a lost lease must reopen. A call that
    presented none (`presented` False) is told so, and where a token comes from: a caller built
    from the protos alone, that never set the field, would look for another writer.
    """
    if not presented:
        message = (
            f"no lease_token was given for session {session_id!r}: send the token AcquireLease, "
            "ResumeSession or the writer stream's `opened` returned"
        )
    else:
        message = (
            f"the lease token does not hold the current lease of session {session_id!r} (it was given back, "
            "taken over, or never granted); reopen the writer"
        )
    return OwnershipLost("OWNERSHIP_LOST", message, session_id=session_id)


def _same_hash(stored: str | None, presented: str | None) -> bool:
    return stored is not None and presented is not None and hmac.compare_digest(stored, presented)
