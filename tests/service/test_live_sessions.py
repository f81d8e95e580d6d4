"""The live-session cache (`service/live.py`): which sessions it keeps, by count and by bytes.

The loader here folds a small real log per session (no database: the cache only sees what its
loader returns), and counts loads, so that a test can tell a cached session from a reloaded one.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine
from typing import Any

from sessionlog.core.events import APPEND, NewEvent
from sessionlog.core.fold import SessionFold
from sessionlog_server.service.live import LiveSession, LiveSessions
from sessionlog_server.storage.records import SessionRecord
from tests.core.builders import system, user

loads: Counter[str] = Counter()


async def _load(session_id: str, messages: int = 1) -> LiveSession:
    loads[session_id] += 1
    fold = SessionFold(keep_messages=False)
    fold.apply(NewEvent("system/message", system(), surface_op=APPEND).committed(0, 1))
    for n in range(messages):
        fold.apply(NewEvent("user/message", user(f"m{n}"), surface_op=APPEND).committed(n + 1, 2 + n))
    record = SessionRecord(session_id, "default", 0, None, {}, None, None, fold.next_seq, 0, None, 0, None, False)
    return LiveSession(record, fold)


def _grow(live: LiveSession, messages: int) -> None:
    """Append `messages` user messages to a cached session's fold, as planned appends do."""
    for _ in range(messages):
        seq = live.fold.next_seq
        live.fold.apply(NewEvent("user/message", user(f"m{seq}"), surface_op=APPEND).committed(seq, 10 + seq))


def _run(scenario: Coroutine[Any, Any, None]) -> None:
    loads.clear()
    asyncio.run(scenario)


def test_the_least_recently_used_session_goes_first() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=2)
        for sid in ("a", "b"):
            await cache.get(sid)
        await cache.get("a")  # a is now more recent than b
        await cache.get("c")
        assert cache.peek("b") is None and cache.peek("a") is not None and len(cache) == 2
        await cache.get("a")
        assert loads["a"] == 1  # never reloaded

    _run(scenario())


def test_a_pinned_session_stays_and_after_unpin_is_the_most_recent_candidate() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=2)
        pinned = [f"p{i}" for i in range(3)]
        for sid in pinned:
            await cache.get(sid)
            cache.pin(sid)
        await cache.get("u")  # over capacity: only the unpinned one just loaded, kept
        assert len(cache) == 4 and all(cache.peek(sid) for sid in pinned)
        await cache.get("v")  # u is the only candidate
        assert cache.peek("u") is None and cache.peek("v") is not None
        cache.pin("p0")  # two streams on p0
        cache.unpin("p0")
        cache.unpin("p1")
        cache.unpin("p0")  # p1 then p0 are candidates again, after v
        await cache.get("w")  # 3 over: v, p1, p0 go; p2 is still pinned
        assert [sid for sid in ("p0", "p1", "p2", "v", "w") if cache.peek(sid)] == ["p2", "w"]
        assert loads["p2"] == 1

    _run(scenario())


def test_a_session_with_a_batch_in_flight_or_its_lock_held_is_not_evicted() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=1)
        busy = await cache.get("busy")
        busy.begin_commit()
        await cache.get("x")
        assert cache.peek("busy") is not None and cache.peek("x") is not None
        locked = await cache.get("locked")  # x goes: busy is in flight
        assert cache.peek("x") is None
        async with locked.lock:
            busy.end_commit()
            await cache.get("y")  # busy goes now; locked is held
        assert cache.peek("busy") is None and cache.peek("locked") is not None

    _run(scenario())


def test_a_session_without_a_writer_goes_before_an_older_one_with_a_writer() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=2)
        cache.set_writer(await cache.get("written"), "unary-writer")
        await cache.get("read")
        await cache.get("new")
        assert cache.peek("read") is None and cache.peek("written") is not None

    _run(scenario())


def test_with_every_candidate_leased_the_least_recently_used_goes() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=3)
        for sid in ("w0", "w1", "w2"):
            cache.set_writer(await cache.get(sid), f"writer-{sid}")
        await cache.get("w0")  # w1 is now the least recently used
        await cache.get("reader")  # the one free session is the one just loaded: a leased one goes
        assert [sid for sid in ("w0", "w1", "w2", "reader") if cache.peek(sid)] == ["w0", "w2", "reader"]
        await cache.get("other")  # now a free session (reader) can go, though it is newer than w2
        assert [sid for sid in ("w0", "w2", "reader", "other") if cache.peek(sid)] == ["w0", "w2", "other"]

    _run(scenario())


def test_a_released_lease_makes_the_session_free_to_go_first() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=2)
        old = await cache.get("old")
        cache.set_writer(old, "writer")
        cache.set_writer(await cache.get("released"), "writer")
        cache.set_writer(cache.peek("released") or old, None)  # released after old was leased
        await cache.get("new")
        assert cache.peek("released") is None and cache.peek("old") is old

    _run(scenario())


def test_a_writer_set_on_a_replaced_session_leaves_the_cache_alone() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=2)
        stale = await cache.get("s")
        cache.invalidate("s")
        fresh = await cache.get("s")
        cache.set_writer(stale, "writer")  # a grant that raced the reload
        assert stale.writer_id == "writer" and fresh.writer_id is None and cache.peek("s") is fresh
        cache.set_writer(fresh, "writer")
        await cache.get("a")
        await cache.get("b")  # a goes (free), s stays (leased)
        assert [sid for sid in ("s", "a", "b") if cache.peek(sid)] == ["s", "b"]

    _run(scenario())


def test_the_byte_bound_follows_each_session_as_it_grows() -> None:
    async def scenario() -> None:
        one = (await _load("probe")).resident_bytes()
        cache = LiveSessions(_load, capacity=100, max_bytes=3 * one)
        first = await cache.get("a")
        await cache.get("b")
        await cache.get("c")
        assert cache.resident_bytes() == 3 * one
        _grow(first, 50)  # a planned batch: the next use of `a` counts it
        await cache.get("a")
        assert cache.resident_bytes() == first.resident_bytes() + 2 * one > 3 * one
        await cache.get("d")  # over the bound: b, c and then a go (d was just loaded)
        assert [sid for sid in "abcd" if cache.peek(sid)] == ["d"]
        assert cache.resident_bytes() == one
        cache.invalidate("d")
        assert cache.resident_bytes() == 0 and len(cache) == 0

    _run(scenario())


def test_an_invalid_session_is_loaded_again_in_its_pinned_place() -> None:
    async def scenario() -> None:
        cache = LiveSessions(_load, capacity=1, max_bytes=10**9)
        stale = await cache.get("s")
        cache.pin("s")
        stale.valid = False  # a fault mid-apply
        fresh = await cache.get("s")
        assert fresh is not stale and loads["s"] == 2
        assert cache.resident_bytes() == fresh.resident_bytes()
        await cache.get("other")
        assert cache.peek("s") is fresh  # still pinned

    _run(scenario())
