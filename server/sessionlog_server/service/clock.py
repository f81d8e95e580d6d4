"""Wall-clock time in epoch milliseconds (one function, so tests and repair agree on units)."""

from __future__ import annotations

import time


def now_ms() -> int:
    """The current Unix time in milliseconds."""
    return time.time_ns() // 1_000_000
