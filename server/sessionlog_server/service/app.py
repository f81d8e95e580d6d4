"""The composition root of the sessionlog use cases, independent of gRPC.

`SessionLogService` builds the parts, each with its dependencies passed in explicitly, and
runs the background tasks:

- `sessions` (`SessionDirectory`): session rows of the caller's namespace;
- `leases` (`LeaseManager`): writer leases, tokens, stream leases;
- `appends` (`AppendPipeline`): validate, plan on the live fold, group commit, publish;
- `live` (`LiveSessions`) loaded and kept current by `loading` (`LiveSessionLoader`);
- `messages` (`MessageCache`), `reader` (`EventReader`), `hub` (`SubscriptionHub`).

Projections, lifecycle (resume, fork, repair), header reports and the writer-stream protocol
are functions over these parts. Transport only translates messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING

import structlog

from sessionlog.convert import DecodedEvent
from sessionlog.core.errors import ExpectedSeqMismatch, LimitExceeded, SessionLogError, ValidationError
from sessionlog.core.events import Event
from sessionlog_server.config import Settings
from sessionlog_server.service import access, subscriptions
from sessionlog_server.service.acknowledged import check_acknowledged
from sessionlog_server.service.appends import AppendPipeline, AppendResult
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.leases import LeaseHolder, LeaseManager
from sessionlog_server.service.limits import RateLimiter
from sessionlog_server.service.live import LiveSessions
from sessionlog_server.service.loader import LiveSessionLoader, SessionLoader, SnapshotPolicy, SnapshotStore
from sessionlog_server.service.messages import MessageCache
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.service.reader import EventReader, check_from_seq
from sessionlog_server.service.sessions import SessionDirectory
from sessionlog_server.service.subscriptions import SubscriptionHub
from sessionlog_server.storage.changes import ChangeFeed
from sessionlog_server.storage.recorder import EventRecorder

if TYPE_CHECKING:
    from sessionlog_server.service.writer_stream import WriterStream

log = structlog.get_logger("sessionlog.service")

DEFAULT_READ_PAGE = 500

__all__ = ["AppendResult", "SessionLogService"]


class SessionLogService:
    """Every sessionlog use case, on one recorder: the parts and the background tasks."""

    def __init__(self, recorder: EventRecorder, settings: Settings) -> None:
        self.settings = settings
        self.recorder = recorder
        self.shares_database = recorder.shares_database(settings.workers)
        """Whether other processes (instances, workers) write this database too: then what this
        one cached of a session may be behind the log."""
        self.limits = settings.limits
        self.metrics = Metrics()
        self.reader = EventReader(recorder, origins=settings.session_cache_size)
        self.committer = GroupCommitter(
            recorder,
            max_batches=settings.group_commit_max_batches,
            backlog_bytes=settings.commit_backlog_bytes,
            metrics=self.metrics,
        )
        self.snapshots = SnapshotPolicy(settings.snapshot_every_events, settings.snapshot_every_bytes)
        self.loader = SessionLoader(self.reader, SnapshotStore(self.snapshots, recorder, self.committer))
        self.loading = LiveSessionLoader(self.loader, self.reader, recorder)
        self.messages = MessageCache(self.reader, settings.message_cache_bytes)
        self.live = LiveSessions(self.loading.load, settings.session_cache_size, settings.session_cache_bytes)
        self.hub = SubscriptionHub(settings.subscriber_buffer_bytes)
        self.sessions = SessionDirectory(
            recorder,
            self.reader,
            self.committer,
            self.limits,
            max_sessions_per_namespace=settings.max_sessions_per_namespace,
        )
        self.appends = AppendPipeline(
            self.live,
            self.committer,
            self.reader,
            self.loader,
            self.hub,
            self.metrics,
            RateLimiter(settings.max_events_per_second),
            self.snapshots,
            self.limits,
            lease_ttl_ms=settings.lease_ttl_ms,
            blob_threshold=settings.blob_threshold_bytes,
        )
        self.leases = LeaseManager(
            recorder,
            self.committer,
            self.reader,
            self.live,
            self.metrics,
            self.limits,
            catch_up=self.loading.catch_up,
            ttl_ms=settings.lease_ttl_ms,
            known_capacity=settings.session_cache_size,
        )
        self.changes: ChangeFeed | None = None
        self.writer_streams: set[WriterStream] = set()
        """Open writer streams, ended at once when the service stops (so shutdown need not wait
        out its grace period for writers that send nothing)."""
        self.open_streams = 0
        self.namespace_streams: dict[str, int] = {}
        """Open streams by namespace (only namespaces holding some)."""
        self.repairs_written = 0
        self._keeper: asyncio.Task[None] | None = None
        self._repairer: asyncio.Task[None] | None = None
        self._startup_repair: asyncio.Task[None] | None = None
        self._full_repair_due = settings.repair_on_start
        """A start-up repair pass (every session with an open turn and no live writer) is still
        owed: set until one completes without a failure."""

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
        if self.shares_database:
            self.changes = self.recorder.change_feed()
            self.changes.start(loop, self.hub.poke, self.hub.watched, self.hub.followed)

    async def _repair_at_start(self) -> None:
        """Complete the open turns no writer holds, once the leases that lapsed while the
        service was down have had one more lease time to live (`recorder.extend_lapsed_leases`):
        their writers, reconnecting, take them again, and the sweep repairs those that do not."""
        from sessionlog_server.service.lifecycle import repair_abandoned

        try:
            extended = await self.committer.run_in_writer(
                self.recorder.extend_lapsed_leases, now=now_ms(), ttl_ms=self.settings.lease_ttl_ms
            )
            if extended:
                log.info("leases that lapsed while the service was down extended", sessions=extended)
            done = await repair_abandoned(self, expired_only=False)
        except SessionLogError as exc:
            log.warning("start-up repair failed; the repair sweep retries it", error=str(exc))
            return
        if done.failed:
            log.warning("start-up repair incomplete; the repair sweep retries it", failed=done.failed)
            return
        self._full_repair_due = False
        log.info("start-up repair done", sessions=len(done.repaired))

    def end_streams(self) -> None:
        """Shutdown begins: every open writer stream acknowledges what it has and ends with
        `SHUTTING_DOWN`, and so does every subscription (at once: the log keeps what it was
        not sent). Neither ends on its own, so each left open held the stop for its grace.

        The repairs stop here too: the lease of a stream ended here stays live for its writer's
        reconnect to the next start, and a sweep in the stop's grace found it lapsed (a lease
        shorter than the grace) and completed the writer's open turn as interrupted."""
        for task in (self._startup_repair, self._repairer):
            if task is not None:
                task.cancel()
        for stream in list(self.writer_streams):
            stream.end_for_shutdown()
        self.hub.end_all()

    async def stop(self) -> None:
        """Commit what is queued, stop background tasks (open writer streams' leases stay live
        for their writers' reconnects: see `WriterStream.end_for_shutdown`)."""
        for task in (self._startup_repair, self._keeper, self._repairer):
            if task is not None:
                task.cancel()
        if self.changes is not None:
            self.changes.stop()
        await self.committer.drain_and_stop()
        self.reader.close()

    # --- streams ------------------------------------------------------------------------

    def open_stream(self) -> str:
        """Count a writer or subscription stream of the caller in; refuse past `max_open_streams`,
        or past its namespace's share (`max_open_streams_per_namespace`), so one tenant holding
        streams open cannot leave another none. Returns the namespace `close_stream` takes."""
        namespace = access.current().namespace
        limit = self.settings.max_open_streams
        if limit and self.open_streams >= limit:
            raise LimitExceeded(
                "TOO_MANY_STREAMS", f"this instance already serves its limit of {limit} open streams", limit=limit
            )
        share, held = self.settings.max_open_streams_per_namespace, self.namespace_streams.get(namespace, 0)
        if share and held >= share:
            raise LimitExceeded(
                "TOO_MANY_NAMESPACE_STREAMS",
                f"namespace {namespace!r} already holds its limit of {share} open streams on this instance",
                limit=share,
                namespace=namespace,
            )
        self.open_streams += 1
        self.namespace_streams[namespace] = held + 1
        return namespace

    def close_stream(self, namespace: str) -> None:
        """Count out a stream `open_stream` counted in for `namespace`."""
        self.open_streams -= 1
        held = self.namespace_streams.pop(namespace) - 1
        if held:
            self.namespace_streams[namespace] = held

    # --- background tasks ---------------------------------------------------------------

    async def _repair_expired(self) -> None:
        """Complete the open turn of sessions whose writer's lease lapsed (SPEC §8); while the
        start-up repair has not completed every session it found (a database error), each pass
        is a start-up pass, so a session released mid-turn before the crash is not left open
        until the next restart."""
        from sessionlog_server.service.lifecycle import repair_abandoned

        interval = max(self.settings.lease_ttl_ms / 2000, 0.1)
        while True:
            await asyncio.sleep(interval)
            if self._startup_repair is not None and not self._startup_repair.done():
                continue  # the start-up pass is still at work
            full = self._full_repair_due
            try:
                done = await repair_abandoned(self, expired_only=not full)
            except SessionLogError as exc:
                log.warning("repair sweep failed", error=str(exc))
                continue
            if full and not done.failed:
                self._full_repair_due = False
                log.info("start-up repair done by the sweep", sessions=len(done.repaired))

    # --- unary writes -------------------------------------------------------------------

    async def append(
        self,
        holder: LeaseHolder,
        expected_next_seq: int | None,
        decoded: Sequence[DecodedEvent],
        acknowledged_next_seq: int | None = None,
    ) -> AppendResult:
        """A unary append (`AppendEvents`): validate, commit, publish; returns once durable.

        It is planned on this process's fold of the session, which the same lease holder's
        calls to another instance may have left behind: the commit's fence then refuses it
        (EXPECTED_SEQ_MISMATCH, nothing written), or the writer's own expected seq, right about
        the log, disagrees with the stale fold. So on a shared database a mismatch brings the
        fold to the session's row and plans the batch once more; one that stands is the writer's.
        So does a batch the stale fold refuses as invalid (a `turn/end` of a turn another
        instance started under the lease: NO_OPEN_TURN), when the row shows the fold was behind;
        it was refused, not retryable, on every try, while valid on the log.
        A writer that saw acknowledgements past the log is refused first (`_check_acknowledged`).
        """
        await self._check_acknowledged(holder, acknowledged_next_seq)
        try:
            return await self.appends.append(holder, expected_next_seq, decoded)
        except (ExpectedSeqMismatch, ValidationError) as exc:
            if not self.shares_database:
                raise
            refused = exc  # raised by name below, after the awaits (compiled-build.md)
        caught_up = await self.leases.refresh(holder)
        if isinstance(refused, ValidationError) and not caught_up:
            raise refused  # planned on the log as it stands: the batch is invalid
        return await self.appends.append(holder, expected_next_seq, decoded)

    async def _check_acknowledged(self, holder: LeaseHolder, acknowledged: int | None) -> None:
        """Refuse a unary writer that saw events acknowledged past the log (a restored database:
        `check_acknowledged`), before anything of its batch is planned.

        The log's next seq is the fold's: what this process planned is at or past every seq it
        acknowledged, so batches still in flight under the lease never make it refuse. On a
        shared database the writer's calls to other instances may have left the fold behind:
        it is brought to the session's row before a refusal, which would release the lease.
        """
        if acknowledged is None:
            return
        live = await self.live.get(holder.session_id)
        if acknowledged > live.fold.next_seq and self.shares_database:
            await self.leases.refresh(holder)
            live = await self.live.get(holder.session_id)
        try:
            await check_acknowledged(self.leases, holder, acknowledged, live.fold.next_seq)
        except SessionLogError as exc:
            self.metrics.batches_refused.labels(exc.reason).inc()  # counted as the pipeline's refusals
            raise

    # --- reads --------------------------------------------------------------------------

    async def read_events(
        self, session_id: str, from_seq: int, to_seq: int | None, page_size: int
    ) -> AsyncGenerator[list[Event], None]:
        """Pages of events in seq order, each at most `page_size` events and about
        `read_page_bytes` of payload; none from the head, FROM_SEQ_PAST_HEAD from past it."""
        if page_size < 0:
            raise ValidationError("BAD_PAGE_SIZE", "page_size must not be negative", field="page_size")
        record = await self.sessions.get_session(session_id)
        check_from_seq(record, from_seq, "read")
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
        record = await self.sessions.get_session(session_id)
        poll_s = self.settings.subscription_poll_ms / 1000
        async for item in subscriptions.follow(
            self.hub, self.reader, self.live.committing, self.metrics, record, from_seq, poll_s
        ):
            yield item
            del item  # a quiet subscription holds none of the events it was sent
