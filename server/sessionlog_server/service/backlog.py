"""The commit backlog: how much planned work waits for the writer thread, and a bound on it.

A writer stream plans each batch as soon as it is read (so batches pipeline) and the group
committer makes them durable later. Nothing else limited how far planning ran ahead: a client
with a deep window (the bench's 16 writers of 64 batches of 16 events) had the event loop read
and plan every batch it sent before the writer thread committed the first large group, and the
server held all of them at once, about six times their stored size in memory. On SQLite that was
16,000 events and ~180 MB taken from the system and given back within a second, run after run;
faulting those pages in again cost the event loop 3 page faults an event, and on a machine whose
fresh pages are expensive (a VM) over a third of its time (bench/PROFILE.md, round 20).

The backlog counts what is planned but not yet settled (queued or committing). While it is over
its bound, an append waits before it is planned (`room`) and its stream reads no further
messages: they stay in the transport, HTTP/2 flow control pushes back on the client, and the
server's memory for work in flight stays bounded whatever the clients' windows. A batch is
admitted whenever the backlog is at or under the bound, so any single batch the limits allow
gets through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

BACKLOG_EVENT_BYTES = 1024
"""What an event costs the backlog besides its stored data: the server's records of it (the
decoded event, its row, its plan), so many small events count for more than their text."""


class CommitBacklog:
    """Bytes of batches planned and not yet settled, charged on the event loop only."""

    def __init__(self, limit_bytes: int, on_wait: Callable[[], None] = lambda: None) -> None:
        self.limit_bytes = limit_bytes
        self.bytes = 0
        self._on_wait = on_wait
        self._full = False
        """Over the bound: `_room` is clear. Kept beside the event so that the batches of a
        backlog under its bound, nearly all of them, call none of its (interpreted) methods."""
        self._room = asyncio.Event()
        self._room.set()

    @staticmethod
    def charge(stored_bytes: int, events: int) -> int:
        """What a batch of `events` events whose data is `stored_bytes` long counts for."""
        return stored_bytes + BACKLOG_EVENT_BYTES * events

    async def room(self) -> None:
        """Return once the backlog is at or under its bound (at once, nearly always)."""
        if not self._full:
            return
        self._on_wait()
        while not self._room.is_set():
            await self._room.wait()

    def add(self, charge: int) -> None:
        """A batch was queued for commit."""
        self.bytes += charge
        if self.bytes > self.limit_bytes and not self._full:
            self._full = True
            self._room.clear()

    def settle(self, charge: int) -> None:
        """A queued batch's outcome is known (durable or refused): its charge is free again."""
        self.bytes -= charge
        if self.bytes <= self.limit_bytes and self._full:
            self._full = False
            self._room.set()


__all__ = ["BACKLOG_EVENT_BYTES", "CommitBacklog"]
