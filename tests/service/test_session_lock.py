"""The session lock keeps asyncio.Lock's contract: a free lock is taken without suspending,
waiters take it in the order they came, a waiter cancelled while waiting passes its turn on,
and letting go of a lock no one holds is an error."""

from __future__ import annotations

import asyncio

import pytest

from sessionlog_server.service.session_lock import SessionLock


def test_waiters_take_the_lock_in_the_order_they_came() -> None:
    async def scenario() -> list[str]:
        lock, order = SessionLock(), []

        async def take(name: str) -> None:
            async with lock:
                order.append(name)
                await asyncio.sleep(0)

        async with lock:
            tasks = [asyncio.create_task(take(name)) for name in "abcd"]
            await asyncio.sleep(0)  # all four wait now
            assert lock.locked() and order == []
        await asyncio.gather(*tasks)
        assert not lock.locked()
        return order

    assert asyncio.run(scenario()) == ["a", "b", "c", "d"]


def test_a_free_lock_is_taken_without_letting_other_tasks_run() -> None:
    async def scenario() -> None:
        lock, ran = SessionLock(), []

        async def other() -> None:
            ran.append("other")

        task = asyncio.create_task(other())
        await lock.acquire()  # had it suspended, `other` would have run
        assert lock.locked() and ran == []
        lock.release()
        await task
        assert ran == ["other"]

    asyncio.run(scenario())


def test_a_waiter_cancelled_while_waiting_passes_its_turn_on() -> None:
    async def scenario() -> list[str]:
        lock, order = SessionLock(), []

        async def take(name: str) -> None:
            async with lock:
                order.append(name)

        await lock.acquire()
        first, second = asyncio.create_task(take("first")), asyncio.create_task(take("second"))
        await asyncio.sleep(0)
        first.cancel()
        lock.release()  # wakes `first`, which is cancelled before it takes the lock
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 5)
        assert not lock.locked()
        return order

    assert asyncio.run(scenario()) == ["second"]


def test_a_free_lock_is_taken_at_once_when_every_waiter_was_cancelled() -> None:
    async def scenario() -> None:
        lock = SessionLock()
        await lock.acquire()
        waiter = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        lock.release()
        assert await asyncio.wait_for(lock.acquire(), 1)
        lock.release()

    asyncio.run(scenario())


def test_letting_go_of_a_lock_no_one_holds_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not acquired"):
        SessionLock().release()
