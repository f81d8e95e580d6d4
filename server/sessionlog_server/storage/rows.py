"""How sessionlog's records map to table rows and back: the parameters of the event insert and
of the fence, and the records read from `sessions` and `events` rows.

Pure functions with no connection: the recorder (storage/recorder.py) runs the SQL, the append
planner makes each event's stored form before the commit (service/append.py), and the backends
bind the same parameters in their own statements (storage/sqlite.py, storage/postgres.py).
"""

from __future__ import annotations

from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog_server.storage import blobs as blob_store
from sessionlog_server.storage.records import PendingBatch, SessionRecord, StoredData


def stored_form(data: dict[str, Any], refs: list[list[Any]] | None) -> StoredData:
    """Serialise data and refs for storage (the JSON texts bound into the insert)."""
    return jsonvalue.dumps_bytes(data), jsonvalue.dumps(refs) if refs else None


def advance_params(first: PendingBatch, last: PendingBatch) -> tuple[Any, ...]:
    """The fence's parameters, in `advance_sql`'s order: the new values, then what must hold."""
    return (
        last.new_next_seq,
        last.last_time,
        last.open_turn,
        last.lease_expires_at,
        first.session_id,
        first.writer_id,
        first.epoch,
        first.expected_next_seq,
    )


def event_params(session_id: str, event: Event, stored: StoredData) -> tuple[Any, ...]:
    """The insert's parameters, in the column order of `insert_events_sql`."""
    op = event.surface_op
    data_text, refs_text = stored
    return (
        session_id,
        event.seq,
        event.time,
        event.type,
        data_text,
        event.event_id,
        event.ignorable,
        None if op is None else ("append" if op == APPEND else "replace"),
        op.start_seq if isinstance(op, Replace) else None,
        op.end_seq if isinstance(op, Replace) else None,
        jsonvalue.dumps(list(event.source_event_seqs)) if event.source_event_seqs else None,
        refs_text,
    )


EVENT_COLUMNS = (
    "session_id, seq, time, type, data, event_id, ignorable, surface_op, "
    "replace_start_seq, replace_end_seq, source_event_seqs, blob_refs"
)


def stored_metadata(text: str, session_id: str) -> tuple[Any, str]:
    """A session's metadata and its exact text, as stored. A JSON string holding an object's
    text is that object: an instance older than migration 0006 (metadata as JSONB), still
    serving beside the new ones in a rolling upgrade, wrote the object's text into the TEXT
    column as a string, and every listing of its namespace then failed DATA_NOT_OBJECT. Metadata
    is always an object, so a stored string is never metadata of its own."""
    metadata = jsonvalue.loads(text, what=f"stored metadata of session {session_id}")
    if isinstance(metadata, str) and metadata.startswith("{"):
        inner = jsonvalue.loads(metadata, what=f"stored metadata of session {session_id}")
        if isinstance(inner, dict):
            return inner, metadata
    return metadata, text


def session_record(row: Any) -> SessionRecord:
    """A `sessions` row as a SessionRecord, its metadata parsed from the exact text stored."""
    metadata, metadata_text = stored_metadata(row["metadata"], row["id"])
    return SessionRecord(
        id=row["id"],
        namespace=row["namespace"],
        create_time=row["create_time"],
        cwd=row["cwd"],
        metadata=metadata,
        metadata_text=metadata_text,
        parent_id=row["parent_id"],
        fork_seq=row["fork_seq"],
        next_seq=row["next_seq"],
        last_time=row["last_time"],
        writer_id=row["writer_id"],
        epoch=row["epoch"],
        lease_expires_at=row["lease_expires_at"],
        open_turn=bool(row["open_turn"]),
        lease_token_hash=row["lease_token_hash"],
        lease_since_seq=row["lease_since_seq"],
    )


def event_from_row(row: Any, contents: dict[str, bytes]) -> Event:
    """An `events` row as an Event, its blob strings put back from `contents` (by digest)."""
    kind = row["surface_op"]
    op = (
        None
        if kind is None
        else APPEND
        if kind == "append"
        else Replace(row["replace_start_seq"], row["replace_end_seq"])
    )
    stored = row["data"]
    data = jsonvalue.loads(stored, what=f"stored data of seq {row['seq']}")
    exact: str | None = stored
    size = len(stored) if stored.isascii() else len(stored.encode("utf-8"))
    if row["blob_refs"]:
        data = blob_store.internalize(data, row["blob_refs"], contents)
        exact = None  # the stored text has the blob strings taken out
        size += sum(len(contents[ref[1]]) for ref in row["blob_refs"])
    return Event(
        seq=row["seq"],
        time=row["time"],
        type=row["type"],
        data=data,
        event_id=row["event_id"],
        ignorable=bool(row["ignorable"]),
        surface_op=op,
        source_event_seqs=tuple(row["source_event_seqs"] or ()),
        data_text=exact,
        stored_size=size,
    )
