"""Loading a session's fold: the latest usable snapshot at or before a seq, then its tail.

This is how every session is brought into memory (a live session on first use, a projection at
an old `at_seq`, a fork's inherited prefix): never the whole log in a list, never a refold from
seq 0 when a snapshot exists. The tail after the snapshot is read and folded page by page, so a
load holds at most one page of events plus the snapshot. A cached session that fell behind the
database (another instance wrote) folds only the missing events (`catch_up`).

When to store a snapshot is decided by `SnapshotPolicy`, in one place: after
`snapshot_every_events` events, or an eighth of the surface's nodes when that is more (a
snapshot costs O(surface), so on a large surface they are spaced out to keep the stored bytes
proportional to the log), or after `snapshot_every_bytes` of payload.

A load that has to fold a long stretch of the log (no usable snapshot near the wanted seq: a
fold-version bump made every stored one stale, or none was ever taken) stores snapshots on its
way at the policy's spacing (`SnapshotStore`), so the next read anywhere in that stretch starts
near it: by both its rules, the bytes counted from what each event's data takes in storage
(`Event.stored_size`: its row's text and the blobs it references). A stored snapshot the load
cannot use (damaged) is deleted, so the next one taken at its seq replaces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from sessionlog.core.errors import SessionLogError
from sessionlog.core.events import Event
from sessionlog.core.fold import SessionFold
from sessionlog.core.snapshot import FOLD_VERSION, SnapshotUnusable, decode_snapshot, encode_snapshot
from sessionlog_server.service import access
from sessionlog_server.service.committer import GroupCommitter
from sessionlog_server.service.live import INHERITED_IDS, RECENT_IDS, LiveSession
from sessionlog_server.service.reader import EventReader, Segment, segment_of
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import SessionRecord, StoredSnapshot

log = structlog.get_logger("sessionlog.loader")

LOAD_PAGE_EVENTS = 1000
"""Events read and folded per page while loading."""


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a fold is worth snapshotting again (see the module docstring)."""

    every_events: int
    every_bytes: int

    def due(self, events_since: int, bytes_since: int, surface_nodes: int) -> bool:
        """Whether `events_since` events (`bytes_since` payload bytes) call for a new snapshot."""
        spacing = surface_nodes // 8
        if events_since >= max(self.every_events, spacing):
            return True
        return bytes_since >= self.every_bytes and events_since >= spacing

    @staticmethod
    def stored(session_id: str, fold: SessionFold) -> StoredSnapshot:
        """The snapshot of `fold` as stored under `session_id` (at the fold's last seq)."""
        return StoredSnapshot(session_id, fold.next_seq - 1, FOLD_VERSION, encode_snapshot(fold.snapshot()))


@dataclass(frozen=True, slots=True)
class SnapshotStore:
    """Where a long load keeps the snapshots it takes on its way: the writer thread, in queue
    order with the commits. A cache: a write that fails is logged and the load goes on."""

    policy: SnapshotPolicy
    recorder: EventRecorder
    committer: GroupCommitter

    async def save(self, snapshots: list[StoredSnapshot]) -> None:
        """Store `snapshots` in one transaction (one replaces a stale one at its seq)."""
        try:
            await self.committer.run_in_writer(self.recorder.save_snapshots, snapshots)
        except SessionLogError as exc:
            log.warning("snapshot not stored", **access.session_log_fields(snapshots[0].session_id, exc))

    async def discard(self, unusable: list[StoredSnapshot]) -> None:
        """Delete snapshots a load found unusable, so the next one taken at their seq replaces
        them (`EventRecorder.discard_snapshots`); in queue order, before the load's own saves."""
        try:
            await self.committer.run_in_writer(self.recorder.discard_snapshots, unusable)
        except SessionLogError as exc:
            log.warning("snapshot not discarded", **access.session_log_fields(unusable[0].session_id, exc))


@dataclass(slots=True)
class Loaded:
    """A fold of a log prefix and what loading it cost."""

    fold: SessionFold
    folded_events: int
    """Events folded after the snapshot (or from seq 0 when none was usable)."""
    snapshot_seq: int | None
    """The seq of the snapshot the load started from, if any."""
    stored_snapshots: int = 0
    """Snapshots the load stored on its way (`SnapshotStore`)."""
    events_since_snapshot: int = 0
    """Events of the fold after its latest snapshot (one it stored, else the one it started from)."""
    bytes_since_snapshot: int = 0
    """The stored bytes of those events' data (`Event.stored_size`)."""


class SessionLoader:
    """Builds message-less folds of a session's log from snapshots and pages of events; with a
    `store`, a long fold stores snapshots on its way (see the module docstring)."""

    def __init__(
        self, reader: EventReader, store: SnapshotStore | None = None, *, page_events: int = LOAD_PAGE_EVENTS
    ) -> None:
        self.reader = reader
        self.store = store
        self.page_events = page_events

    async def fold_at(self, record: SessionRecord, at_seq: int | None = None) -> Loaded:
        """The fold of the session's log up to `at_seq` (inclusive; None = the head)."""
        target = record.next_seq - 1 if at_seq is None else at_seq
        fold, snapshot_seq, unusable = await self._start(record, target)
        if unusable and self.store is not None:
            await self.store.discard(unusable)
        loaded = Loaded(fold, 0, snapshot_seq)
        segments = await self.reader.segments(record) if self.store is not None and target >= 0 else []
        loop = asyncio.get_running_loop()
        taken: list[StoredSnapshot] = []
        saving: asyncio.Future[None] | None = None
        async for page in self.reader.pages(record, fold.next_seq, target, self.page_events):
            taken += await loop.run_in_executor(None, self._fold_page, loaded, page, segments)
            if taken and self.store is not None and (saving is None or saving.done()):
                # Stored as the load goes, while it folds on (one write at a time, the snapshots
                # taken meanwhile in the next): a read whose deadline ends before a refold of a
                # long log does leaves its retry a shorter one.
                saving = asyncio.ensure_future(self.store.save(taken))
                loaded.stored_snapshots += len(taken)
                taken = []
        if saving is not None:
            await saving
        if taken and self.store is not None:
            await self.store.save(taken)
            loaded.stored_snapshots += len(taken)
        return loaded

    def _fold_page(self, loaded: Loaded, page: list[Event], segments: list[Segment]) -> list[StoredSnapshot]:
        """Fold `page` onto the load (on an executor thread); with a store, return the
        snapshots the policy calls for on the way, each under the session whose rows hold its
        seq (a fork's inherited prefix is its ancestor's, where every fork of it finds them)."""
        fold = loaded.fold
        loaded.folded_events += len(page)
        sizes = [event.stored_size or 0 for event in page]
        if self.store is None:
            fold.extend(page)
            loaded.events_since_snapshot += len(page)
            loaded.bytes_since_snapshot += sum(sizes)
            return []
        policy = self.store.policy
        taken: list[StoredSnapshot] = []
        index = 0
        while index < len(page):
            # None is due before `every_events` events or `every_bytes` bytes: fold up to the
            # first of those in one call.
            stop = min(len(page), index + max(1, policy.every_events - loaded.events_since_snapshot))
            room = policy.every_bytes - loaded.bytes_since_snapshot
            end = index
            while end < stop and room > 0:
                room -= sizes[end]
                end += 1
            end = max(end, index + 1)
            fold.extend(page[index:end])
            loaded.events_since_snapshot += end - index
            loaded.bytes_since_snapshot += sum(sizes[index:end])
            index = end
            if policy.due(loaded.events_since_snapshot, loaded.bytes_since_snapshot, fold.surface_size):
                owner = segment_of(segments, fold.next_seq - 1).session_id
                taken.append(policy.stored(owner, fold))
                loaded.events_since_snapshot = loaded.bytes_since_snapshot = 0
        return taken

    async def fold_pages(self, fold: SessionFold, record: SessionRecord, to_seq: int) -> AsyncIterator[list[Event]]:
        """Fold the events after the fold's head up to `to_seq` onto it, a page at a time (a
        load's tail, a fast-forward); yields each page once folded. Only for a fold with no
        batch in flight."""
        loop = asyncio.get_running_loop()
        async for page in self.reader.pages(record, fold.next_seq, to_seq, self.page_events):
            await loop.run_in_executor(None, fold.extend, page)
            yield page

    async def _start(self, record: SessionRecord, target: int) -> tuple[SessionFold, int | None, list[StoredSnapshot]]:
        """The fold of the latest usable snapshot at or before `target` (or an empty fold), its
        seq, and the later stored ones it could not use."""
        unusable: list[StoredSnapshot] = []
        if target < 0:
            return SessionFold(keep_messages=False), None, unusable
        for stored in await self.reader.snapshots(record, target, FOLD_VERSION):
            try:
                snapshot = decode_snapshot(stored.state)
            except SnapshotUnusable as exc:
                log.info("snapshot ignored", **access.session_log_fields(record.id), seq=stored.seq, reason=str(exc))
                unusable.append(stored)
                continue
            if snapshot.seq != stored.seq:
                log.info(
                    "snapshot ignored",
                    **access.session_log_fields(record.id),
                    seq=stored.seq,
                    reason="seq does not match",
                )
                unusable.append(stored)
                continue
            return SessionFold.from_snapshot(snapshot), stored.seq, unusable
        return SessionFold(keep_messages=False), None, unusable


class LiveSessionLoader:
    """Brings a session into the live cache (`load`) and keeps a cached one current (`catch_up`)."""

    def __init__(self, loader: SessionLoader, reader: EventReader, recorder: EventRecorder) -> None:
        self.loader = loader
        self.reader = reader
        self.recorder = recorder

    async def load(self, session_id: str) -> LiveSession:
        """Load a session: its latest snapshot, then the events after it (trusted: validated
        when appended). A load that had to fold many events stored snapshots on its way, so
        the next cold load is short; the appends count their events from the latest one."""
        record = await self.reader.session(session_id)
        loaded = await self.loader.fold_at(record)
        live = LiveSession(record=record, fold=loaded.fold, durable_next_seq=loaded.fold.next_seq)
        live.events_since_snapshot = loaded.events_since_snapshot
        live.bytes_since_snapshot = loaded.bytes_since_snapshot
        recent = await self.reader.run(self.recorder.recent_event_ids, record.id, RECENT_IDS + 1)
        for event_id, seq in reversed(recent):
            live.recent_ids[event_id] = seq
        live.ids_complete = len(recent) <= RECENT_IDS
        if record.fork_seq is not None:
            inherited = await self.reader.inherited_event_ids(record, INHERITED_IDS + 1)
            live.inherited_ids = dict(inherited) if len(inherited) <= INHERITED_IDS else None
        return live

    async def catch_up(self, live: LiveSession, record: SessionRecord) -> None:
        """Fast-forward a cached session that another instance wrote to (under its lock, with
        nothing in flight): fold only the missing events, remember their eventIds."""
        if live.in_flight or live.fold.next_seq >= record.next_seq:
            return
        own_from = 0 if record.fork_seq is None else record.fork_seq + 1  # a fork's own events
        async for page in self.loader.fold_pages(live.fold, record, record.next_seq - 1):
            for event in page:
                if event.event_id is not None and event.seq >= own_from:
                    live.remember(event.event_id, event.seq)
        live.durable_next_seq = live.fold.next_seq
        live.record = record


__all__ = ["LOAD_PAGE_EVENTS", "LiveSessionLoader", "Loaded", "SessionLoader", "SnapshotPolicy", "SnapshotStore"]
