"""A subscriber's queue (`service/subscriptions.Subscriber`): what its wait returns.

The races here are between the wait's timeout and a push that lands in the same step of the
event loop; `call_soon` orders them exactly, so each test runs the same way every time.
"""

from __future__ import annotations

import asyncio

from sessionlog.core.events import APPEND, NewEvent
from sessionlog_server.service.subscriptions import Published, Subscriber
from tests.core.builders import user


def _batch(seq: int) -> Published:
    event = NewEvent("user/message", user(f"m{seq}"), surface_op=APPEND).committed(seq, 1_000 + seq)
    return Published([event], 10, committed_at=12.5)


def test_a_batch_pushed_as_the_wait_times_out_is_returned_with_its_commit_time() -> None:
    """The push is queued before the timeout's own callback (a timeout of 0 fires at the next
    step), so the wait ends by its timeout with the batch already queued. Returning None there
    sent the caller to the log, which delivered the batch with no commit time."""

    async def scenario() -> None:
        subscriber = Subscriber(max_bytes=1_000)
        batch = _batch(3)
        asyncio.get_running_loop().call_soon(subscriber.push, batch)
        assert await subscriber.next_batch(0) is batch
        assert subscriber.queued_bytes == 0

    asyncio.run(scenario())


def test_a_wait_with_nothing_queued_ends_with_none_at_its_timeout() -> None:
    async def scenario() -> None:
        subscriber = Subscriber(max_bytes=1_000)
        assert await subscriber.next_batch(0.01) is None

    asyncio.run(scenario())


def test_an_overflow_as_the_wait_times_out_ends_it_with_none() -> None:
    """Past the byte bound the queue is dropped: the caller must see None and the overflow
    (and resubscribe from the log), never a batch from the dropped queue."""

    async def scenario() -> None:
        subscriber = Subscriber(max_bytes=15)
        loop = asyncio.get_running_loop()
        loop.call_soon(subscriber.push, _batch(1))
        loop.call_soon(subscriber.push, _batch(2))  # 10 + 10 bytes > 15
        assert await subscriber.next_batch(0) is None
        assert subscriber.overflowed

    asyncio.run(scenario())


def test_a_poke_with_a_batch_queued_ends_the_wait_after_that_batch_at_once() -> None:
    """Another process appended (the poke) while this one's batch was queued: the batch comes
    first, with its commit time, and the next wait ends at once so the caller reads the log. The
    poke was cleared with the batch, and the next wait ran its whole timeout."""

    async def scenario() -> None:
        subscriber = Subscriber(max_bytes=1_000)
        batch = _batch(4)
        subscriber.push(batch)
        subscriber.poke()
        assert await subscriber.next_batch(600) is batch
        assert await asyncio.wait_for(subscriber.next_batch(600), 10) is None
        assert not subscriber.poked  # the caller is reading the log: the poke is spent

    asyncio.run(scenario())
