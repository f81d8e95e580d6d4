"""The event loop a server runs on: uvloop where it is installed, else asyncio's own.

uvloop (libuv, in C) does the loop's own work (waking on sockets and on other threads,
scheduling callbacks) for less CPU than asyncio's selector loop, written in Python. A server
answering one event per message wakes several times per event: there uvloop measured 15-21 %
less server CPU per unary append on SQLite (4-12 % on PostgreSQL) and about 10 % less
event-loop CPU per event at 1,000 one-event messages a second; pipelined streams, which share
their wake-ups between many events, did not move (bench/PROFILE.md, round 9).
`SESSIONLOG_EVENT_LOOP=asyncio` keeps the standard loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
"""`auto`: uvloop when it is installed (the server extra installs it except on Windows, where
it does not run), else asyncio."""


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new event loop of the kind `name` (one of EVENT_LOOPS) asks for."""
    if name not in EVENT_LOOPS:
        raise ValueError(f"SESSIONLOG_EVENT_LOOP={name!r} is not one of {', '.join(EVENT_LOOPS)}")
    if name == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise ValueError("SESSIONLOG_EVENT_LOOP=uvloop, but uvloop is not installed (no Windows build)") from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """Which kind of loop `loop` is, as the serving log line reports it."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """`asyncio.run(main)` on a new loop of the kind `event_loop` names."""
    with asyncio.Runner(loop_factory=loop_factory(event_loop)) as runner:
        return runner.run(main)


__all__ = ["EVENT_LOOPS", "loop_factory", "loop_name", "run"]
