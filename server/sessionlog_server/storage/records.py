"""Plain records passed between the service and storage (no ORM objects leak upward)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sessionlog.core import jsonvalue
from sessionlog.core.errors import Unavailable
from sessionlog.core.events import Event


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session row as the service sees it."""

    id: str
    namespace: str
    create_time: int
    cwd: str | None
    metadata: dict[str, Any]
    """The metadata object (parsed from `metadata_text` when read)."""
    parent_id: str | None
    fork_seq: int | None
    next_seq: int
    last_time: int
    writer_id: str | None
    epoch: int
    lease_expires_at: int | None
    open_turn: bool
    lease_token_hash: str | None = None
    """Hex sha256 of the current lease's token (never the token, never sent to a client)."""
    lease_since_seq: int | None = None
    """The next seq when the current lease's token was issued (None: granted before it was kept)."""
    metadata_text: str | None = field(default=None, compare=False, repr=False)
    """The exact JSON text of `metadata` as it was accepted and stored, when known: it is what
    is stored and what is served, byte for byte (SPEC §12); without it `metadata` is serialised
    once, when stored. A read always sets it."""

    @property
    def stored_metadata(self) -> str:
        """The metadata's JSON text as stored: the accepted text, else `metadata` serialised."""
        return self.metadata_text if self.metadata_text is not None else jsonvalue.dumps(self.metadata)

    def lease_live(self, now: int) -> bool:
        """True while a writer holds an unexpired lease."""
        return self.writer_id is not None and (self.lease_expires_at or 0) > now


class EventIdsStored(Unavailable):
    """A batch's eventIds turned out to be stored already: the batch was not written. `found`
    maps each of them to its seq, so the retry the client makes returns the original seqs."""

    def __init__(self, session_id: str, found: dict[str, int]) -> None:
        error = Unavailable(
            "EVENT_IDS_STORED",
            f"session {session_id!r} already stores eventIds {sorted(found)[:5]}; retry the batch "
            "with the same eventIds to get their seqs",
        )
        super().__init__(error.reason, error.message)
        self.found = found


class StoredSnapshot(NamedTuple):
    """A fold snapshot as stored: the session whose rows hold it, the last seq folded into it,
    the fold code version that wrote it, and its bytes (see `sessionlog.core.snapshot`)."""

    session_id: str
    seq: int
    fold_version: int
    state: bytes


StoredData = tuple[bytes, str | None]
"""An event's data as stored: its JSON text as UTF-8 bytes (blob strings nulled; the insert
turns the bytes into TEXT inside the database, so the event loop never decodes them) and its
blob refs as JSON text (storage/rows.py `stored_form` makes it)."""


@dataclass(slots=True, init=False)
class PendingBatch:
    """One validated batch to commit, with the fencing values the commit must check.

    The commit advances `sessions.next_seq` from `expected_next_seq` to `new_next_seq` only if
    the row still names this writer and epoch; otherwise nothing of the batch is written.
    """

    session_id: str
    writer_id: str
    epoch: int
    expected_next_seq: int
    events: list[Event]
    last_time: int
    open_turn: bool
    lease_expires_at: int
    open_turn_before: bool
    """Whether the session had an open turn before this batch, as planned: with `open_turn`,
    whether the batch opens or closes one (which fence statement it takes, `EventRecorder._fence`)."""
    stored: list[StoredData] = field(default_factory=list)
    """Per event: the data as stored (blob strings taken out) and its blob refs."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    snapshot: StoredSnapshot | None = None
    """A fold snapshot at this batch's last seq, committed with it (so it never runs ahead)."""
    stored_bytes: int = 0
    """The stored JSON text of the batch's data, in bytes (subscriber buffers, commit backlog)."""
    committed_at: float = 0.0
    """When its commit returned (`time.perf_counter()`, set by the group committer): a live
    subscriber's lag is measured from it, not from the events' time (a repair's is older)."""
    verify_ids: list[str] = field(default_factory=list)
    """EventIds the service could not vouch for from memory. The events' unique index refuses one
    that is stored (and the group with it); the group is then committed again with these looked
    up, and a stored one fails its own batch with EventIdsStored (`EventRecorder.after_refusal`)."""

    def __init__(
        self,
        session_id: str,
        writer_id: str,
        epoch: int,
        expected_next_seq: int,
        events: list[Event],
        last_time: int,
        open_turn: bool,
        lease_expires_at: int,
        open_turn_before: bool,
        stored: list[StoredData] | None = None,
        blobs: dict[str, bytes] | None = None,
        snapshot: StoredSnapshot | None = None,
        stored_bytes: int = 0,
        committed_at: float = 0.0,
        verify_ids: list[str] | None = None,
    ) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.session_id = session_id
        self.writer_id = writer_id
        self.epoch = epoch
        self.expected_next_seq = expected_next_seq
        self.events = events
        self.last_time = last_time
        self.open_turn = open_turn
        self.lease_expires_at = lease_expires_at
        self.open_turn_before = open_turn_before
        self.stored = [] if stored is None else stored
        self.blobs = {} if blobs is None else blobs
        self.snapshot = snapshot
        self.stored_bytes = stored_bytes
        self.committed_at = committed_at
        self.verify_ids = [] if verify_ids is None else verify_ids

    @property
    def payload_bytes(self) -> int:
        """The batch's data as a load reads it back, in bytes: its stored text and its blobs
        (the snapshot policy's bytes rule, as a cold fold counts `Event.stored_size`; a blob
        the batch holds twice counted once)."""
        return self.stored_bytes + sum(map(len, self.blobs.values()))

    @property
    def new_next_seq(self) -> int:
        return self.expected_next_seq + len(self.events)
