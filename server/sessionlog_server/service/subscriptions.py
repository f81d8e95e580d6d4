"""Live tails (SPEC §9): replay from a seq, a caught-up marker, then events as they commit.

Publishing happens after commit, so a subscriber never sees an event that could still be
rolled back. Each subscriber has its own queue, bounded in bytes (the stored JSON text of
the events it holds): a subscriber that falls that far behind gets its queue dropped at once
(so it holds no more memory) and, at its next read, is cut off with SUBSCRIBER_TOO_SLOW and
the seq to resume from. The Python clients resubscribe from there on their own. A slow
subscriber never slows a writer.

A subscription never ends on its own, so when the service stops, every one is ended with
UNAVAILABLE `SHUTTING_DOWN` (the clients resubscribe, there or elsewhere): left open, each held
the stop for its whole grace period. One whose send waits on a subscriber that stopped reading
cannot end so: the transport cuts it (transport/calls.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from sessionlog.core import jsonvalue
from sessionlog.core.errors import LimitExceeded, Unavailable
from sessionlog.core.events import Event
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.metrics import Metrics
from sessionlog_server.service.reader import EventReader, check_from_seq
from sessionlog_server.storage.records import SessionRecord

#: Events per replay page read from the log.
REPLAY_PAGE = 500


@dataclass(frozen=True, slots=True)
class Published:
    """A committed batch as handed to a subscriber."""

    events: Sequence[Event]
    size: int
    """Its stored payload bytes (what the subscriber's queue is bounded by)."""
    committed_at: float
    """When its commit returned (`time.perf_counter()`): the subscriber's lag runs from here."""


class Subscriber:
    """One subscription's queue of committed batches, bounded by `max_bytes` of payload."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.batches: deque[Published] = deque()
        self.queued_bytes = 0
        self.overflowed = False
        self.next_seq = 0
        """The seq this subscriber expects next (what the change feed compares the log with)."""
        self.poked = False
        self.ended = False
        """The service is stopping: the subscription ends at its next step."""
        self._ready = asyncio.Event()

    def push(self, batch: Published) -> None:
        """Queue a committed batch, or, past the byte bound, drop everything and mark the overflow."""
        if self.overflowed:
            return
        if self.batches and self.queued_bytes + batch.size > self.max_bytes:  # one batch always fits
            self.overflowed = True
            self.batches.clear()
            self.queued_bytes = 0
        else:
            self.batches.append(batch)
            self.queued_bytes += batch.size
        self._ready.set()

    def poke(self) -> None:
        """Another process appended to the session: wake up and look at the log."""
        self.poked = True
        self._ready.set()

    def end(self) -> None:
        """The service is stopping: wake up and end."""
        self.ended = True
        self._ready.set()

    async def next_batch(self, timeout: float) -> Published | None:
        """The oldest queued batch; None after `timeout` or a poke with nothing queued (or on
        overflow, or the end): the caller then reads the log, or ends.

        The wait is `asyncio.timeout`, not `asyncio.wait_for`: Python 3.11's `wait_for` returns
        the result when a cancellation comes with it, so a subscription whose client went away
        just as a batch or a poke arrived went on, and waited for the log until the service
        stopped (tests/transport/test_long_running_state.py).

        A batch pushed in the very step the timeout fires is returned, not left for later: the
        caller would read the log instead, and deliver the batch without its commit time. A poke
        that comes with batches queued stays until they are all returned, then ends the next
        wait at once: cleared with the first, it left the other process's events to the
        caller's next poll of the log, up to `timeout` later."""
        if not self.batches and not self.overflowed and not self.poked and not self.ended:
            self._ready.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError:
                pass  # whatever came meanwhile is looked at below
        if self.overflowed or self.ended or not self.batches:
            self.poked = False  # the caller reads the log now
            return None
        batch = self.batches.popleft()
        self.queued_bytes -= batch.size
        return batch

    def reset(self) -> None:
        """Forget what is queued (the log has it all) and accept new batches again."""
        self.batches.clear()
        self.queued_bytes = 0
        self.overflowed = False


class SubscriptionHub:
    """Fans committed events out to the subscribers of each session."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._subscribers: dict[str, set[Subscriber]] = defaultdict(set)
        self.ending = False
        """Set by `end_all`: subscriptions made from then on end at once too."""
        self.followed = threading.Event()
        """Set while anyone here follows a session: a change feed (on its own thread) waits for
        it before it listens at all, and learns of the first subscriber at once."""

    def subscribe(self, session_id: str) -> Subscriber:
        subscriber = Subscriber(self.max_bytes)
        if self.ending:
            subscriber.end()
        self._subscribers[session_id].add(subscriber)
        self.followed.set()
        return subscriber

    def unsubscribe(self, session_id: str, subscriber: Subscriber) -> None:
        subscribers = self._subscribers.get(session_id)
        if subscribers is not None:
            subscribers.discard(subscriber)
            if not subscribers:
                del self._subscribers[session_id]
        if not self._subscribers:
            self.followed.clear()

    def publish(
        self, session_id: str, events: Sequence[Event], size: int | None = None, committed_at: float | None = None
    ) -> None:
        """Hand a committed batch to every subscriber; `size` is its stored payload bytes, and
        `committed_at` when its commit returned (`time.perf_counter()`; None: now)."""
        subscribers = self._subscribers.get(session_id)
        if not subscribers:
            return
        batch = Published(
            events,
            _size(events) if size is None else size,
            time.perf_counter() if committed_at is None else committed_at,
        )
        for subscriber in subscribers:
            subscriber.push(batch)

    def end_all(self) -> None:
        """The service is stopping: end every subscription (and any made later) with
        SHUTTING_DOWN, so none holds the stop for its grace period."""
        self.ending = True
        for subscribers in self._subscribers.values():
            for subscriber in subscribers:
                subscriber.end()

    def has_subscribers(self, session_id: str) -> bool:
        """Whether anyone here follows the session (publishing costs nothing otherwise)."""
        return bool(self._subscribers.get(session_id))

    def poke(self, session_id: str) -> None:
        """Wake the session's subscribers to read the log (another process appended to it)."""
        for subscriber in self._subscribers.get(session_id, ()):
            subscriber.poke()

    def watched(self) -> dict[str, int]:
        """The sessions followed here, each with the lowest seq a subscriber still expects."""
        return {sid: min(s.next_seq for s in subs) for sid, subs in self._subscribers.items() if subs}

    def count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())


def _shutting_down(session_id: str, next_seq: int) -> Unavailable:
    """How a subscription ends when the service stops: resumable, from the seq not yet sent."""
    return Unavailable(
        "SHUTTING_DOWN",
        f"the service is shutting down; subscribe to session {session_id!r} again from seq {next_seq}, "
        "against another instance or after the restart",
    )


def _size(events: Sequence[Event]) -> int:
    """A batch's payload bytes, when the publisher did not say (its stored JSON text)."""
    return sum(len(jsonvalue.dumps(e.data)) for e in events)


def _lag_s(events: Sequence[Event], committed_at: float | None) -> float:
    """Seconds from a batch's commit to its delivery (now). A batch read from the log (another
    process committed it, or no one published it here) has no commit time here: its last
    event's time stands in, which is too early for a repair's events (they take the time of
    the event before them, SPEC §8)."""
    if committed_at is not None:
        return max(0.0, time.perf_counter() - committed_at)
    return max(0, now_ms() - events[-1].time) / 1000


async def follow(
    hub: SubscriptionHub,
    reader: EventReader,
    committing: Callable[[str], bool],
    metrics: Metrics,
    record: SessionRecord,
    from_seq: int,
    poll_s: float = 1.0,
) -> AsyncIterator[list[Event] | int]:
    """Replay from `from_seq`, then the next seq (the caught-up marker), then live batches.

    With nothing published for `poll_s`, the live tail looks at the log itself: other
    instances' appends arrive through the change feed (storage/changes.py) at once, and this
    poll is the safety net when a notification is lost. It does not look while
    `committing(session_id)` says this process has a batch of the session under way: that
    batch is published here once it lands, with its commit time. Read from the log between
    its commit and its publication, it was delivered without one, and a repair's lag showed
    as its events' age (they take the time of the event before them, SPEC §8).

    `record` is the caller's session (access already checked). Subscribing from beyond the
    head is OUT_OF_RANGE: a client must never read "caught up" at a seq the log has not reached.
    """
    session_id = record.id
    check_from_seq(record, from_seq, "subscribe to")
    subscriber = hub.subscribe(session_id)
    subscriber.next_seq = from_seq
    metrics.subscribers.inc()
    try:
        next_seq = from_seq
        while True:  # replay: the log has everything committed so far
            if subscriber.ended:
                raise _shutting_down(session_id, next_seq)
            page = await reader.read(record, next_seq, None, REPLAY_PAGE)
            if page:
                yield page
                # Kept with the subscriber too: the SQLite feed wakes those whose log is past
                # it, and one left at `from_seq` was woken by every commit of another process.
                next_seq = subscriber.next_seq = page[-1].seq + 1
            if len(page) < REPLAY_PAGE:
                break
            if subscriber.overflowed:
                subscriber.reset()  # still replaying from the log: the queue is not needed yet
        yield next_seq
        del page  # nothing of the replay stays alive while the subscription waits
        while True:
            published = await subscriber.next_batch(poll_s)
            if subscriber.ended:
                raise _shutting_down(session_id, next_seq)
            if subscriber.overflowed:
                raise LimitExceeded(
                    "SUBSCRIBER_TOO_SLOW",
                    # "behind" by what waits here: the connection's buffers hold more on the way.
                    f"the subscriber fell behind session {session_id!r}: more than {subscriber.max_bytes} "
                    f"bytes of its events waited to be sent, besides those its connection held; "
                    f"subscribe again from seq {next_seq}",
                    session_id=session_id,
                    resume_seq=next_seq,
                    limit=subscriber.max_bytes,
                )
            batch: Sequence[Event]
            committed_at: float | None = None
            if published is None:
                if committing(session_id):
                    continue  # this process's batch is on its way here (see above)
                # Nothing published here: another instance may be the writer, look at the log.
                batch = await reader.read(record, next_seq, None, REPLAY_PAGE)
                if not batch:
                    continue
            else:
                batch, committed_at = published.events, published.committed_at
            fresh = [e for e in batch if e.seq >= next_seq]
            if fresh and fresh[0].seq > next_seq:
                # Never skip: fill a gap from the log before going on.
                fresh = await reader.read(record, next_seq, fresh[-1].seq, fresh[-1].seq - next_seq + 1)
            if fresh:
                metrics.subscription_lag.observe(_lag_s(fresh, committed_at))
                yield fresh
                next_seq = subscriber.next_seq = fresh[-1].seq + 1
            del published, batch, fresh  # nor anything of what was sent, while it waits for more
    finally:
        metrics.subscribers.dec()
        hub.unsubscribe(session_id, subscriber)
