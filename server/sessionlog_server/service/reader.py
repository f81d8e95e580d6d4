"""Reads of a session's log, including the prefix a fork inherits from its parents.

A fork stores only its own events (seqs after `fork_seq`); seqs up to `fork_seq` are read from
the parent, recursively, so a fork costs the same whatever the prefix length (SPEC §8). Where
each session came from (its parent and cut, which never change) is remembered for the latest
sessions looked up, so reading a fork does not read its ancestors' rows each time.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from sessionlog.core.errors import NotFound, from_seq_past_head
from sessionlog.core.events import Event
from sessionlog.core.limits import Limits
from sessionlog_server.service import access, recent
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import SessionRecord, StoredSnapshot

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Segment:
    """Seqs `first`..`last` (inclusive; `last` None = open-ended) are stored under `session_id`."""

    session_id: str
    first: int
    last: int | None


def check_from_seq(record: SessionRecord, from_seq: int, action: str) -> None:
    """OUT_OF_RANGE (FROM_SEQ_PAST_HEAD) for a read or subscription (`action`: "read",
    "subscribe to") of `record` from a seq its log has not reached. Such a seq is a mistake (a
    typo, another session's seq): a read answered it with nothing, which an auditor took for a
    log with nothing there, and a subscription must never say it is caught up at it. From the
    head itself (`next_seq`) a read is empty (nothing since) and a subscription waits."""
    if from_seq > record.next_seq:
        raise from_seq_past_head(record.id, from_seq, record.next_seq, action)


def segment_of(segments: Sequence[Segment], seq: int) -> Segment:
    """The segment of `segments` (as `EventReader.segments` lists them) that holds `seq`."""
    for segment in reversed(segments):
        if segment.first <= seq:
            return segment
    raise ValueError(f"seq {seq} is in no segment")


Origin = tuple[str | None, int | None]
"""Where a session came from: its parent's key and the cut (`fork_seq`); (None, None) for a
session that is no fork."""


class EventReader:
    """Reads events and session rows on a pool of reader threads."""

    def __init__(self, recorder: EventRecorder, *, threads: int = 4, origins: int = 1024) -> None:
        self.recorder = recorder
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sessionlog-reader")
        self._origins: OrderedDict[str, Origin] = OrderedDict()
        """The origins of the sessions last looked up, least recently used first, at most
        `origins_capacity`: kept for every session ever looked up, it grew by an entry per
        session a long-running service served (about 200 bytes each), never shrinking."""
        self.origins_capacity = max(origins, 1)

    @property
    def origins_kept(self) -> int:
        """How many sessions' origins are remembered now (at most `origins_capacity`)."""
        return len(self._origins)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking storage call on a reader thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def session(self, session_id: str) -> SessionRecord:
        """The session row (NotFound if absent)."""
        record = await self.run(self.recorder.get_session, session_id)
        recent.remember(self._origins, session_id, (record.parent_id, record.fork_seq), self.origins_capacity)
        return record

    async def caller_session(self, session_id: str, limits: Limits) -> SessionRecord:
        """The session `session_id` of the caller's namespace: NOT_FOUND, named by the caller's
        id, when it does not exist there (another namespace's session is not told apart)."""
        try:
            record = await self.session(access.session_key(session_id, limits))
        except NotFound:
            raise access.session_not_found(session_id) from None
        access.check_namespace(session_id, record.namespace)
        return record

    async def segments(self, record: SessionRecord) -> list[Segment]:
        """Where each seq range of the session's log is stored, oldest first."""
        chain: list[Segment] = []
        own_first = 0 if record.fork_seq is None else record.fork_seq + 1
        chain.append(Segment(record.id, own_first, None))
        parent, cut = record.parent_id, record.fork_seq
        while parent is not None and cut is not None:
            origin = self._origins.get(parent)
            if origin is None:
                parent_record = await self.session(parent)
                origin = (parent_record.parent_id, parent_record.fork_seq)
            else:
                self._origins.move_to_end(parent)
            grand, grand_cut = origin
            first = 0 if grand_cut is None else grand_cut + 1
            chain.append(Segment(parent, first, cut))
            # An ancestor contributes only up to the lowest cut seen so far on the way up.
            parent, cut = grand, None if grand_cut is None else min(grand_cut, cut)
        chain.reverse()
        return chain

    async def read(self, record: SessionRecord, from_seq: int, to_seq: int | None, limit: int) -> list[Event]:
        """Up to `limit` events with from_seq <= seq <= to_seq, across the fork chain."""
        out: list[Event] = []
        for segment in await self.segments(record):
            if len(out) >= limit:
                break
            start = max(from_seq, segment.first)
            stop = segment.last if to_seq is None else (to_seq if segment.last is None else min(to_seq, segment.last))
            if stop is not None and start > stop:
                continue
            out.extend(await self.run(self.recorder.read_events, segment.session_id, start, stop, limit - len(out)))
        return out

    async def pages(
        self, record: SessionRecord, from_seq: int, to_seq: int | None, page: int = 1000
    ) -> AsyncIterator[list[Event]]:
        """Events from `from_seq` to `to_seq` (inclusive; None = the end), one page at a time,
        so a caller never holds more than a page of a long log."""
        seq = from_seq
        while to_seq is None or seq <= to_seq:
            events = await self.read(record, seq, to_seq, page)
            if not events:
                return
            yield events
            seq = events[-1].seq + 1

    async def surface_ops(
        self, record: SessionRecord, from_seq: int, to_seq: int, first_page: int = 250, max_page: int = 20_000
    ) -> AsyncIterator[list[Event]]:
        """The surface events from `from_seq` to `to_seq` as light events (seq, type and surface
        op; empty data), across the fork chain, a page at a time: enough to fold the surface.
        Pages start at `first_page` rows and double up to `max_page`, so a caller that stops
        early (a transcript page once its rows are accounted for) reads little."""
        page = first_page
        for segment in await self.segments(record):
            start = max(from_seq, segment.first)
            stop = to_seq if segment.last is None else min(to_seq, segment.last)
            while start <= stop:
                events = await self.run(self.recorder.read_surface_ops, segment.session_id, start, stop, page)
                if not events:
                    break
                yield events
                start = events[-1].seq + 1
                page = min(2 * page, max_page)

    async def read_at(self, record: SessionRecord, seqs: Sequence[int]) -> list[Event]:
        """The events at `seqs` (a sparse set, e.g. surface nodes) across the fork chain, in seq order."""
        wanted = sorted(set(seqs))
        out: list[Event] = []
        for segment in await self.segments(record):
            mine = [s for s in wanted if s >= segment.first and (segment.last is None or s <= segment.last)]
            for start in range(0, len(mine), 500):  # bounded IN lists
                out.extend(await self.run(self.recorder.read_events_at, segment.session_id, mine[start : start + 500]))
        out.sort(key=lambda event: event.seq)
        return out

    async def snapshots(
        self, record: SessionRecord, max_seq: int, fold_version: int, per_segment: int = 3
    ) -> list[StoredSnapshot]:
        """Stored fold snapshots of fold code `fold_version` usable for the session's log up to
        `max_seq`, newest first.

        A fork's log is its ancestors' prefix plus its own events, so an ancestor's snapshot at
        or before the cut is a snapshot of the fork's log too."""
        found: list[StoredSnapshot] = []
        for segment in reversed(await self.segments(record)):
            if segment.first > max_seq:
                continue
            high = max_seq if segment.last is None else min(max_seq, segment.last)
            rows = await self.run(self.recorder.snapshots_before, segment.session_id, high, fold_version, per_segment)
            found.extend(row for row in rows if row.seq >= segment.first)
        return found

    async def find_event_ids(
        self, record: SessionRecord, event_ids: Sequence[str], *, inherited_only: bool = False
    ) -> dict[str, int]:
        """Which of `event_ids` the session's log carries, with their seqs: its own events and
        the prefix a fork inherits (eventIds are unique in the log a session reads back), or
        that prefix alone."""
        found: dict[str, int] = {}
        wanted = list(event_ids)
        for segment in reversed(await self.segments(record)):
            if not wanted:
                break
            if segment.session_id == record.id and inherited_only:
                continue
            hits = await self.run(self.recorder.find_event_ids, segment.session_id, wanted, segment.last)
            found.update({eid: seq for eid, seq in hits.items() if seq >= segment.first})
            wanted = [eid for eid in wanted if eid not in found]
        return found

    async def inherited_event_ids(self, record: SessionRecord, limit: int) -> list[tuple[str, int]]:
        """Up to `limit` eventIds of the prefix a fork inherits, with their seqs, newest first
        (none for a session that is no fork)."""
        out: list[tuple[str, int]] = []
        for segment in reversed(await self.segments(record)):
            if segment.session_id == record.id:
                continue
            if len(out) >= limit:
                break
            out += await self.run(self.recorder.recent_event_ids, segment.session_id, limit - len(out), segment.last)
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
