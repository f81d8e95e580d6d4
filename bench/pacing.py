"""The open loop the latency figures send on: item i is due at start + i/rate, whatever became
of the items before it, so a slow answer delays no send (no coordinated omission)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

LEAD_S = 0.1
"""How long after the loop starts its first item is due: time for the caller's set-up to settle."""


async def open_loop(total: int, rate: float, start: float) -> AsyncIterator[tuple[int, float, float]]:
    """Yield each of `total` items, `rate` a second from `start` (`time.monotonic()`; now plus
    `LEAD_S`, typically), once it is due: its index, its due time and how many seconds past that
    it was reached without waiting (0 when the loop slept until it), which a sender that fell
    behind its pace counts."""
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        yield i, due, max(0.0, -delay)


__all__ = ["LEAD_S", "open_loop"]
