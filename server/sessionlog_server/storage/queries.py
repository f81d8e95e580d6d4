"""The recorder's SQLAlchemy statements, built once, with bound parameters.

Building a statement per call (`select(SESSIONS).where(SESSIONS.c.id == session_id)`) and
computing its cache key cost about 125 µs of CPU on the bench machine, four times what
executing it against SQLite cost (30-40 µs): a writer's set-up (create, lease, load) built about
ten of them, every `GetSession` or read page one or two. A statement built once keeps its
cache key, so a call is the execution alone. The append path does not use these: it runs
driver SQL inside group commits (`recorder.py`, `driver.py`).

Parameter names differ from the columns an UPDATE sets: SQLAlchemy keeps a column's own name
for its SET clause.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, select, update

from sessionlog_server.storage.models import BlobRow, EventRow, FoldSnapshotRow, SessionRow

# Declarative models type `__table__` as any FromClause; these are plain tables.
SESSIONS = cast(Table, SessionRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
BLOBS = cast(Table, BlobRow.__table__)
SNAPSHOTS = cast(Table, FoldSnapshotRow.__table__)

SESSION_BY_ID = select(SESSIONS).where(SESSIONS.c.id == bindparam("session_id"))
"""The session row (parameter: session_id)."""

SESSION_EXISTS = select(SESSIONS.c.id).where(SESSIONS.c.id == bindparam("session_id"))
"""Whether the session exists (parameter: session_id)."""

SESSION_NEXT_SEQS = select(SESSIONS.c.id, SESSIONS.c.next_seq).where(
    SESSIONS.c.id.in_(bindparam("session_ids", expanding=True))
)
"""Each listed session's next seq (parameter: session_ids, a list)."""

INSERT_SESSION = SESSIONS.insert()
"""A new session row (parameters: its columns)."""

TAKE_LEASE = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("session_id"), SESSIONS.c.epoch == bindparam("seen_epoch"))
    .values(
        writer_id=bindparam("new_writer_id"),
        epoch=bindparam("new_epoch"),
        lease_expires_at=bindparam("new_expires_at"),
        lease_token_hash=bindparam("new_token_hash"),
        lease_since_seq=bindparam("new_since_seq"),
    )
)
"""The lease to a writer at a new epoch, if the epoch is still the one read (parameters:
session_id, seen_epoch, new_writer_id, new_epoch, new_expires_at, new_token_hash,
new_since_seq)."""

RELEASE_LEASE = (
    update(SESSIONS)
    .where(
        SESSIONS.c.id == bindparam("session_id"),
        SESSIONS.c.lease_token_hash == bindparam("held_token_hash"),
        SESSIONS.c.epoch == bindparam("held_epoch"),
    )
    .values(writer_id=None, lease_expires_at=None, lease_token_hash=None)
)
"""The lease given up, if still held under that token at that epoch (parameters: session_id,
held_token_hash, held_epoch)."""

EVENTS_FROM = (
    select(EVENTS)
    .where(EVENTS.c.session_id == bindparam("session_id"), EVENTS.c.seq >= bindparam("from_seq"))
    .order_by(EVENTS.c.seq)
    .limit(bindparam("limit"))
)
"""A session's own events from a seq on (parameters: session_id, from_seq, limit)."""

EVENTS_BETWEEN = EVENTS_FROM.where(EVENTS.c.seq <= bindparam("to_seq"))
"""A session's own events in a seq range (parameters: session_id, from_seq, to_seq, limit)."""

EVENTS_AT = (
    select(EVENTS)
    .where(EVENTS.c.session_id == bindparam("session_id"), EVENTS.c.seq.in_(bindparam("seqs", expanding=True)))
    .order_by(EVENTS.c.seq)
)
"""A session's own events at listed seqs (parameters: session_id, seqs, a list)."""

SURFACE_OPS = (
    select(EVENTS.c.seq, EVENTS.c.type, EVENTS.c.surface_op, EVENTS.c.replace_start_seq, EVENTS.c.replace_end_seq)
    .where(
        EVENTS.c.session_id == bindparam("session_id"),
        EVENTS.c.seq >= bindparam("from_seq"),
        EVENTS.c.seq <= bindparam("to_seq"),
        EVENTS.c.surface_op.is_not(None),
    )
    .order_by(EVENTS.c.seq)
    .limit(bindparam("limit"))
)
"""A session's own surface operations in a seq range, without payloads (parameters:
session_id, from_seq, to_seq, limit)."""

RECENT_EVENT_IDS = (
    select(EVENTS.c.event_id, EVENTS.c.seq)
    .where(
        EVENTS.c.session_id == bindparam("session_id"),
        EVENTS.c.seq <= bindparam("max_seq"),
        EVENTS.c.event_id.is_not(None),
    )
    .order_by(EVENTS.c.seq.desc())
    .limit(bindparam("limit"))
)
"""A session's own latest eventIds at or before a seq, with their seqs, newest first
(parameters: session_id, max_seq, limit)."""

BLOBS_BY_DIGEST = select(BLOBS.c.sha256, BLOBS.c.content).where(
    BLOBS.c.sha256.in_(bindparam("digests", expanding=True))
)
"""Blob contents (parameter: digests, a list)."""

SNAPSHOTS_BEFORE = (
    select(SNAPSHOTS.c.session_id, SNAPSHOTS.c.seq, SNAPSHOTS.c.fold_version, SNAPSHOTS.c.state)
    .where(
        SNAPSHOTS.c.session_id == bindparam("session_id"),
        SNAPSHOTS.c.seq <= bindparam("max_seq"),
        SNAPSHOTS.c.fold_version == bindparam("fold_version"),
    )
    .order_by(SNAPSHOTS.c.seq.desc())
    .limit(bindparam("limit"))
)
"""A session's own latest snapshots of one fold version at or before a seq, newest first
(parameters: session_id, max_seq, fold_version, limit)."""
