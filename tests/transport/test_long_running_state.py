"""What a server that runs for weeks keeps of the sessions it served: no more than its bounds.

A service serves new sessions all the time (each agent run is one, each candidate plan a fork),
reads them for a while and never again. Whatever it remembers per session, per writer or per
page must be capped (and the cap documented), else it grows with every session ever served
until the process is restarted. Each test here serves many more sessions (or subscriptions)
than the server should hold and counts what it holds afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from sessionlog.client import SessionLogClient
from tests.support.events import system, user
from tests.support.servers import ServerThread

CYCLES = 20
"""Subscriptions opened and cancelled in a test."""
CACHE = 4
"""The session cache of the servers here (`session_cache_size`): far fewer than they serve."""
SESSIONS = 5 * CACHE


@pytest.fixture
def small_cache_server(db_url: str) -> Iterator[ServerThread]:
    with ServerThread(db_url, session_cache_size=CACHE) as server:
        yield server


def test_the_origins_it_remembers_are_bounded_by_the_session_cache(small_cache_server: ServerThread) -> None:
    """Every session looked up left its origin (parent and cut) in the reader, never dropped:
    a service that served a million sessions kept a million entries."""
    run = uuid.uuid4().hex[:8]
    with SessionLogClient(small_cache_server.target) as client:
        for n in range(SESSIONS):
            sid = f"o-{run}-{n}"
            client.create_session(sid)
            with client.writer(sid) as writer:
                writer.append([system("s"), user(f"hello {n}")]).result()
            fork = client.fork(sid, 1, f"{sid}-f")
            client.model_history(fork.id)
        reader = small_cache_server.service.reader
        assert reader.origins_kept <= CACHE
        # A fork whose parent's origin was dropped long ago still reads its inherited prefix.
        first = f"o-{run}-0-f"
        assert [m["content"] for m in client.model_history(first)] == ["s", "hello 0"]
        assert [e.seq for e in client.read_events(first)] == [0, 1, 2]


def test_no_subscription_outlives_its_cancellation_as_the_log_moves(server: ServerThread, sid: str) -> None:
    """A subscription cancelled (its client went away) just as its session's log moved (a batch
    published, or on PostgreSQL another process's commit announced) went on: `asyncio.wait_for`
    of Python 3.11 swallows a cancellation that comes with the result it waited for. The stream
    then waited for the log for as long as the service ran, holding a stream slot (against
    `max_open_streams`) and its subscriber; `sessionlog serve` on PostgreSQL kept about one per
    thousand subscriptions that clients cancelled."""
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        with client.writer(sid) as writer:
            writer.append([system("s"), user("hello")]).result()
    hub = server.service.hub
    key = sid  # the default namespace's keys are the ids

    async def cycles() -> int:
        before = hub.count()
        waiting = []
        for _ in range(CYCLES):
            items = server.service.subscribe(sid, 0)
            while not isinstance(await anext(items), int):  # replayed up to the caught-up marker
                pass
            step = asyncio.ensure_future(anext(items))
            for _ in range(3):
                await asyncio.sleep(0)  # it now waits for the log to move
            hub.poke(key)  # the log moves ...
            step.cancel()  # ... as the client goes away
            waiting.append(step)
        await asyncio.wait(waiting, timeout=10)  # a bound on a hang, not a measure: each ends at once
        left = hub.count() - before
        for step in waiting:  # those that went on: cancelled again, so the server is left clean
            step.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return left

    assert server.call(cycles()) == 0
