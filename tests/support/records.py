"""Builders of storage records for tests that drive an `EventRecorder` directly, below the
service: a new session's row, and a batch as the append planner hands it to the committer."""

from __future__ import annotations

from typing import Any

from sessionlog.core.events import Event
from sessionlog_server.storage import blobs
from sessionlog_server.storage.records import PendingBatch, SessionRecord
from sessionlog_server.storage.rows import stored_form


def new_session(sid: str, namespace: str = "", *, create_time: int = 0, **fields: Any) -> SessionRecord:
    """A session as `create_session` takes it: no writer, no events; `fields` override."""
    values: dict[str, Any] = {
        "id": sid,
        "namespace": namespace,
        "create_time": create_time,
        "cwd": None,
        "metadata": {},
        "parent_id": None,
        "fork_seq": None,
        "next_seq": 0,
        "last_time": 0,
        "writer_id": None,
        "epoch": 0,
        "lease_expires_at": None,
        "open_turn": False,
        **fields,
    }
    return SessionRecord(**values)


def pending_batch(
    lease: SessionRecord,
    events: list[Event],
    *,
    lease_expires_at: int,
    expected: int | None = None,
    open_turn: bool = False,
    open_turn_before: bool | None = None,
    blob_threshold: int | None = None,
) -> PendingBatch:
    """A batch under `lease` (a session as `acquire_lease` returned it) appending `events`, at
    the first event's seq unless `expected` says otherwise, with each event's data as stored
    text; given `blob_threshold`, strings longer than it move to blobs, as the planner does."""
    assert lease.writer_id is not None
    pending = PendingBatch(
        session_id=lease.id,
        writer_id=lease.writer_id,
        epoch=lease.epoch,
        expected_next_seq=events[0].seq if expected is None else expected,
        events=events,
        last_time=events[-1].time,
        open_turn=open_turn,
        lease_expires_at=lease_expires_at,
        open_turn_before=open_turn if open_turn_before is None else open_turn_before,
    )
    for event in events:
        if blob_threshold is None:
            pending.stored.append(stored_form(event.data, None))
            continue
        ext = blobs.externalize(event.data, blob_threshold)
        pending.blobs.update(ext.blobs)
        pending.stored.append(stored_form(ext.data, ext.refs or None))
    return pending
