"""The append pipeline: validate a batch, plan it on the live fold, commit it, publish it.

`AppendPipeline.start_append` validates and plans a batch under the session's lock and hands it
to the group committer; the returned future resolves once the batch is durable, so a streaming
writer pipelines (the next batch is planned on this one's effects while it commits). When the
commit returns, `_finish_append` counts, publishes to the session's subscribers and to the
commit taps, and acknowledges; a failed commit drops the live session instead (its fold
holds the batch), to be folded again from the log on next use. Repairs and header reports go
through `plan_and_commit` too, so every write of the service takes one path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sessionlog.convert import DecodedEvent
from sessionlog.core import validate
from sessionlog.core.errors import ExpectedSeqMismatch, OwnershipLost, SessionLogError, ValidationError
from sessionlog.core.events import Event, NewEvent, Replace
from sessionlog.core.limits import Limits
from sessionlog.core.surface import ReplacementChain
from sessionlog_server.service import access
from sessionlog_server.service.append import AppendPlan, plan_append, validate_proposals
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.leases import LeaseHolder
from sessionlog_server.service.limits import Charge, RateLimiter
from sessionlog_server.service.live import LiveSession, LiveSessions
from sessionlog_server.service.loader import SessionLoader, SnapshotPolicy
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.service.reader import EventReader
from sessionlog_server.service.subscriptions import SubscriptionHub
from sessionlog_server.storage.records import EventIdsStored, PendingBatch

CommitTap = Callable[[str, Sequence[Event]], None]


@dataclass(frozen=True, slots=True, init=False)
class AppendResult:
    """Seqs of an appended batch (original seqs for retried eventIds) and the next seq."""

    seqs: list[int]
    next_seq: int
    lease_expires_at: int = 0

    # Written out: one is built per batch (docs/architecture/compiled-build.md).
    def __init__(self, seqs: list[int], next_seq: int, lease_expires_at: int = 0) -> None:
        object.__setattr__(self, "seqs", seqs)
        object.__setattr__(self, "next_seq", next_seq)
        object.__setattr__(self, "lease_expires_at", lease_expires_at)


class AppendPipeline:
    """Every write of the service: validation, planning, group commit, publication."""

    def __init__(
        self,
        live: LiveSessions,
        committer: GroupCommitter,
        reader: EventReader,
        loader: SessionLoader,
        hub: SubscriptionHub,
        metrics: Metrics,
        rate_limiter: RateLimiter,
        snapshots: SnapshotPolicy,
        limits: Limits,
        *,
        lease_ttl_ms: int,
        blob_threshold: int,
    ) -> None:
        self.live = live
        self.committer = committer
        self.reader = reader
        self.loader = loader
        self.hub = hub
        self.metrics = metrics
        self.rate_limiter = rate_limiter
        self.snapshots = snapshots
        self.limits = limits
        self.lease_ttl_ms = lease_ttl_ms
        self.blob_threshold = blob_threshold
        self.commit_taps: list[CommitTap] = []
        """Called with every batch this process commits, after its subscribers, and with what a
        fork this process made wrote (`tap_committed`): the live OTLP export; must not block."""

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
        # Planning runs no further ahead of the commits than the backlog's bound (backlog.py).
        await self.committer.backlog.room()
        try:
            proposals = validate_proposals(decoded, self.limits)
            live = await self.live.get(holder.session_id)
            if live.inherited_ids is None:
                await self._remember_inherited(live, proposals)
            known = _known_seqs(live, proposals)
            if any(seq >= live.durable_next_seq for seq in known if seq is not None):
                # A retry of events whose batch is planned but not yet durable (the first try's
                # deadline ran out while it committed). Answered from memory now, it would be
                # acknowledged before it is durable, and lost if that commit then failed: it is
                # answered once the batch is settled, from the log again if it failed.
                await live.wait_idle()
                live = await self.live.get(holder.session_id)
                known = _known_seqs(live, proposals)
            await self._check_retries(live, proposals, known)
            # A retried event already stored appends nothing, so it is not charged again.
            fresh = known.count(None)
            raw = [d.raw for d in decoded]
            with self.rate_limiter.spending(live.record.namespace, fresh) as charge:  # given back if refused
                return await self._plan_retrying_stored(live, holder, proposals, expected_next_seq, raw, charge)
        except SessionLogError as exc:
            self.metrics.batches_refused.labels(exc.reason).inc()
            raise

    async def _plan_retrying_stored(
        self,
        live: LiveSession,
        holder: LeaseHolder,
        proposals: Sequence[NewEvent],
        expected_next_seq: int | None,
        raw: Sequence[bytes],
        charge: Charge,
    ) -> asyncio.Future[AppendResult]:
        try:
            return await self._plan_locked(live, holder, proposals, expected_next_seq, raw, charge)
        except (ValidationError, ExpectedSeqMismatch) as exc:
            # Handled below, outside the handler: no await in one, and the refusal raised by
            # name, not by a bare `raise` (docs/architecture/compiled-build.md).
            refused: ValidationError | ExpectedSeqMismatch = exc
        # A retry of events older than what the session remembers (a restarted service
        # remembers only the latest `RECENT_IDS`) is planned as new and may not fit the log
        # any more, nor start at the seq it expects: look its eventIds up, and plan it once
        # again. Refused on its expected seq instead, a writer's batches sent again after a
        # restart failed, each one stored.
        if not await self._remember_stored(live, proposals):
            if isinstance(refused, ValidationError):
                await self._explain_off_surface(live, proposals, refused)
            raise refused
        await self._check_retries(live, proposals, _known_seqs(live, proposals))
        return await self._plan_locked(live, holder, proposals, expected_next_seq, raw, charge)

    async def _plan_locked(
        self,
        live: LiveSession,
        holder: LeaseHolder,
        proposals: Sequence[NewEvent],
        expected_next_seq: int | None,
        raw: Sequence[bytes],
        charge: Charge,
    ) -> asyncio.Future[AppendResult]:
        async with live.lock:
            self.check_writer(live, holder.writer_id, holder.epoch)
            return self.plan_and_commit(
                live,
                holder.writer_id,
                holder.epoch,
                proposals,
                expected_next_seq=expected_next_seq,
                raw=raw,
                charge=charge,
            )

    async def _explain_off_surface(
        self, live: LiveSession, proposals: Sequence[NewEvent], exc: ValidationError
    ) -> None:
        """A replace refused because a seq it names is not on the surface: say which replace took
        that seq off, and which node stands for it now (`replaced_by`, the first), or that it is
        a log-only event. The fold keeps no record of what replaced what (its memory follows the
        surface), so the log tells: the fold at that seq (from a snapshot), then the surface
        operations after it, as light rows, until a replacing node on the surface now. Only
        this refusal reads them."""
        if exc.reason != "SURFACE_RANGE_NOT_FOUND":
            return
        index = int(exc.metadata.get("event_index", "-1"))
        op = proposals[index].surface_op if 0 <= index < len(proposals) else None
        if not isinstance(op, Replace):
            return
        fold = live.fold  # as before the refused batch
        gone = [seq for seq in (op.start_seq, op.end_seq) if seq < fold.next_seq and not fold.on_surface(seq)]
        if not gone:
            return  # an event of the refused batch itself
        record = live.record
        nodes = (await self.loader.fold_at(record, gone[0])).fold.surface_view()["nodes"]
        chain = ReplacementChain(gone[0], nodes, fold.on_surface)
        if not chain.done:
            async for page in self.reader.surface_ops(record, gone[0] + 1, fold.next_seq - 1):
                if chain.follow(page):
                    break
        if detail := chain.detail():
            exc.add_detail(detail, replaced_by=chain.chain[0] if chain.chain else None)

    async def _check_retries(
        self, live: LiveSession, proposals: Sequence[NewEvent], known: Sequence[int | None]
    ) -> None:
        """Each proposal whose eventId the log holds (`known`: its seq, durable by now) must be
        that event sent again (`validate.check_retry`), else the batch is refused with
        EVENT_ID_REUSED: answered with the stored event's seq, it would be acknowledged and
        never stored. Retries are rare (a lost answer), so reading their events costs nothing
        on the common path."""
        retried = [(index, seq) for index, seq in enumerate(known) if seq is not None]
        if not retried:
            return
        stored = {event.seq: event for event in await self.reader.read_at(live.record, [s for _, s in retried])}
        for index, seq in retried:
            event = stored.get(seq)
            if event is None:
                continue  # not readable (never the case for a durable seq): the commit's index decides
            try:
                validate.check_retry(proposals[index], event)
            except SessionLogError as exc:
                exc.name_event(index)
                raise

    async def _remember_inherited(self, live: LiveSession, proposals: Sequence[NewEvent]) -> None:
        """A fork whose inherited prefix carries more eventIds than it holds: look the batch's
        ids up in the prefix (the unique index answers only for the fork's own events), so a
        retry of an inherited event is answered with its seq instead of being appended again."""
        ids = [e.event_id for e in proposals if e.event_id is not None and live.known_seq(e.event_id) is None]
        found = await self.reader.find_event_ids(live.record, ids, inherited_only=True) if ids else {}
        for event_id, seq in found.items():
            live.remember(event_id, seq)

    async def _remember_stored(self, live: LiveSession, proposals: Sequence[NewEvent]) -> bool:
        """Look up the eventIds the session does not remember (the unique index); True when some
        are stored (now remembered, so planning answers them with their original seqs)."""
        unknown = live.unknown_ids([e.event_id for e in proposals if e.event_id is not None])
        found = await self.reader.find_event_ids(live.record, unknown) if unknown else {}
        for event_id, seq in found.items():
            live.remember(event_id, seq)
        return bool(found)

    def check_writer(self, live: LiveSession, writer_id: str, epoch: int) -> None:
        """Refuse a writer this instance knows was fenced out (the commit re-checks in SQL): by
        the holder it knows, or, once that holder gave the lease back, by a later epoch than the
        writer's. Without the second, a fenced writer's batch was checked against the new log
        first, and one invalid there (a turn/end of its own turn) was refused as invalid
        (NO_OPEN_TURN), as if the harness's events were wrong, not its lease lost."""
        held_by_another = live.writer_id is not None and (live.writer_id != writer_id or live.epoch != epoch)
        if held_by_another or epoch < live.epoch:
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
        charge: Charge | None = None,
    ) -> asyncio.Future[AppendResult]:
        """Plan a batch against the live fold and hand it to the group committer.

        Must run under `live.lock`. `service_events` (repair closers) are committed first, at
        the last event's time (SPEC §8); they take seqs but are not reported back. `charge` is
        the rate the batch spent: given back if the commit's fence refuses it as stale.
        """
        now = now_ms()
        # Before planning (which remembers the batch's ids): the ids memory cannot vouch for.
        unvouched = live.unknown_ids([e.event_id for e in proposals if e.event_id is not None])
        plan = plan_append(
            live,
            proposals,
            writer_id=writer_id,
            epoch=epoch,
            expected_next_seq=expected_next_seq,
            now=now,
            lease_expires_at=now + self.lease_ttl_ms,
            blob_threshold=self.blob_threshold,
            extra_first=service_events,
            raw=raw,
        )
        result: asyncio.Future[AppendResult] = self.committer.create_future()
        if plan.pending is None:
            # Every event was stored already: answered at once, with where the durable log ends,
            # not the fold's next seq, which counts batches still committing. A writer takes the
            # answer as acknowledged (`acknowledged_next_seq`): had one of those commits failed,
            # its next append would be refused as if the database had been restored.
            result.set_result(AppendResult(plan.seqs, live.durable_next_seq, now + self.lease_ttl_ms))
            return result
        pending = plan.pending
        # EventIds the recent set cannot vouch for are left to the events' unique index in the
        # commit: a stored one fails the batch with EVENT_IDS_STORED (`EventRecorder.after_refusal`
        # names their seqs), and the client's retry gets the original seqs.
        pending.verify_ids = unvouched
        try:
            self._maybe_snapshot(live, pending)
            self.committer.enqueue(
                pending, lambda error: self._finish_append(live, pending, plan, error, result, charge)
            )
        except BaseException:
            self.live.invalidate(live.session_id)  # planned into the fold, never committed
            raise
        live.begin_commit()
        return result

    def _maybe_snapshot(self, live: LiveSession, pending: PendingBatch) -> None:
        """Attach a fold snapshot to the batch when the policy says one is due: it is the state
        after this batch, committed in the batch's own transaction (never ahead of the log)."""
        live.events_since_snapshot += len(pending.events)
        live.bytes_since_snapshot += pending.payload_bytes
        if self.snapshots.due(live.events_since_snapshot, live.bytes_since_snapshot, live.fold.surface_size):
            pending.snapshot = self.snapshots.stored(live.session_id, live.fold)
            live.events_since_snapshot = live.bytes_since_snapshot = 0

    def _finish_append(
        self,
        live: LiveSession,
        pending: PendingBatch,
        plan: AppendPlan,
        error: SessionLogError | None,
        result: asyncio.Future[AppendResult],
        charge: Charge | None,
    ) -> None:
        """Once the commit's outcome is known: count, publish and acknowledge, or forget the
        batch (called by the committer on the event loop).

        The writer is answered whatever happens here: a durable batch is acknowledged even if
        publishing it failed (a bug, which the committer logs), and a failed one is refused.
        """
        live.end_commit()
        if error is not None:
            # Counted as the refusals before the commit are (`start_append`): a database that
            # fails (a full disk) shows in `sessionlog_batches_refused_total` by its reason.
            self.metrics.batches_refused.labels(error.reason).inc()
            if isinstance(error, ExpectedSeqMismatch) and charge is not None:
                # Planned on a fold another instance's commits left behind: nothing was written,
                # and a unary append is planned once more on the log as it stands, charged then
                # (`SessionLogService.append`); one call is charged once.
                charge.give_back()
            try:
                # The fold already holds this batch: drop it; the log is re-folded on next use.
                self.live.invalidate(live.session_id)
                if isinstance(error, EventIdsStored):
                    self.live.remember_later(live.session_id, error.found)
            finally:
                if not result.done():
                    result.set_exception(error)
            return
        try:
            if live.valid:
                live.durable_next_seq = max(live.durable_next_seq, pending.new_next_seq)
            self.metrics.batches_appended.inc()
            self.metrics.events_appended.inc(len(pending.events))
            self.metrics.batch_size.observe(len(pending.events))
            if self.commit_taps or self.hub.has_subscribers(live.session_id):  # else no one to hand events to
                committed_events = _with_stored_text(pending)
                self.hub.publish(live.session_id, committed_events, pending.stored_bytes, pending.committed_at)
                self.tap_committed(live.session_id, committed_events)
        finally:
            if not result.done():
                result.set_result(AppendResult(plan.seqs, pending.new_next_seq, pending.lease_expires_at))

    def tap_committed(self, session_id: str, events: Sequence[Event]) -> None:
        """Hand committed events of a session to the commit taps: a batch this pipeline
        committed, or the first events of a fork (its seed and the closers of the turn it cut),
        which ForkSession commits with the session itself, not through this pipeline."""
        for tap in self.commit_taps:
            tap(session_id, events)

    async def append(
        self, holder: LeaseHolder, expected_next_seq: int | None, decoded: Sequence[DecodedEvent]
    ) -> AppendResult:
        """Validate, commit and publish one batch; returns once it is durable."""
        future = await self.start_append(holder, expected_next_seq, decoded)
        return await future


def _known_seqs(live: LiveSession, proposals: Sequence[NewEvent]) -> list[int | None]:
    """Per proposal, the seq the session remembers for its eventId (None: new, or no eventId)."""
    return [None if e.event_id is None else live.known_seq(e.event_id) for e in proposals]


def _with_stored_text(pending: PendingBatch) -> list[Event]:
    """The batch's events carrying the exact data text they were stored with (when it holds
    the whole data: no blob strings taken out), so subscribers get the bytes readers get."""
    return [
        event if refs else event.with_data_text(text.decode("utf-8"))
        for event, (text, refs) in zip(pending.events, pending.stored, strict=True)
    ]


__all__ = ["AppendPipeline", "AppendResult", "CommitTap"]
