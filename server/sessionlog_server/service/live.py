"""The in-memory state of sessions being written or read: folded once, then kept up to date.

A `LiveSession` holds the fold of one session's whole log (inherited prefix included) and the
eventIds it has stored, so validating and de-duplicating a batch never touches the database.
The database stays the truth: when a commit fails or another instance may have written,
the live session is dropped and folded again from the log on next use.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sessionlog.core.fold import SessionFold
from sessionlog_server.storage.records import SessionRecord


@dataclass(slots=True)
class LiveSession:
    """One session's folded state and the lease this instance believes its writer holds."""

    record: SessionRecord
    fold: SessionFold
    event_ids: dict[str, int]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    writer_id: str | None = None
    epoch: int = 0
    valid: bool = True
    header_reported: bool = False
    """Whether the current lease has reported a request header yet (SPEC §6 `resume`)."""
    in_flight: int = 0
    """Batches applied to the fold but not yet durable."""
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while nothing is in flight."""

    def __post_init__(self) -> None:
        self.idle.set()

    def begin_commit(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def end_commit(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def wait_idle(self) -> None:
        """Wait until every planned batch is durable (or failed), so the fold is all committed."""
        await self.idle.wait()

    @property
    def session_id(self) -> str:
        return self.record.id


Loader = Callable[[str], Awaitable[LiveSession]]


class LiveSessions:
    """An LRU cache of LiveSessions; one load per session even under concurrent requests."""

    def __init__(self, loader: Loader, capacity: int) -> None:
        self._loader = loader
        self._capacity = capacity
        self._sessions: OrderedDict[str, LiveSession] = OrderedDict()
        self._loading: dict[str, asyncio.Future[LiveSession]] = {}

    async def get(self, session_id: str) -> LiveSession:
        """The live session, loading (folding) it from the log if it is not cached."""
        live = self._sessions.get(session_id)
        if live is not None and live.valid:
            self._sessions.move_to_end(session_id)
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
        future.set_result(live)
        self._sessions[session_id] = live
        self._evict(keep=session_id)
        return live

    def peek(self, session_id: str) -> LiveSession | None:
        """The cached live session, if any, without loading."""
        live = self._sessions.get(session_id)
        return live if live is not None and live.valid else None

    def invalidate(self, session_id: str) -> None:
        """Forget a session's state; the next use folds it again from the log."""
        live = self._sessions.pop(session_id, None)
        if live is not None:
            live.valid = False

    def _evict(self, keep: str) -> None:
        """Drop least recently used sessions while over capacity (never `keep`, just loaded).

        A session whose lock is held or that has batches in flight is never dropped: its fold
        holds batches not yet durable, and folding it again from the log would plan the next
        batch without them. Any other session may go (sessions without a writer first): a
        writer's lease must not pin it, since a unary writer may never give its lease back.
        """
        while len(self._sessions) > self._capacity:
            victim: str | None = None
            for sid, live in self._sessions.items():  # least recently used first
                if sid == keep or live.lock.locked() or live.in_flight:
                    continue
                if live.writer_id is None:
                    victim = sid
                    break
                victim = victim or sid
            if victim is None:
                return
            del self._sessions[victim]

    def __len__(self) -> int:
        return len(self._sessions)
