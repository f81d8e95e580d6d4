"""Planning an append: validate a batch against the live fold and build what to commit.

Everything here runs under the session's lock and before any I/O: envelope rules, eventId
de-duplication, the system-head rule, and the fold's seq/surface/structure rules. A batch that
breaks any rule changes nothing (a batch of several events is rolled back to its checkpoint);
a batch that passes becomes one `PendingBatch` for the group committer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sessionlog.convert import DecodedEvent
from sessionlog.core import validate
from sessionlog.core.errors import ExpectedSeqMismatch, SessionLogError
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.limits import Limits
from sessionlog.core.messages import empty_system_head
from sessionlog_server.service.live import LiveSession
from sessionlog_server.storage import blobs
from sessionlog_server.storage.records import PendingBatch, StoredData
from sessionlog_server.storage.rows import stored_form


@dataclass(slots=True, init=False)
class AppendPlan:
    """What an append will do: the seqs to report and, unless all were retries, the batch
    (not frozen, though nothing changes it: built per batch, see `sessionlog.core.fold._Plan`)."""

    seqs: list[int]
    """One seq per proposed event, in order (original seqs for retried eventIds)."""
    pending: PendingBatch | None
    """The events to commit (None when every event was a retry)."""

    def __init__(self, seqs: list[int], pending: PendingBatch | None) -> None:
        # Written out (compiled, a generated one stays interpreted): see `core.events.NewEvent`.
        self.seqs = seqs
        self.pending = pending


def validate_proposals(decoded: Sequence[DecodedEvent], limits: Limits) -> list[NewEvent]:
    """Envelope and batch-shape rules: the checks that need no session state."""
    events = [d.event for d in decoded]
    validate.validate_batch_shape(events, limits)
    validate.check_batch_bytes(sum(d.data_bytes for d in decoded), limits)
    for index, item in enumerate(decoded):
        try:
            validate.validate_proposal(item.event, item.data_bytes, limits)
        except SessionLogError as exc:
            exc.name_event(index)
            raise
    return events


def plan_append(
    live: LiveSession,
    proposals: Sequence[NewEvent],
    *,
    writer_id: str,
    epoch: int,
    expected_next_seq: int | None,
    now: int,
    lease_expires_at: int,
    blob_threshold: int,
    extra_first: Sequence[NewEvent] = (),
    raw: Sequence[bytes] | None = None,
) -> AppendPlan:
    """Validate `proposals` against the live fold and apply them to it (rolled back on error).

    `extra_first` are service-written events (e.g. repair) committed before the proposals in
    the same batch, at the last event's time; they get seqs but are not reported back.
    """
    fold = live.fold
    seqs: list[int | None] = []
    fresh: list[NewEvent] = []
    fresh_raw: list[bytes | None] = []
    for index, proposed in enumerate(proposals):
        known = live.known_seq(proposed.event_id) if proposed.event_id is not None else None
        seqs.append(known)
        if known is None:
            fresh.append(proposed)
            fresh_raw.append(raw[index] if raw is not None else None)
    if not fresh and not extra_first:
        return AppendPlan([s for s in seqs if s is not None], None)
    if expected_next_seq is not None and expected_next_seq != fold.next_seq:
        raise ExpectedSeqMismatch(
            "EXPECTED_SEQ_MISMATCH",
            f"session {live.session_id!r} is at seq {fold.next_seq}, the batch expected {expected_next_seq}",
            session_id=live.session_id,
            next_seq=fold.next_seq,
            expected=expected_next_seq,
        )
    to_commit: list[NewEvent] = list(extra_first)
    if fold.batch_needs_system_head(fresh):
        to_commit.append(empty_system_head())
    head_count = len(to_commit)
    to_commit.extend(fresh)

    time = max(now, fold.last_time)
    service_time = fold.repair_time  # repair events take the last event's time (SPEC §8)
    first_seq = fold.next_seq
    open_turn_before = fold.open_turn is not None
    # The stored forms first: their data is the proposals' own, and a batch that cannot be
    # stored must leave the fold as it was.
    wire: list[bytes | None] = [None] * head_count
    wire += fresh_raw
    blob_contents: dict[str, bytes] = {}
    stored = [_stored(p, text, blob_threshold, blob_contents) for p, text in zip(to_commit, wire, strict=True)]
    # One event needs no checkpoint: `SessionFold.apply` changes nothing when it raises. A
    # longer batch's later events are checked against its earlier ones, so a refusal must undo
    # those; its mark goes once the batch is planned, as nothing rolls a planned batch back (a
    # failed commit drops the live session, folded again from the log on next use: see
    # `AppendPipeline._finish_append`). So the fold keeps no undo journal for batches in flight.
    mark = fold.checkpoint() if len(to_commit) > 1 else None
    committed: list[Event] = []
    try:
        for offset, proposal in enumerate(to_commit):
            event = proposal.committed(first_seq + offset, service_time if offset < len(extra_first) else time)
            try:
                fold.apply(event)
            except SessionLogError as exc:
                if offset >= head_count:
                    exc.name_event(_proposal_index(proposals, proposal))
                raise
            committed.append(event)
    except SessionLogError:
        if mark is not None:
            fold.rollback(mark)
        raise
    except BaseException:
        live.valid = False  # a fault mid-apply may leave the fold half-changed: fold it again
        raise
    if mark is not None:
        fold.release(mark)

    reported = [e.seq for e in committed[head_count:]]
    if len(reported) < len(seqs):  # some were retried eventIds: they keep their original seqs
        new_seqs = iter(reported)
        reported = [s if s is not None else next(new_seqs) for s in seqs]
    pending = PendingBatch(
        session_id=live.session_id,
        writer_id=writer_id,
        epoch=epoch,
        expected_next_seq=first_seq,
        events=committed,
        last_time=time,
        open_turn=fold.open_turn is not None,
        lease_expires_at=lease_expires_at,
        open_turn_before=open_turn_before,
        stored=stored,
        blobs=blob_contents,
        stored_bytes=sum(len(text) for text, _ in stored),
    )
    for event in committed:  # only now: a remembered eventId is acknowledged on retry
        if event.event_id is not None:
            live.remember(event.event_id, event.seq)
    return AppendPlan(reported, pending)


def _stored(event: NewEvent, raw: bytes | None, threshold: int, blob_sink: dict[str, bytes]) -> StoredData:
    """The data's JSON text for storage, with blob strings taken out.

    The text as received is stored as is whenever no string in it goes to a blob (a payload
    shorter than the threshold cannot hold such a string: no walk at all), so stored bytes come
    back exactly as they were sent. Service-written events (no wire text) are serialised once.
    """
    if raw is not None and len(raw) <= threshold:
        return raw or b"{}", None
    ext = blobs.externalize(event.data, threshold)
    if not ext.refs and raw is not None:
        return raw, None
    blob_sink.update(ext.blobs)
    return stored_form(ext.data, ext.refs or None)


def _proposal_index(proposals: Sequence[NewEvent], proposal: NewEvent) -> int:
    for index, candidate in enumerate(proposals):
        if candidate is proposal:
            return index
    return -1


__all__ = ["AppendPlan", "plan_append", "validate_proposals"]
