"""Live tails: committed events are published to the subscribers of their session (SPEC §9).

Publishing happens after commit, so a subscriber never sees an event that could still be
rolled back. Each subscriber has its own queue; a slow subscriber does not slow the writer
(its queue grows, and it is told to resync from the log if it falls too far behind).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from sessionlog.core.events import Event

#: A subscriber this many batches behind is dropped to replay from the log instead.
MAX_QUEUED_BATCHES = 10_000


class Subscriber:
    """One subscription's queue of committed batches (or None: fell behind, re-read the log)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Sequence[Event] | None] = asyncio.Queue()
        self.overflowed = False

    def push(self, events: Sequence[Event]) -> None:
        if self.overflowed:
            return
        if self.queue.qsize() >= MAX_QUEUED_BATCHES:
            self.overflowed = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(events)


class SubscriptionHub:
    """Fans committed events out to the subscribers of each session."""

    def __init__(self) -> None:
        self._subscribers: dict[str, set[Subscriber]] = defaultdict(set)

    def subscribe(self, session_id: str) -> Subscriber:
        subscriber = Subscriber()
        self._subscribers[session_id].add(subscriber)
        return subscriber

    def unsubscribe(self, session_id: str, subscriber: Subscriber) -> None:
        subscribers = self._subscribers.get(session_id)
        if subscribers is not None:
            subscribers.discard(subscriber)
            if not subscribers:
                del self._subscribers[session_id]

    def publish(self, session_id: str, events: Sequence[Event]) -> None:
        for subscriber in self._subscribers.get(session_id, ()):
            subscriber.push(events)

    def count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())
