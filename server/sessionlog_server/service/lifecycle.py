"""Resume, fork and crash repair (SPEC §8): completing open turns instead of truncating.

All three end in the pure core's `open_turn_closers`; what differs is who holds the lease and
where the events go:
- resume: the new writer takes the lease, then repair closers and `session/end-seed {}` are
  committed under it, in one batch. A resume asked for again with its request_id (a retry
  after a lost answer) takes the lease again, writes nothing, and answers as the first did;
- repair of an abandoned session (at start-up, or when a lease expired mid-turn): the service
  takes the lease itself, commits the closers, and gives the lease back;
- fork: a new session row pointing at the parent's prefix, plus its own first events
  (`session/end-seed {inherited:true}` and, if the cut is inside an open turn, `forked`
  closers), in one transaction. Nothing of the prefix is copied. A fork asked for again (same
  source, seq and new id: a retry after a lost answer) answers with the fork it made.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from sessionlog.core.errors import AlreadyExists, SessionLogError, ValidationError, WriterHeld, seq_not_found
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.repair import commit_closers, fork_seed, is_repair_event
from sessionlog.core.vocabulary import SESSION_END_SEED, TURN_END, TURN_START
from sessionlog_server.service import access
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.taken_ids import fork_differences, session_exists
from sessionlog_server.storage.records import SessionRecord

if TYPE_CHECKING:
    from sessionlog_server.service.app import SessionLogService
    from sessionlog_server.service.leases import Grant

log = structlog.get_logger("sessionlog.lifecycle")

#: How far back a fork looks for the open turn's start, per read.
FORK_SCAN_PAGE = 256
#: How many pages a fork reads back at most before it loads the fold at the cut instead.
FORK_SCAN_PAGES = 4


@dataclass(frozen=True, slots=True)
class ResumeResult:
    """The state a resumed writer continues from (SPEC §8)."""

    record: SessionRecord
    lease_token: str
    """The resumed writer's lease token (returned to it, never stored)."""
    next_seq: int
    latest_header: dict[str, Any] | None
    latest_header_seq: int | None
    replace_generation: int
    repair_seqs: list[int]
    end_seed_seq: int
    last_turn: int
    """The last turn the log holds (0 when none): the harness's next turn is this plus one."""


@dataclass(frozen=True, slots=True)
class ForkResult:
    """A new fork and the `forked` repair events it got."""

    record: SessionRecord
    repair_seqs: list[int]


async def resume(
    service: SessionLogService,
    session_id: str,
    writer_id: str | None,
    *,
    takeover: bool,
    lease_token: str = "",
    request_id: str = "",
) -> ResumeResult:
    """Take the lease, complete an open turn, mark the seed boundary, return the state.

    A retry of a resume (its `request_id` again) whose first answer was lost finds the turn
    completed and the log ending with the seed boundary, so it writes nothing; its answer names
    the repairs the first call wrote (`_repairs_of_lease`), as the first answer did.
    """
    grant = await service.leases.grant_for_caller(
        session_id, writer_id, takeover=takeover, lease_token=lease_token, request_id=request_id
    )
    session_id = grant.record.id  # the session's key from here on
    record = grant.record
    wid, epoch = record.writer_id or "", record.epoch
    live = await service.live.get(session_id)
    async with live.lock:
        closers = live.fold.closers("interrupted")
        seed = [] if live.fold.ends_with_end_seed and not closers else [NewEvent(type=SESSION_END_SEED, data={})]
        committed = service.appends.plan_and_commit(live, wid, epoch, seed, service_events=closers)
    result = await committed
    if closers:
        service.metrics.repairs_written.labels("resume").inc()
    fold = live.fold
    header = fold.latest_header
    first = result.next_seq - len(seed) - len(closers)
    repair_seqs = list(range(first, first + len(closers)))
    end_seed_seq = result.seqs[0] if seed else fold.next_seq - 1
    if request_id and not seed:  # perhaps a retry: the first call's repairs, if it made any
        repair_seqs = await _repairs_of_lease(service, record, end_seed_seq)
    if closers:
        log.info("repaired on resume", **access.session_log_fields(session_id), seqs=repair_seqs)
    return ResumeResult(
        record=record,
        lease_token=grant.token,
        next_seq=result.next_seq,
        latest_header=header.header if header else None,
        latest_header_seq=header.seq if header else None,
        replace_generation=fold.replace_generation,
        repair_seqs=repair_seqs,
        end_seed_seq=end_seed_seq,
        last_turn=fold.last_turn,
    )


async def _repairs_of_lease(service: SessionLogService, record: SessionRecord, end_seed_seq: int) -> list[int]:
    """The seqs of the resume repairs written under the lease `record` holds, directly before
    the `session/end-seed` at `end_seed_seq`: what a resume under this lease wrote with it.

    A resume commits its repairs and the seed in one batch, so they are the `repair-interrupted-`
    events (`is_repair_event`) just before the seed, from where the lease began
    (`lease_since_seq`) on; a grant that began after the seed (not a retry) finds none. Read back
    a page at a time: a turn may have had many pending tool calls.
    """
    seqs: list[int] = []
    if record.lease_since_seq is not None:
        async for page in _PagesBack(service, record, end_seed_seq - 1, record.lease_since_seq):
            for event in reversed(page):
                if not is_repair_event(event, "interrupted"):
                    return seqs[::-1]
                seqs.append(event.seq)
    return seqs[::-1]


class _PagesBack:
    """The events of seqs `floor`..`high` read back from `high`: a page (`FORK_SCAN_PAGE`
    events, oldest first) at a time, the newest page first, at most `max_pages` pages. A class
    with `__anext__`, not an async generator: mypyc compiles no async generator (setup.py)."""

    def __init__(
        self, service: SessionLogService, record: SessionRecord, high: int, floor: int, max_pages: int | None = None
    ) -> None:
        self._service = service
        self._record = record
        self._high = high
        self._floor = floor
        self._pages_left = max_pages

    def __aiter__(self) -> _PagesBack:
        return self

    async def __anext__(self) -> list[Event]:
        if self._high < self._floor or self._pages_left == 0:
            raise StopAsyncIteration
        low = max(self._floor, self._high - FORK_SCAN_PAGE + 1)
        page = await self._service.reader.read(self._record, low, self._high, FORK_SCAN_PAGE)
        if self._pages_left is not None:
            self._pages_left -= 1
        self._high = low - 1
        return page


@dataclass(frozen=True, slots=True)
class RepairPass:
    """What one pass of `repair_abandoned` did."""

    repaired: list[str]
    """The sessions whose open turn it completed."""
    failed: int
    """Sessions it could not repair (a database error): a later pass must try them again."""


async def repair_abandoned(service: SessionLogService, *, expired_only: bool, concurrency: int = 8) -> RepairPass:
    """Complete the open turn of every session without a live writer (an indexed query).

    At start-up every such session is repaired; afterwards (`expired_only`) only sessions whose
    writer's lease lapsed mid-turn, so a writer that released its lease between steps on
    purpose is left alone until it resumes or the service restarts. Sessions are repaired
    `concurrency` at a time: their loads and commits overlap (the group committer shares the
    commits), so ten thousand open turns do not take ten thousand round trips one by one.
    """
    now = now_ms()
    candidates = await service.reader.run(service.recorder.sessions_to_repair, now)
    gate = asyncio.Semaphore(concurrency)
    trigger = "lease-expired" if expired_only else "start-up"
    failed: list[str] = []

    async def repair_one(record: SessionRecord) -> str | None:
        if expired_only and record.writer_id is None:
            return None
        async with gate:
            try:
                return record.id if await repair_session(service, record.id, trigger) else None
            except WriterHeld:
                return None  # a writer (or another instance) got there first
            except SessionLogError as exc:
                log.warning("repair failed", **access.session_log_fields(record.id, exc))
                failed.append(record.id)
                return None

    done = await asyncio.gather(*(repair_one(record) for record in candidates))
    return RepairPass(repaired=[sid for sid in done if sid is not None], failed=len(failed))


async def repair_session(service: SessionLogService, session_id: str, trigger: str = "sweep") -> bool:
    """Take the lease as the service, commit the closers, give the lease back."""

    async def commit(grant: Grant) -> bool:
        wid, epoch = grant.record.writer_id or "", grant.record.epoch
        live = await service.live.get(session_id)
        async with live.lock:
            closers = live.fold.closers("interrupted")
            if not closers:
                return False
            committed = service.appends.plan_and_commit(live, wid, epoch, [], service_events=closers)
        result = await committed
        service.repairs_written += 1
        service.metrics.repairs_written.labels(trigger).inc()
        log.info(
            "repaired abandoned turn",
            **access.session_log_fields(session_id),
            next_seq=result.next_seq,
            events=len(closers),
        )
        return True

    return await service.leases.repair_lease(session_id).around(commit)


async def fork(service: SessionLogService, source_id: str, at_seq: int, new_id: str | None) -> ForkResult:
    """A new session inheriting `source_id`'s events 0..at_seq (shared, not copied)."""
    access.require_write("ForkSession")
    source = await service.sessions.get_session(source_id)
    if source.next_seq == 0:  # whatever `at_seq` says: the catalogue's answer to this mistake
        raise ValidationError("EMPTY_SOURCE", f"session {source_id!r} has no events to fork")
    if at_seq >= source.next_seq:
        raise seq_not_found(source_id, at_seq, source.next_seq)
    child_id = new_id or str(uuid.uuid4())
    child_id = access.session_key(child_id, service.limits)
    seed, boundary_time = await _seed_at_cut(service, source, at_seq)
    events = commit_closers(seed, at_seq + 1, boundary_time)
    record = SessionRecord(
        id=child_id,
        namespace=source.namespace,
        create_time=now_ms(),
        cwd=source.cwd,
        metadata=source.metadata,
        metadata_text=source.metadata_text,
        parent_id=source.id,
        fork_seq=at_seq,
        next_seq=at_seq + 1 + len(events),
        last_time=boundary_time,
        writer_id=None,
        epoch=0,
        lease_expires_at=None,
        open_turn=False,
    )
    repair_seqs = [e.seq for e in events[1:]]
    try:
        created: SessionRecord | None = await service.committer.run_in_writer(
            service.recorder.create_session, record, events, quota=service.sessions.max_sessions_per_namespace
        )
    except AlreadyExists:  # SESSION_EXISTS, or INTEGRITY_ERROR: a fork or create at once elsewhere
        created = None  # read outside the handler: no await in one (docs/architecture/compiled-build.md)
    if created is None:
        made = await service.reader.session(child_id)
        differences = fork_differences(made, record)
        if differences:
            raise session_exists(child_id, "fork", differences)
        log.info(
            "fork asked for again",
            **access.session_log_fields(child_id),
            parent=access.public_id(source_id),
            fork_seq=at_seq,
        )
        return ForkResult(made, repair_seqs)
    # What the fork wrote goes to the taps as an append's batch does: the live OTLP export
    # sends the turn the fork cut (its `turn/end` of kind `forked`) from here.
    service.appends.tap_committed(child_id, events)
    log.info(
        "forked",
        **access.session_log_fields(child_id),
        parent=access.public_id(source_id),
        fork_seq=at_seq,
        repairs=len(repair_seqs),
    )
    return ForkResult(created, repair_seqs)


async def _seed_at_cut(service: SessionLogService, source: SessionRecord, at_seq: int) -> tuple[list[NewEvent], int]:
    """The fork's own first events (`fork_seed`) and the time of the event at the cut.

    The turn open at the cut is found by reading back from it to the nearest `turn/start` or
    `turn/end`, at most `FORK_SCAN_PAGES` pages: a cut a long way past the last turn boundary
    (a long open turn, or a long run of log-only events after the last turn) is seeded from
    the fold at the cut instead, which starts at the latest snapshot before it. Read back all
    the way, a fork of a session 100,000 log-only events past its last turn read them all
    (seconds, where a fork of a short session takes milliseconds).
    """
    window = await _open_turn_window(service, source, at_seq)
    if window is not None:
        boundary = window[-1]
        return fork_seed(window if window[0].type == TURN_START else [], boundary.time), boundary.time
    fold = (await service.loader.fold_at(source, at_seq)).fold
    return fork_seed(fold.structure, fold.last_time), fold.last_time


async def _open_turn_window(service: SessionLogService, source: SessionRecord, at_seq: int) -> list[Event] | None:
    """Events from the start of the turn open at `at_seq` (or just the event at `at_seq` when
    no turn is open there); None when no turn boundary (nor seq 0) lies within
    `FORK_SCAN_PAGES` pages before the cut."""
    window: list[Event] = []
    async for page in _PagesBack(service, source, at_seq, 0, FORK_SCAN_PAGES):
        window = page + window
        for event in reversed(page):
            if event.type == TURN_START:
                return window[window.index(event) :]
            if event.type == TURN_END:
                return window[-1:]
    return window[-1:] if window[0].seq == 0 else None  # read back to seq 0, or gave up
