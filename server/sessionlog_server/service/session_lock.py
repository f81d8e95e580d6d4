"""A session's lock (`SessionLock`): `asyncio.Lock`'s contract, compiled.

Every batch takes its session's lock to plan under it and lets go at once. `asyncio.Lock`'s
methods are Python, so a free lock taken and let go cost five interpreted calls a batch
(`__aenter__`, `acquire`, `__aexit__`, `release`, `_wake_up_first`); compiled (setup.py), the
same steps are C. The contract is asyncio.Lock's: waiters take the lock in the order they came
(FIFO), a waiter cancelled while it waits passes its turn on, and a free lock is taken at once
without suspending the caller.
"""

from __future__ import annotations

import asyncio
from collections import deque


class SessionLock:
    """An asyncio lock for one session's writes (`async with lock:`), FIFO among its waiters."""

    def __init__(self) -> None:
        self._locked = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        """Whether someone holds the lock."""
        return self._locked

    async def acquire(self) -> bool:
        """Take the lock: at once if it is free and no one waits for it, else in turn."""
        if not self._locked and self._no_waiter_left():
            self._locked = True
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)
        except asyncio.CancelledError:
            if not self._locked:  # woken, then cancelled before taking it: the next one's turn
                self._wake_up_first()
            raise
        self._locked = True
        return True

    def release(self) -> None:
        """Let the lock go and wake the first waiter."""
        if not self._locked:
            raise RuntimeError("Lock is not acquired.")
        self._locked = False
        self._wake_up_first()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def _no_waiter_left(self) -> bool:
        """Whether every waiter has been cancelled (or there is none)."""
        return all(waiter.cancelled() for waiter in self._waiters)

    def _wake_up_first(self) -> None:
        if self._waiters:
            first = self._waiters[0]
            if not first.done():
                first.set_result(None)


__all__ = ["SessionLock"]
