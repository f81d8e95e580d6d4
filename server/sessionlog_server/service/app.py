"""The sessionlog use cases, independent of gRPC: sessions, leases, appends, reads, tails.

`SessionLogService` owns the moving parts (recorder, group committer, live-session cache,
subscription hub) and exposes one coroutine per use case. The gRPC servicer converts
messages and calls these; tests and the benchmark can call them directly too.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from sessionlog.convert import DecodedEvent
from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import LimitExceeded, OwnershipLost, SessionLogError, Unavailable, ValidationError
from sessionlog.core.events import Event, NewEvent
from sessionlog_server.config import Settings
from sessionlog_server.service import access, subscriptions
from sessionlog_server.service.append import AppendPlan, plan_append, validate_proposals
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.leases import LeaseHolder, LeaseManager
from sessionlog_server.service.limits import RateLimiter
from sessionlog_server.service.live import RECENT_IDS, LiveSession, LiveSessions
from sessionlog_server.service.loader import SessionLoader, SnapshotPolicy
from sessionlog_server.service.messages import MessageCache
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.service.reader import EventReader
from sessionlog_server.service.subscriptions import SubscriptionHub
from sessionlog_server.storage.changes import ChangeFeed
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import PendingBatch, SessionRecord

log = structlog.get_logger("sessionlog.service")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
DEFAULT_READ_PAGE = 500


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Seqs of an appended batch (original seqs for retried eventIds) and the next seq."""

    seqs: list[int]
    next_seq: int
    lease_expires_at: int = 0


class SessionLogService:
    """Every sessionlog use case, on one recorder."""

    def __init__(self, recorder: EventRecorder, settings: Settings) -> None:
        self.settings = settings
        self.recorder = recorder
        self.limits = settings.limits
        self.metrics = Metrics()
        self.rate_limiter = RateLimiter(settings.max_events_per_second)
        self.reader = EventReader(recorder)
        self.committer = GroupCommitter(recorder, max_batches=settings.group_commit_max_batches, metrics=self.metrics)
        self.loader = SessionLoader(self.reader)
        self.snapshots = SnapshotPolicy(settings.snapshot_every_events, settings.snapshot_every_bytes)
        self.messages = MessageCache(self.reader, settings.message_cache_bytes)
        self.live = LiveSessions(self._load, settings.session_cache_size, settings.session_cache_bytes)
        self.hub = SubscriptionHub(settings.subscriber_buffer_bytes)
        self.changes: ChangeFeed | None = None
        self.commit_taps: list[Callable[[str, Sequence[Event]], None]] = []
        """Called with every batch this process commits, after its subscribers (the live OTLP
        export); must not block."""
        self.leases = LeaseManager(
            recorder,
            self.committer,
            self.reader,
            self.live,
            self.metrics,
            self.limits,
            catch_up=self.catch_up,
            ttl_ms=settings.lease_ttl_ms,
            known_capacity=settings.session_cache_size,
        )
        self.open_streams = 0
        self.repairs_written = 0
        self._keeper: asyncio.Task[None] | None = None
        self._repairer: asyncio.Task[None] | None = None
        self._startup_repair: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the commit loop and the lease keeper; complete turns left open by a crash."""

        self.committer.start()
        loop = asyncio.get_running_loop()
        if self.settings.repair_on_start:
            # Serving starts at once; open turns are completed meanwhile (a read may see a
            # session before its repair, as it would have seen it before the crash).
            self._startup_repair = loop.create_task(self._repair_at_start(), name="start-up-repair")
        self._keeper = loop.create_task(self.leases.keep_stream_leases(), name="lease-keeper")
        self._repairer = loop.create_task(self._repair_expired(), name="repairer")
        if self.recorder.shares_database(self.settings.workers):
            self.changes = self.recorder.change_feed()
            self.changes.start(loop, self.hub.poke, self.hub.watched)

    async def _repair_at_start(self) -> None:
        from sessionlog_server.service.lifecycle import repair_abandoned

        try:
            repaired = await repair_abandoned(self, expired_only=False)
        except SessionLogError as exc:
            log.warning("start-up repair failed; the expiry sweep retries", error=str(exc))
            return
        log.info("start-up repair done", sessions=len(repaired))

    async def stop(self) -> None:
        """Commit what is queued, release stream leases, stop background tasks."""
        for task in (self._startup_repair, self._keeper, self._repairer):
            if task is not None:
                task.cancel()
        if self.changes is not None:
            self.changes.stop()
        await self.committer.drain_and_stop()
        self.leases.release_stream_leases()
        self.reader.close()

    async def _load(self, session_id: str) -> LiveSession:
        """Load a session: its latest snapshot, then the events after it (trusted: validated
        when appended). A load that had to fold many events stores a snapshot at its head, so
        the next cold load is short."""
        record = await self.reader.session(session_id)
        loaded = await self.loader.fold_at(record)
        live = LiveSession(record=record, fold=loaded.fold, durable_next_seq=loaded.fold.next_seq)
        recent = await self.reader.run(self.recorder.recent_event_ids, record.id, RECENT_IDS + 1)
        for event_id, seq in reversed(recent):
            live.recent_ids[event_id] = seq
        live.ids_complete = len(recent) <= RECENT_IDS
        if loaded.folded_events >= self.snapshots.every_events and live.fold.next_seq > 0:
            stored = self.snapshots.stored(record.id, live.fold)
            try:
                await self.committer.run_in_writer(self.recorder.save_snapshot, stored)
            except SessionLogError as exc:  # a cache: the load stands without it
                log.warning("snapshot not stored", session_id=session_id, error=str(exc))
        return live

    async def catch_up(self, live: LiveSession, record: SessionRecord) -> None:
        """Fast-forward a cached session that another instance wrote to (under its lock, with
        nothing in flight): fold only the missing events, remember their eventIds."""
        if live.in_flight or live.fold.next_seq >= record.next_seq:
            return
        for event in await self.loader.catch_up(live.fold, record, record.next_seq - 1):
            if event.event_id is not None and event.seq > (-1 if record.fork_seq is None else record.fork_seq):
                live.remember(event.event_id, event.seq)
        live.durable_next_seq = live.fold.next_seq
        live.record = record

    # --- sessions -----------------------------------------------------------------------

    async def create_session(self, session_id: str | None, cwd: str | None, metadata: dict[str, Any]) -> SessionRecord:
        """Create an empty session in the caller's namespace (id generated when not given)."""
        access.require_write("CreateSession")
        namespace = access.current().namespace
        sid = session_id or str(uuid.uuid4())
        validate.check_session_id(sid, self.limits)
        validate.check_session_fields(cwd, len(jsonvalue.dumps_bytes(metadata)), self.limits)
        await self.check_session_quota(namespace)
        record = SessionRecord(
            id=sid,
            namespace=namespace,
            create_time=now_ms(),
            cwd=cwd,
            metadata=metadata,
            parent_id=None,
            fork_seq=None,
            next_seq=0,
            last_time=0,
            writer_id=None,
            epoch=0,
            lease_expires_at=None,
            open_turn=False,
        )
        return await self.committer.run_in_writer(self.recorder.create_session, record)

    def open_stream(self) -> None:
        """Count a writer or subscription stream in; refuse past `max_open_streams`."""
        limit = self.settings.max_open_streams
        if limit and self.open_streams >= limit:
            raise LimitExceeded(
                "TOO_MANY_STREAMS", f"this instance already serves its limit of {limit} open streams", limit=limit
            )
        self.open_streams += 1

    def close_stream(self) -> None:
        self.open_streams -= 1

    async def check_session_quota(self, namespace: str) -> None:
        quota = self.settings.max_sessions_per_namespace
        if quota and await self.reader.run(self.recorder.count_sessions, namespace) >= quota:
            raise LimitExceeded(
                "SESSION_QUOTA_EXCEEDED",
                f"namespace {namespace!r} already holds its limit of {quota} sessions",
                limit=quota,
                namespace=namespace,
            )

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session, if it exists in the caller's namespace."""
        validate.check_session_id(session_id, self.limits)
        record = await self.reader.session(session_id)
        access.check_namespace(session_id, record.namespace)
        return record

    async def list_sessions(
        self, page_size: int, page_token: str, parent_id: str | None
    ) -> tuple[list[SessionRecord], str]:
        """One page of the caller's sessions and the token of the next page ('' on the last)."""
        namespace = access.current().namespace
        if page_size < 0:
            raise ValidationError("BAD_PAGE_SIZE", "page_size must not be negative", field="page_size")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = _decode_page_token(page_token) if page_token else None
        records = await self.reader.run(self.recorder.list_sessions, namespace, size + 1, after, parent_id)
        more = len(records) > size
        records = records[:size]
        token = _encode_page_token(records[-1]) if more else ""
        return records, token

    # --- background tasks ---------------------------------------------------------------

    async def _repair_expired(self) -> None:
        """Complete the open turn of sessions whose writer's lease lapsed (SPEC §8)."""
        from sessionlog_server.service.lifecycle import repair_abandoned

        interval = max(self.settings.lease_ttl_ms / 2000, 0.1)
        while True:
            await asyncio.sleep(interval)
            try:
                await repair_abandoned(self, expired_only=True)
            except SessionLogError as exc:
                log.warning("repair sweep failed", error=str(exc))

    # --- appends ------------------------------------------------------------------------

    async def start_append(
        self,
        holder: LeaseHolder,
        expected_next_seq: int | None,
        decoded: Sequence[DecodedEvent],
    ) -> asyncio.Future[AppendResult]:
        """Validate and queue a batch under a proven lease; the future resolves once it is durable.

        Splitting the two lets a streaming writer pipeline: the next batch is validated
        against this one's effects while this one is still being committed.
        """
        access.require_write("appending")
        access.check_namespace(holder.session_id, holder.namespace)
        try:
            proposals = validate_proposals(decoded, self.limits)
            live = await self.live.get(holder.session_id)
            await self._look_up_ids(live, proposals)
            # A retried event already stored appends nothing, so it is not charged again.
            fresh = sum(1 for e in proposals if e.event_id is None or live.known_seq(e.event_id) is None)
            self.rate_limiter.take(live.record.namespace, fresh)
            async with live.lock:
                self.check_writer(live, holder.writer_id, holder.epoch)
                return self.plan_and_commit(
                    live,
                    holder.writer_id,
                    holder.epoch,
                    proposals,
                    expected_next_seq=expected_next_seq,
                    raw=[d.raw for d in decoded],
                )
        except SessionLogError as exc:
            self.metrics.batches_refused.labels(exc.reason).inc()
            raise

    async def _look_up_ids(self, live: LiveSession, proposals: Sequence[NewEvent]) -> None:
        """Find the stored seqs of eventIds the recent set cannot answer for: one indexed lookup
        per batch, and none at all while the recent set is complete. Found ids are remembered,
        so planning (under the lock) answers a retry with its original seq."""
        unknown = live.unknown_ids([e.event_id for e in proposals if e.event_id is not None])
        if unknown:
            for event_id, seq in (await self.reader.find_event_ids(live.record, unknown)).items():
                live.remember(event_id, seq)

    def check_writer(self, live: LiveSession, writer_id: str, epoch: int) -> None:
        """Refuse a writer this instance knows was fenced out (the commit re-checks in SQL)."""
        if live.writer_id is not None and (live.writer_id != writer_id or live.epoch != epoch):
            raise OwnershipLost(
                "OWNERSHIP_LOST",
                f"writer {writer_id!r} (epoch {epoch}) no longer holds session {live.session_id!r}; reopen the writer",
                session_id=live.session_id,
                epoch=live.epoch,
                holder=live.writer_id,
            )

    def plan_and_commit(
        self,
        live: LiveSession,
        writer_id: str,
        epoch: int,
        proposals: Sequence[NewEvent],
        *,
        expected_next_seq: int | None = None,
        service_events: Sequence[NewEvent] = (),
        raw: Sequence[bytes] | None = None,
    ) -> asyncio.Future[AppendResult]:
        """Plan a batch against the live fold and hand it to the group committer.

        Must run under `live.lock`. `service_events` (repair closers) are committed first, at
        the last event's time (SPEC §8); they take seqs but are not reported back.
        """
        now = now_ms()
        plan = plan_append(
            live,
            proposals,
            writer_id=writer_id,
            epoch=epoch,
            expected_next_seq=expected_next_seq,
            now=now,
            lease_expires_at=now + self.settings.lease_ttl_ms,
            blob_threshold=self.settings.blob_threshold_bytes,
            extra_first=service_events,
            raw=raw,
        )
        loop = asyncio.get_running_loop()
        result: asyncio.Future[AppendResult] = loop.create_future()
        if plan.pending is None:
            result.set_result(AppendResult(plan.seqs, live.fold.next_seq, now + self.settings.lease_ttl_ms))
            return result
        pending = plan.pending
        self._maybe_snapshot(live, pending)
        try:
            done = self.committer.enqueue(pending)
        except SessionLogError:
            self.live.invalidate(live.session_id)  # planned into the fold, never committed
            raise
        live.begin_commit()
        done.add_done_callback(lambda committed: self._finish_append(live, pending, plan, committed, result))
        return result

    def _maybe_snapshot(self, live: LiveSession, pending: PendingBatch) -> None:
        """Attach a fold snapshot to the batch when the policy says one is due: it is the state
        after this batch, committed in the batch's own transaction (never ahead of the log)."""
        live.events_since_snapshot += len(pending.events)
        live.bytes_since_snapshot += sum(len(text) for text, _ in pending.stored)
        if self.snapshots.due(live.events_since_snapshot, live.bytes_since_snapshot, live.fold.surface_size):
            pending.snapshot = self.snapshots.stored(live.session_id, live.fold)
            live.events_since_snapshot = live.bytes_since_snapshot = 0

    def _finish_append(
        self,
        live: LiveSession,
        pending: PendingBatch,
        plan: AppendPlan,
        committed: asyncio.Future[None],
        result: asyncio.Future[AppendResult],
    ) -> None:
        """Once durable: trim the fold's journal, count, publish, acknowledge (a callback, no task)."""
        live.end_commit()
        error = committed.exception() if not committed.cancelled() else Unavailable("COMMIT_CANCELLED", "cancelled")
        if error is not None:
            # The fold already holds this batch: drop it; the log is re-folded on next use.
            self.live.invalidate(live.session_id)
            if not result.done():
                result.set_exception(error)
            return
        if live.valid and plan.checkpoint is not None:
            live.fold.release(plan.checkpoint)  # durable: its undo journal is no longer needed
            live.durable_next_seq = max(live.durable_next_seq, pending.new_next_seq)
        self.metrics.batches_appended.inc()
        self.metrics.events_appended.inc(len(pending.events))
        self.metrics.batch_size.observe(len(pending.events))
        committed_events = _with_stored_text(pending)
        self.hub.publish(live.session_id, committed_events, sum(len(text) for text, _ in pending.stored))
        for tap in self.commit_taps:
            tap(live.session_id, committed_events)
        if not result.done():
            result.set_result(AppendResult(plan.seqs, pending.new_next_seq, pending.lease_expires_at))

    async def append(
        self, holder: LeaseHolder, expected_next_seq: int | None, decoded: Sequence[DecodedEvent]
    ) -> AppendResult:
        """Validate, commit and publish one batch; returns once it is durable."""
        future = await self.start_append(holder, expected_next_seq, decoded)
        return await future

    # --- reads --------------------------------------------------------------------------

    async def read_events(
        self, session_id: str, from_seq: int, to_seq: int | None, page_size: int
    ) -> AsyncIterator[list[Event]]:
        """Pages of events in seq order, each at most `page_size` events and about
        `read_page_bytes` of payload."""
        if page_size < 0:
            raise ValidationError("BAD_PAGE_SIZE", "page_size must not be negative", field="page_size")
        record = await self.get_session(session_id)
        if to_seq is not None and to_seq >= record.next_seq:
            to_seq = record.next_seq - 1
        size = min(page_size or DEFAULT_READ_PAGE, 10_000)
        seq = from_seq
        while to_seq is None or seq <= to_seq:
            events = await self.reader.read(record, seq, to_seq, size)
            if not events:
                return
            yield events
            seq = events[-1].seq + 1
            if len(events) < size:
                return

    async def subscribe(self, session_id: str, from_seq: int) -> AsyncIterator[list[Event] | int]:
        """Replay from `from_seq`, then the next seq (the caught-up marker), then live batches."""
        record = await self.get_session(session_id)
        poll_s = self.settings.subscription_poll_ms / 1000
        async for item in subscriptions.follow(self.hub, self.reader, self.metrics, record, from_seq, poll_s):
            yield item


def _with_stored_text(pending: PendingBatch) -> list[Event]:
    """The batch's events carrying the exact data text they were stored with (when it holds
    the whole data: no blob strings taken out), so subscribers get the bytes readers get."""
    return [
        event if refs else replace(event, data_text=text)
        for event, (text, refs) in zip(pending.events, pending.stored, strict=True)
    ]


def _encode_page_token(record: SessionRecord) -> str:
    raw = jsonvalue.dumps_bytes([record.create_time, record.id])
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _decode_page_token(token: str) -> tuple[int, str]:
    try:
        created, sid = jsonvalue.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        if type(created) is not int or not 0 <= created < 2**63 or not isinstance(sid, str):
            raise ValueError(token)  # (a bool is an int to isinstance, and reached SQL as one)
    except (ValueError, TypeError, SessionLogError):
        raise ValidationError(
            "BAD_PAGE_TOKEN", "page_token is not a token this service issued", field="page_token"
        ) from None
    return created, sid
