"""Closing a client ends every wait of the client to try again at once, with the closed
client's RuntimeError ("the client is closed", as every other call of a closed client raises).

A sync subscription closed while it waited to resubscribe after a cut finished its wait first
(up to half a second); the asyncio client's calls, reads and subscriptions waiting to try again
finished their wait (a retry policy's, up to seconds) before they said the client was closed.
The sync client's calls and reads, and both clients' writer opens, already ended at the close
(tests/transport/test_writer_open_retries.py tests the opens).

Each test loses the first answer of a call (`AnswerLosingProxy`), so the call waits to try
again, far longer than the test gives the close to end that wait: a wait the close did not end
is told by the test's own bound running out, however fast or slow the machine.

A lease writer's heartbeat waited out its interval (a third of the lease's time left by
default) before it saw the client closed; its tests give it an interval as long as the waits
to try again. A sync writer whose open the close came right after, before the client had it
among the writers its close ends, was left open on the closed channel.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sessionlog import requests
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import RetryPolicy
from sessionlog.client import SessionLogClient, Writer
from sessionlog.core.errors import WriterClosed
from sessionlog.core.events import Event
from sessionlog.requests import CaughtUp
from tests.support.events import note
from tests.support.following import follow_in_thread
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

#: The wait before trying again: far longer than a test gives the close to end it.
LONG_WAIT = 300.0

#: The retry policy of the calls and reads: after the lost answer, a LONG_WAIT.
SLOW_RETRY = RetryPolicy(attempts=3, initial_delay=LONG_WAIT, max_delay=LONG_WAIT)

#: How long a test gives the close to end a wait (from the close on).
ENDS_WITHIN = 10.0


@pytest.fixture
def slow_resubscribe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subscription cut off while the service is unreachable waits LONG_WAIT to resubscribe
    (50 ms, doubling up to half a second, otherwise: too short to tell a wait that ended at the
    close from one that ran out)."""
    monkeypatch.setattr(requests, "RESUBSCRIBE_FIRST_DELAY", LONG_WAIT)
    monkeypatch.setattr(requests, "RESUBSCRIBE_MAX_DELAY", LONG_WAIT)


def _session_with_an_event(server: ServerThread, sid: str) -> None:
    """A session with one event: a read and a subscription of it answer with a first message."""
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        client.append(sid, lease, [note(0)])
        client.release_lease(lease)


def _said_closed(error: BaseException) -> None:
    assert isinstance(error, RuntimeError), repr(error)
    assert str(error) == "the client is closed"


# --- the sync client ---------------------------------------------------------------------------


def test_closing_the_client_ends_a_subscriptions_wait_to_resubscribe(
    server: ServerThread, sid: str, slow_resubscribe: None
) -> None:
    """Closed from another thread while the subscription waited to resubscribe, it raised the
    closed client's RuntimeError only once its wait was out (its `cancel` alone ended the wait)."""
    _session_with_an_event(server, sid)
    with AnswerLosingProxy(server.target, "SubscribeEvents") as proxy:
        client = SessionLogClient(proxy.target)
        following, seen = follow_in_thread(client.subscribe(sid))
        eventually(lambda: len(proxy.lost), lambda lost: lost == 1)  # the first attempt was cut
        client.close()
        following.join(ENDS_WITHIN)
        assert not following.is_alive()
        assert proxy.calls["SubscribeEvents"] == 1  # no resubscribe after the close
    assert len(seen) == 1, seen  # the lost answer's event was never delivered
    _said_closed(seen[0])


def test_a_subscription_cancelled_while_it_waits_to_resubscribe_ends_quietly_at_once(
    server: ServerThread, sid: str, slow_resubscribe: None
) -> None:
    """Its own cancel ends the wait as the client's close does, but as the end its caller chose:
    the iteration ends without an error, the client open or, later, closed."""
    _session_with_an_event(server, sid)
    with AnswerLosingProxy(server.target, "SubscribeEvents") as proxy, SessionLogClient(proxy.target) as client:
        subscription = client.subscribe(sid)
        following, seen = follow_in_thread(subscription)
        eventually(lambda: len(proxy.lost), lambda lost: lost == 1)
        subscription.cancel()
        following.join(ENDS_WITHIN)
        assert not following.is_alive()
        assert seen == []
        assert client.get_session(sid).next_seq == 1  # the client goes on


def _heartbeat_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "sessionlog-heartbeat"}


def test_closing_the_client_ends_a_lease_writers_wait_for_its_next_heartbeat(server: ServerThread, sid: str) -> None:
    """The heartbeat thread ends at the close (no renewal tried on the closed channel), not at
    its next beat, and the writer's close is quiet: the lease is left to lapse."""
    before = _heartbeat_threads()
    client = SessionLogClient(server.target)
    client.create_session(sid)
    writer = client.lease_writer(sid, heartbeat=LONG_WAIT)
    (beating,) = _heartbeat_threads() - before
    client.close()
    beating.join(ENDS_WITHIN)
    assert not beating.is_alive()
    writer.close()


def test_closing_a_lease_writer_ends_its_wait_for_its_next_heartbeat(server: ServerThread, sid: str) -> None:
    """Its own close ends the wait as the client's does (the same wait, `_pause`): the close
    gives the lease back at once, the client goes on."""
    before = _heartbeat_threads()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        writer = client.lease_writer(sid, heartbeat=LONG_WAIT)
        (beating,) = _heartbeat_threads() - before
        writer.close()
        assert not beating.is_alive()  # the close waits for the thread (up to 30 s) before it releases
        assert client.get_session(sid).lease is None


def test_closing_a_lease_writer_ends_a_renewals_wait_to_try_again(server: ServerThread, sid: str) -> None:
    """A renewal whose answer was lost waits to try again (the client's retry policy); the
    writer's close ends that wait too, and gives the lease back at once. It waited the wait out
    (the close's join of the heartbeat gave up after 30 s), and renewed after the close."""
    before = _heartbeat_threads()
    with (
        AnswerLosingProxy(server.target, "RenewLease") as proxy,
        SessionLogClient(proxy.target, retry=SLOW_RETRY, timeout=None) as client,
    ):
        client.create_session(sid)
        writer = client.lease_writer(sid, heartbeat=0.01)
        (beating,) = _heartbeat_threads() - before
        eventually(lambda: len(proxy.lost), lambda lost: lost == 1)
        closing = threading.Thread(target=writer.close)
        closing.start()
        closing.join(ENDS_WITHIN)
        assert not closing.is_alive() and not beating.is_alive()
        assert client.get_session(sid).lease is None
        assert proxy.calls["RenewLease"] == 1  # no renewal tried after the close


def test_a_close_between_a_writers_open_and_its_registration_ends_the_writer(
    server: ServerThread, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close from another thread can come after a writer's open succeeded and before the
    client has the writer among those its close ends: the writer was left open on the closed
    channel, and failed later with gRPC's CANCELLED "Channel closed!". It is abandoned as the
    others are, and the open raises the closed client's RuntimeError, as when the close comes
    during the open. The close is run right after the open, to land in that gap every time,
    and the writer's reader sees its stream broken before the client has the writer, as it may
    (the other order is the abandon of `test_closing_the_sync_client_ends_its_writers`)."""
    client = SessionLogClient(server.target)
    client.create_session(sid)
    opened: list[Writer] = []
    open_writer = Writer._open

    def open_then_close(writer: Writer, takeover: bool, resume: bool) -> None:
        open_writer(writer, takeover, resume)
        opened.append(writer)
        client.close()
        writer._reader.join(ENDS_WITHIN)  # the reader took the stream's break before the writer is registered
        assert not writer._reader.is_alive()

    monkeypatch.setattr(Writer, "_open", open_then_close)
    with pytest.raises(RuntimeError) as raised:
        client.writer(sid)
    _said_closed(raised.value)
    (writer,) = opened
    with pytest.raises(WriterClosed, match="the client was closed, and its writers with it"):
        writer.append([note(0)])


# --- the asyncio client ------------------------------------------------------------------------


async def _first_of(items: AsyncIterator[Event | CaughtUp]) -> Event | CaughtUp:
    async for item in items:
        return item
    raise AssertionError("the subscription ended")


async def _all_events(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


#: Each kind of call that waits to try again: the method whose answer the proxy loses, and the
#: call, made on the client for the session.
ASYNC_WAITS: dict[str, Callable[[AsyncSessionLogClient, str], Awaitable[Any]]] = {
    "GetSession": lambda client, sid: client.get_session(sid),
    "ReadEvents": lambda client, sid: _all_events(client.read_events(sid)),
    "SubscribeEvents": lambda client, sid: _first_of(client.subscribe(sid)),
}


def test_closing_the_asyncio_client_ends_a_lease_writers_wait_for_its_next_heartbeat(
    server: ServerThread, sid: str
) -> None:
    """As in the sync client: the heartbeat task ends at the close, without an error and no
    renewal tried, not at its next beat; the writer's close is quiet."""

    async def scenario() -> None:
        client = AsyncSessionLogClient(server.target)
        await client.create_session(sid)
        writer = await client.lease_writer(sid, heartbeat=LONG_WAIT)
        (beating,) = [task for task in asyncio.all_tasks() if task.get_name() == "sessionlog-heartbeat"]
        await client.close()
        await asyncio.wait([beating], timeout=ENDS_WITHIN)
        assert beating.done()
        assert not beating.cancelled()
        assert beating.exception() is None
        await writer.close()

    asyncio.run(scenario())


def test_closing_an_asyncio_lease_writer_still_ends_its_heartbeat(server: ServerThread, sid: str) -> None:
    """The writer's own close cancels the heartbeat task waiting in the client's `_pause`: the
    cancel stays the writer's (the client is open), and the lease is given back."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            writer = await client.lease_writer(sid, heartbeat=LONG_WAIT)
            (beating,) = [task for task in asyncio.all_tasks() if task.get_name() == "sessionlog-heartbeat"]
            await asyncio.wait_for(writer.close(), ENDS_WITHIN)
            assert beating.cancelled()
            assert (await client.get_session(sid)).lease is None

    asyncio.run(scenario())


@pytest.mark.parametrize("method", list(ASYNC_WAITS))
def test_closing_the_asyncio_client_ends_a_wait_to_try_again(
    server: ServerThread, sid: str, slow_resubscribe: None, method: str
) -> None:
    """A call retried (the client's retry policy), a read retried (the same) and a subscription
    resubscribing (its own backoff) raised the closed client's RuntimeError only once their
    wait was out. The close cancels the wait: no attempt is made after it."""
    _session_with_an_event(server, sid)

    async def scenario(proxy: AnswerLosingProxy) -> None:
        # No timeout: the call's budget would refuse a wait longer than what is left of it.
        client = AsyncSessionLogClient(proxy.target, retry=SLOW_RETRY, timeout=None)
        waiting = asyncio.ensure_future(ASYNC_WAITS[method](client, sid))
        while not proxy.lost:  # the first attempt's answer was lost
            await asyncio.sleep(0.01)
        await client.close()
        with pytest.raises(RuntimeError, match=r"^the client is closed$"):
            await asyncio.wait_for(waiting, ENDS_WITHIN)

    with AnswerLosingProxy(server.target, method) as proxy:
        asyncio.run(scenario(proxy))
        assert proxy.calls[method] == 1  # the retry loop stopped at the close


def test_cancelling_an_asyncio_call_that_waits_to_try_again_still_raises_cancelled(
    server: ServerThread, sid: str
) -> None:
    """The close's cancel of a wait is taken back, the caller's own is not: a call cancelled by
    its caller while it waits raises CancelledError, and the client goes on."""
    _session_with_an_event(server, sid)

    async def scenario(proxy: AnswerLosingProxy) -> None:
        async with AsyncSessionLogClient(proxy.target, retry=SLOW_RETRY, timeout=None) as client:
            waiting = asyncio.ensure_future(client.get_session(sid))
            while not proxy.lost:
                await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiting, ENDS_WITHIN)
            assert (await client.get_session(sid)).next_seq == 1

    with AnswerLosingProxy(server.target, "GetSession") as proxy:
        asyncio.run(scenario(proxy))
