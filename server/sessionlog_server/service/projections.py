"""Projections (SPEC §5) of a session's log, at its head or at any `at_seq`, served in pages.

At the head, the live fold answers (after waiting for the session's in-flight batches, so a
reader never sees an event that is not yet durable; a cached fold that another instance left
behind catches up first). An older prefix, or a view with crash repair shown in memory, is
loaded like any session: the latest snapshot at or before the seq, then the events after it.

Model histories and transcripts are produced a page at a time: a response never holds more
than `page_size` items or about `read_page_bytes` of JSON, and `next_page_token` carries the
seq the pages are read at, so a reader that follows the tokens gets one consistent prefix even
while the session grows. Messages come from the shared message cache as stored JSON bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import NotFound, ValidationError, seq_not_found
from sessionlog.core.events import Event, JsonObject
from sessionlog.core.fold import SessionFold
from sessionlog.core.messages import project_message
from sessionlog.core.projections.request import request_view
from sessionlog.core.projections.transcript import TranscriptRow, transcript_row
from sessionlog.core.repair import commit_closers
from sessionlog.core.surface import SurfaceState, apply_surface_plan, no_node_lookup, plan_surface_event
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.page_tokens import decode_token, encode_token, request_tag, unissued_token
from sessionlog_server.storage.records import SessionRecord

if TYPE_CHECKING:
    from sessionlog_server.service.app import SessionLogService

DEFAULT_HISTORY_PAGE = 1000
DEFAULT_TRANSCRIPT_PAGE = 500
MAX_PAGE = 10_000


@dataclass(frozen=True, slots=True)
class Scope:
    """Which prefix to project: up to `at_seq` (None: the head), with repair shown or not."""

    session_id: str
    at_seq: int | None = None
    with_repair: bool = False


@dataclass(slots=True)
class Folded:
    """A fold of the scoped prefix, the session it belongs to, and messages that exist only
    in memory (a crash repair shown to a reader without being written)."""

    fold: SessionFold
    at_seq: int
    record: SessionRecord
    repair: list[Event] = field(default_factory=list)
    """Closers shown in memory (a read-only view of a crashed session); not in the log."""
    extra: dict[int, JsonObject] = field(default_factory=dict)
    """The messages of `repair` events, by seq."""


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of a model history (GetModelHistory)."""

    messages_json: bytes
    at_seq: int
    """The last seq the page's history covers; -1 for a session without events."""
    from_index: int
    message_count: int
    replace_generation: int
    next_page_token: str


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    """One page of a transcript (GetTranscript)."""

    rows: list[TranscriptRow]
    at_seq: int
    """The last seq the transcript covers; -1 for a session without events."""
    next_page_token: str


async def fold_scope(service: SessionLogService, scope: Scope, record: SessionRecord | None = None) -> Folded:
    """The fold of the scoped prefix (the live one when possible); `record` is the caller's
    session when the caller has just read it."""
    record = record or await service.sessions.get_session(scope.session_id)
    if record.next_seq == 0:
        if scope.at_seq is not None:
            raise _no_seq(scope, record.next_seq)
        return Folded(SessionFold(keep_messages=False), -1, record)
    head = record.next_seq - 1
    if scope.at_seq is not None and scope.at_seq > head:
        raise _no_seq(scope, record.next_seq)
    at_seq = head if scope.at_seq is None else scope.at_seq
    repair = scope.with_repair and not record.lease_live(now_ms())
    if at_seq == head and not repair:
        live = await service.live.get(record.id)
        async with live.lock:
            await live.wait_idle()
            if live.valid:
                await service.loading.catch_up(live, record)
                if live.fold.next_seq - 1 == head:
                    return Folded(live.fold, head, record)
    fold = (await service.loader.fold_at(record, at_seq)).fold
    folded = Folded(fold, at_seq, record)
    if repair and at_seq == head:
        for event in commit_closers(fold.closers("interrupted"), fold.next_seq, fold.repair_time):
            fold.apply(event)
            folded.repair.append(event)
            folded.at_seq = event.seq
            message = project_message(event)
            if message is not None:
                folded.extra[event.seq] = message
    return folded


async def history_page(
    service: SessionLogService,
    scope: Scope,
    *,
    from_index: int,
    if_generation: int | None,
    page_size: int,
    page_token: str,
) -> HistoryPage:
    """Messages of the model history from `from_index` on, one page."""
    if page_token:
        at_seq, from_index, generation = _decode_token(page_token, "history", scope.session_id)
        scope = Scope(scope.session_id, at_seq, scope.with_repair)
        if_generation = generation
    folded = await fold_scope(service, scope)
    fold = folded.fold
    generation = fold.replace_generation
    count = fold.message_count()
    start = from_index
    if if_generation is not None and if_generation != generation:
        if page_token:
            raise ValidationError(
                "BAD_PAGE_TOKEN", "page_token does not match the session's history", field="page_token"
            )
        # The surface was rewritten since the reader's copy: it re-reads from the first
        # message a replace changed (from the start when that is not known).
        changed = fold.first_changed_message(if_generation)
        start = 0 if changed is None else min(start, changed)
    if start > count:
        raise ValidationError(
            "BAD_FROM_INDEX", f"from_index {start} is past the {count} messages of the history", field="from_index"
        )
    limit = _page_size(page_size, DEFAULT_HISTORY_PAGE)
    seqs = fold.history_seqs_since(start)[:limit]
    bodies = await service.messages.message_bytes(folded.record, seqs, folded.extra)
    bodies = _cut_by_bytes(bodies, service.settings.read_page_bytes)
    end = start + len(bodies)
    token = _encode_token("history", scope.session_id, _stored_seq(folded), end, generation) if end < count else ""
    return HistoryPage(b"[" + b",".join(bodies) + b"]", folded.at_seq, start, count, generation, token)


async def request_of(service: SessionLogService, scope: Scope) -> tuple[dict[str, Any], int]:
    """The request view (SPEC §5) of the scoped prefix and the seq it covers."""
    folded = await fold_scope(service, scope)
    messages = await service.messages.messages(folded.record, folded.fold.history_seqs(), folded.extra)
    return request_view(folded.fold.latest_header, messages), folded.at_seq


async def transcript_page(
    service: SessionLogService, scope: Scope, *, page_size: int, page_token: str
) -> TranscriptPage:
    """Transcript rows from a seq on (the start, or where the token says), one page.

    Which rows were replaced, and by what, depends on replaces later in the log: the surface is
    folded from the page's start (its snapshot) over light rows (seq, type and surface op only)
    until the last of the page's rows that leaves the surface before `at_seq` has left it, so a
    page holds its own events and the surface, never the whole log, and following every page
    does not rescan the log once a page."""
    record = await service.sessions.get_session(scope.session_id)
    from_seq = 0
    if page_token:
        at_token, from_seq, _ = _decode_token(page_token, "transcript", scope.session_id)
        scope = Scope(scope.session_id, at_token, scope.with_repair)
    folded = await fold_scope(service, scope, record)
    at_seq = folded.at_seq
    if at_seq < 0:
        return TranscriptPage([], at_seq, "")
    limit = _page_size(page_size, DEFAULT_TRANSCRIPT_PAGE)
    last_stored = min(at_seq, record.next_seq - 1)
    start = (await service.loader.fold_at(record, min(from_seq - 1, last_stored))).fold if from_seq > 0 else None
    if start is not None:  # a page that begins inside a repair shown in memory starts after its first events
        for event in folded.repair:
            if event.seq < from_seq:
                start.apply(event)
    scan = _ReplaceScan(SurfaceState(*_surface_of(start)) if start is not None else SurfaceState(), from_seq)
    page: list[Event] = []
    budget = service.settings.read_page_bytes
    scanned_to = from_seq - 1
    shown = [event for event in folded.repair if event.seq >= from_seq]
    # The page's own events, read whole; the scan follows them.
    async for events in _with_repair(service.reader.pages(record, from_seq, last_stored, limit), shown):
        for event in events:
            if scan.page_end is None:
                page.append(event)
                budget -= len(jsonvalue.dumps(event.data))
                if len(page) == limit or budget <= 0:
                    scan.page_end = event.seq
            scan.add(event)
        scanned_to = events[-1].seq
        if scan.page_end is not None:
            break
    if scan.page_end is not None and scanned_to < at_seq and scan.watch(folded.fold):
        # The rest of the prefix only matters for the replaces that take the page's rows off
        # the surface: light rows (seq, type, surface op) of surface events, no payloads, and
        # only until the last such replace (else following every page would rescan the log).
        rest = service.reader.surface_ops(record, scanned_to + 1, last_stored)
        async for events in _with_repair(rest, [e for e in folded.repair if e.seq > scanned_to]):
            for event in events:
                scan.add(event)
            if not scan.pending:
                break
    rows = [
        row
        for event in page
        if (row := transcript_row(event, scan.replaced_by.get(event.seq), scan.replaces.get(event.seq, []))) is not None
    ]
    last = page[-1].seq if page else at_seq
    token = _encode_token("transcript", scope.session_id, _stored_seq(folded), last + 1, 0) if last < at_seq else ""
    return TranscriptPage(rows, at_seq, token)


def _stored_seq(folded: Folded) -> int:
    """The seq a page token pins the next pages to: the last stored seq of the folded prefix.
    A crash repair shown in memory (`with_repair`) has seqs past the head that the log does not
    hold; the next page folds the same head and shows the same repair again (it is
    deterministic), where asking for the repair's last seq was refused as past the head."""
    return max(folded.at_seq - len(folded.repair), 0)


class _ReplaceScan:
    """Folds the surface over events from a page's start, noting which of the page's rows a
    replace took off the surface (`replaced_by`) and what each replace in the page took off.

    Past the page, only the page's nodes still on the surface matter (`pending`): the scan can
    stop once each has been replaced, and a node that is on the surface at the read seq never
    is (`watch`)."""

    def __init__(self, surface: SurfaceState, first: int) -> None:
        self.surface = surface
        self.first = first
        self.page_end: int | None = None
        self.replaced_by: dict[int, int] = {}
        self.replaces: dict[int, list[int]] = {}
        self.page_nodes: list[int] = []
        self.pending: set[int] = set()

    def add(self, event: Event) -> None:
        plan = plan_surface_event(self.surface, event, no_node_lookup, validate=False)
        if plan is not None and (self.page_end is None or plan.seq <= self.page_end):
            self.page_nodes.append(plan.seq)
        if plan is not None and plan.kind == "replace":
            end = self.page_end if self.page_end is not None else plan.seq
            if plan.seq <= end:
                self.replaces[plan.seq] = list(plan.shadowed)
            for seq in plan.shadowed:
                if self.first <= seq <= end:
                    self.replaced_by.setdefault(seq, plan.seq)
                    self.pending.discard(seq)
        apply_surface_plan(self.surface, plan)

    def watch(self, at: SessionFold) -> bool:
        """Once the page is cut: note the page's nodes that a later replace (up to the fold
        `at`, the read seq's) takes off the surface; whether there are any to look for."""
        self.pending = {seq for seq in self.page_nodes if seq not in self.replaced_by and not at.on_surface(seq)}
        return bool(self.pending)


async def _with_repair(pages: AsyncIterator[list[Event]], repair: list[Event]) -> AsyncIterator[list[Event]]:
    """The stored pages, then the in-memory repair events (if any) as a last page."""
    async for page in pages:
        yield page
    if repair:
        yield repair


def _surface_of(fold: SessionFold) -> tuple[list[int], int]:
    view = fold.surface_view()
    return list(view["nodes"]), int(view["replaceGeneration"])


def _page_size(requested: int, default: int) -> int:
    if requested < 0:
        raise ValidationError("BAD_PAGE_SIZE", "page_size must not be negative", field="page_size")
    return min(requested or default, MAX_PAGE)


def _cut_by_bytes(bodies: list[bytes], budget: int) -> list[bytes]:
    """The longest prefix within `budget` bytes (at least one item, so a page always moves on)."""
    total = 0
    for index, body in enumerate(bodies):
        total += len(body) + 1
        if total > budget and index > 0:
            return bodies[:index]
    return bodies


def _encode_token(kind: str, session_id: str, at_seq: int, position: int, generation: int) -> str:
    return encode_token([kind, request_tag(session_id), at_seq, position, generation])


def _decode_token(token: str, kind: str, session_id: str) -> tuple[int, int, int]:
    """The seq, position and generation of a token `_encode_token` made for this kind of read
    of this session (AIP-158: a token continues its own request). Another session's token
    would read this one at that session's seq and index."""
    value = decode_token(token, 5)
    numbers = value[2:]
    if value[0] != kind or not all(type(n) is int and 0 <= n < 2**63 for n in numbers):
        raise unissued_token()
    if value[1] != request_tag(session_id):
        raise ValidationError(
            "BAD_PAGE_TOKEN", f"page_token is not a token of session {session_id!r}", field="page_token"
        )
    return numbers[0], numbers[1], numbers[2]


def _no_seq(scope: Scope, next_seq: int) -> NotFound:
    return seq_not_found(scope.session_id, scope.at_seq, next_seq)
