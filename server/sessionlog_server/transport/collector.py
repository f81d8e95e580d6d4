"""Python's garbage collector in a serving process: thresholds for a heap of many open streams.

With Python's defaults (700, 10, 10) a young collection runs every 700 net allocations, and a
request's objects (messages, futures, coroutine frames) live a few milliseconds, long enough to
be walked and promoted; the middle generation then fills with them and its collections walk
thousands of streams' state. Under 2,000 slow writers a worker paused ~60 times in 20 s for
10-25 ms (middle collections) and once for 160 ms (a full one), and those pauses were the
acknowledgement tail (bench/PROFILE.md, round 12). At 5,000 / 20 / 20 most of a request's
objects are gone before the young collection that would have promoted them, a middle
collection runs every 100,000 net allocations instead of 7,000, and a full one is considered
every 2,000,000 instead of 70,000. `SESSIONLOG_GC_THRESHOLDS` sets other values; empty keeps
Python's own.

Set by `serve` for its own process only: a server embedded in another program leaves that
program's collector as it is.
"""

from __future__ import annotations

import gc

DEFAULT_THRESHOLDS = "5000,20,20"


def parse_thresholds(spec: str) -> tuple[int, int, int] | None:
    """The three thresholds `spec` names (`YOUNG,MIDDLE,OLD`), or None for an empty `spec`
    (Python's own); ValueError naming the setting for anything else."""
    if not spec.strip():
        return None
    parts = spec.split(",")
    try:
        values = tuple(int(part.strip()) for part in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or min(values) < 1:
        raise ValueError(
            f"SESSIONLOG_GC_THRESHOLDS={spec!r} is not three positive integers YOUNG,MIDDLE,OLD "
            f"(default {DEFAULT_THRESHOLDS}; empty keeps Python's own)"
        )
    young, middle, old = values
    return young, middle, old


def tune_collector(spec: str) -> None:
    """Apply `spec` (see `parse_thresholds`) to this process's collector."""
    thresholds = parse_thresholds(spec)
    if thresholds is not None:
        gc.set_threshold(*thresholds)


__all__ = ["DEFAULT_THRESHOLDS", "parse_thresholds", "tune_collector"]
