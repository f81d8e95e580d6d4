"""The in-memory state of sessions being written or read: loaded once, then kept up to date.

A `LiveSession` holds the message-less fold of one session's log (inherited prefix included):
a few bytes per surface node, whatever the log's length or its messages' size. EventIds are
de-duplicated exactly without a per-event map: a small bounded set of recent ids answers most
retries, and any other id is looked up through the events' unique index (`ids_complete` says
when the recent set alone is exact, e.g. for a session this instance wrote from its start).
The database stays the truth: when a commit fails the live session is dropped and loaded again
(from its latest snapshot); when another instance wrote, it catches up on the missing events.

The cache is bounded by count and by estimated bytes; a session with batches in flight or its
lock held is never evicted, nor one written through an open writer stream (`pin`). Who holds a
session's lease is set through the cache (`LiveSessions.set_writer`), which files the session
by it: sessions without a writer are evicted first.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sessionlog.core.fold import SessionFold
from sessionlog_server.service.session_lock import SessionLock
from sessionlog_server.storage.records import SessionRecord

RECENT_IDS = 1024
"""EventIds a live session remembers; older ones are found through the unique index."""
INHERITED_IDS = 1024
"""EventIds of a fork's inherited prefix a live session holds; a fork whose prefix carries more
looks up the ids of each batch in the prefix instead."""


@dataclass(slots=True)
class LiveSession:
    """One session's folded state and the lease this instance believes its writer holds."""

    record: SessionRecord
    fold: SessionFold
    recent_ids: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """EventIds of the latest events (planned ones included), with their seqs; bounded."""
    ids_complete: bool = False
    """True while `recent_ids` holds every eventId of the session's own events."""
    inherited_ids: dict[str, int] | None = field(default_factory=dict)
    """Every eventId of the prefix a fork inherits, with its seq (empty for a session that is no
    fork), or None when the prefix carries more than `INHERITED_IDS`. The prefix never changes,
    and the unique index covers only the session's own events: eventIds are unique in the whole
    log a session reads back, so a retry of an inherited event is answered with its seq."""
    durable_next_seq: int = 0
    """The next seq after every batch known durable (the fold may be ahead by in-flight batches)."""
    events_since_snapshot: int = 0
    bytes_since_snapshot: int = 0
    lock: SessionLock = field(default_factory=SessionLock)
    writer_id: str | None = None
    """The writer this instance granted the lease to (None: none); set by `LiveSessions.set_writer`."""
    epoch: int = 0
    valid: bool = True
    in_flight: int = 0
    """Batches applied to the fold but not yet durable."""
    idle_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    """Waiters for nothing in flight (`wait_idle`), woken by the `end_commit` that empties it.
    Futures rather than an `asyncio.Event`: its `set` and `clear`, interpreted, were two Python
    calls for every batch, where a wait is rare (a lease or a projection under way)."""

    def begin_commit(self) -> None:
        self.in_flight += 1

    def end_commit(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self.idle_waiters:
            waiters, self.idle_waiters = self.idle_waiters, []
            for waiter in waiters:
                if not waiter.done():  # a waiter cancelled meanwhile
                    waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Wait until every planned batch is durable (or failed), so the fold is all committed."""
        if self.in_flight == 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle_waiters.append(waiter)
        await waiter

    @property
    def session_id(self) -> str:
        return self.record.id

    def known_seq(self, event_id: str) -> int | None:
        """The seq of a remembered eventId (None: not among the recent or inherited ids)."""
        seq = self.recent_ids.get(event_id)
        if seq is None and self.inherited_ids:
            seq = self.inherited_ids.get(event_id)
        return seq

    def unknown_ids(self, event_ids: list[str]) -> list[str]:
        """The ids that the recent set cannot answer for (they need the index lookup)."""
        if self.ids_complete:
            return []
        return [eid for eid in event_ids if eid not in self.recent_ids]

    def remember(self, event_id: str, seq: int) -> None:
        """Note an eventId; past `RECENT_IDS` the oldest durable ones are forgotten (and then
        `ids_complete` no longer holds: older ids go to the index)."""
        self.recent_ids[event_id] = seq
        self.recent_ids.move_to_end(event_id)
        while len(self.recent_ids) > RECENT_IDS:
            oldest, oldest_seq = next(iter(self.recent_ids.items()))
            if oldest_seq >= self.durable_next_seq:
                break  # never forget an id whose batch is still in flight
            del self.recent_ids[oldest]
            self.ids_complete = False

    def resident_bytes(self) -> int:
        """Estimated memory of this session (fold plus recent and inherited ids)."""
        ids = len(self.recent_ids) + len(self.inherited_ids or ())
        return self.fold.resident_bytes() + ids * 200


Loader = Callable[[str], Awaitable[LiveSession]]


class LiveSessions:
    """An LRU cache of LiveSessions; one load per session even under concurrent requests.

    Sessions pinned by open writer streams are kept apart from the eviction candidates, and the
    candidates are filed by whether a (unary) writer holds their lease, so eviction finds a
    writer-less session first without walking the leased ones. The estimated bytes are a
    running total. A load walks only the candidates it passes over (locked or in flight) and
    sums nothing. Both used to cover the whole cache on every load: opening N writer streams
    cost N^2 (2,000 streams: two thirds of the event loop's time went there), and a cache full
    of unary writers' sessions was walked to its end on every load.
    """

    def __init__(self, loader: Loader, capacity: int, max_bytes: int = 0) -> None:
        self._loader = loader
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._free: OrderedDict[str, LiveSession] = OrderedDict()
        """Cached sessions no open writer stream pins and no writer holds, least recently used
        first: the first eviction candidates."""
        self._leased: OrderedDict[str, LiveSession] = OrderedDict()
        """Cached sessions a writer without an open stream (a unary writer) holds, least recently
        used first: evicted once no free one can go (a unary writer may never give its lease
        back, so its lease cannot pin the session)."""
        self._held: dict[str, LiveSession] = {}
        """Cached sessions pinned by open writer streams."""
        self._pinned: Counter[str] = Counter()
        self._bytes: dict[str, int] = {}
        """Each cached session's estimated bytes when it was last used."""
        self._total_bytes = 0
        """The sum of `_bytes`."""
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}
        self._known_later: dict[str, dict[str, int]] = {}

    async def get(self, session_id: str) -> LiveSession:
        """The live session, loading (folding) it from the log if it is not cached."""
        candidates = self._candidates(session_id)
        live = candidates[session_id] if candidates is not None else self._held.get(session_id)
        if live is not None and live.valid:
            if candidates is not None:
                candidates.move_to_end(session_id)
            self._account(session_id, live)  # every append passes here: the estimate follows it
            return live
        pending = self._loading.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[LiveSession] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            live = await self._loader(session_id)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._loading.pop(session_id, None)
        for event_id, seq in self._known_later.pop(session_id, {}).items():
            live.remember(event_id, seq)
        future.set_result(live)
        self._drop(session_id)  # an invalid entry it replaces
        if self._pinned[session_id] > 0:  # (a Counter's look-up adds no key)
            self._held[session_id] = live
        else:
            self._file(live)
        self._account(session_id, live)
        self._evict(keep=session_id)
        return live

    def remember_later(self, session_id: str, known: dict[str, int]) -> None:
        """EventIds found stored (a batch failed with EVENT_IDS_STORED after the session was
        dropped): the next load of the session remembers them, so the retry is answered."""
        self._known_later.setdefault(session_id, {}).update(known)

    def peek(self, session_id: str) -> LiveSession | None:
        """The cached live session, if any, without loading."""
        live = self._cached(session_id)
        return live if live is not None and live.valid else None

    def committing(self, session_id: str) -> bool:
        """Whether a batch of the session was planned here and is not settled yet: once it
        lands, it is published here with its commit time (`subscriptions.follow` waits for it)."""
        live = self.peek(session_id)
        return live is not None and live.in_flight > 0

    def pin(self, session_id: str) -> None:
        """Keep the session cached while a writer stream on it is open (one `unpin` per `pin`).

        A writer stream appends again soon. Were its session evicted, each append would fold
        it from the log again; with more open streams than the cache holds (2,000 slow writers,
        a cache of 1,024), every append did, and the server spent its time loading sessions."""
        self._pinned[session_id] += 1
        candidates = self._candidates(session_id)
        if candidates is not None:
            self._held[session_id] = candidates.pop(session_id)

    def unpin(self, session_id: str) -> None:
        """The writer stream that pinned the session ended; the session becomes the most
        recently used eviction candidate."""
        self._pinned[session_id] -= 1
        if self._pinned[session_id] <= 0:
            del self._pinned[session_id]
            live = self._held.pop(session_id, None)
            if live is not None:
                self._file(live)

    def set_writer(self, live: LiveSession, writer_id: str | None) -> None:
        """Note who holds `live`'s lease (None: no one) and file the session by it, as most
        recently used. A live session no longer cached (replaced or evicted) only takes the note."""
        live.writer_id = writer_id
        candidates = self._candidates(live.session_id)
        if candidates is not None and candidates[live.session_id] is live:
            del candidates[live.session_id]
            self._file(live)

    def invalidate(self, session_id: str) -> None:
        """Forget a session's state; the next use folds it again from the log."""
        live = self._drop(session_id)
        if live is not None:
            live.valid = False

    def _cached(self, session_id: str) -> LiveSession | None:
        candidates = self._candidates(session_id)
        return candidates[session_id] if candidates is not None else self._held.get(session_id)

    def _candidates(self, session_id: str) -> OrderedDict[str, LiveSession] | None:
        """The eviction candidates holding the session, if it is one."""
        if session_id in self._free:
            return self._free
        return self._leased if session_id in self._leased else None

    def _file(self, live: LiveSession) -> None:
        """Make an unpinned session the most recently used candidate of its kind."""
        (self._free if live.writer_id is None else self._leased)[live.session_id] = live

    def _account(self, session_id: str, live: LiveSession) -> None:
        if self._max_bytes:
            now = live.resident_bytes()
            self._total_bytes += now - self._bytes.get(session_id, 0)
            self._bytes[session_id] = now

    def _drop(self, session_id: str) -> LiveSession | None:
        """Take a session out of the cache (and out of the byte total)."""
        candidates = self._candidates(session_id)
        live = candidates.pop(session_id) if candidates is not None else self._held.pop(session_id, None)
        self._total_bytes -= self._bytes.pop(session_id, 0)
        return live

    def _evict(self, keep: str) -> None:
        """Drop least recently used sessions while over capacity (never `keep`, just loaded).

        A session whose lock is held or that has batches in flight is never dropped: its fold
        holds batches not yet durable, and folding it again from the log would plan the next
        batch without them; nor is one pinned by an open writer stream (those are not even
        looked at). Any other session may go, those without a writer first.
        """
        while len(self) > self._capacity or (self._max_bytes and self._total_bytes > self._max_bytes):
            victim = self._victim(self._free, keep)
            if victim is None:
                victim = self._victim(self._leased, keep)
            if victim is None:
                return
            self._drop(victim)

    @staticmethod
    def _victim(candidates: OrderedDict[str, LiveSession], keep: str) -> str | None:
        """The least recently used of `candidates` that may go, if any."""
        for sid, live in candidates.items():
            if sid != keep and not live.lock.locked() and not live.in_flight:
                return sid
        return None

    def resident_bytes(self) -> int:
        """Estimated memory of every cached session, as of each one's last use (0 when the cache
        has no byte bound: nothing is counted then)."""
        return self._total_bytes

    def __len__(self) -> int:
        return len(self._free) + len(self._leased) + len(self._held)
