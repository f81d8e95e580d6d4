"""A service that hangs rather than dies (a paused VM, a host gone silent behind a network that
drops packets, a process stopped with SIGSTOP): its connections stay open and nothing answers on
them, not even an HTTP/2 PING. The clients' keepalive (`sessionlog.keepalive`) gives such a
connection up within `HANG_NOTICED_WITHIN_S` of the service's last answer; the writer then
fails its pending appends, or reconnects and re-sends them once the service is back, and a
subscription resubscribes, as after any cut. Without it a streaming writer's appends and a
subscription waited for as long as the service stayed hung.

The service here is a `sessionlog serve` child stopped with SIGSTOP. The transport is the same on
every backend, so these run on SQLite only. Bounds are asserted loosely (a loaded machine).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from sessionlog.keepalive import HANG_NOTICED_WITHIN_S
from sessionlog.requests import CaughtUp
from tests.support.events import note
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually

PAUSE_S = HANG_NOTICED_WITHIN_S + 10
"""How long a test keeps the service hung before it comes back: past the bound, with room."""

SLACK_S = 20.0
"""What a loaded machine may add to a bound."""


@pytest.fixture
def hanging_server(tmp_path: Path) -> Iterator[ServerProcess]:
    # A lease far longer than any pause: a writer that reconnects after one finds its lease
    # still live (a lapse is another matter, tests/transport/test_writer_reconnect.py).
    server = ServerProcess(f"sqlite:///{tmp_path / 'hung.db'}", env={"SESSIONLOG_LEASE_TTL_MS": "600000"}).start()
    try:
        yield server
    finally:
        server.unpause()
        server.kill()


def test_a_writers_pending_append_fails_within_the_bound_while_the_service_hangs(
    hanging_server: ServerProcess, sid: str
) -> None:
    with SessionLogClient(hanging_server.target) as client:
        # Two reconnect attempts: the first waits out the connect timeout (connecting.py), the
        # second fails at once on a service that answers no connection
        # (`reconnect_attempts` sets how long the writer goes on trying; the bound is the hang's).
        writer = client.writer(sid, create_if_missing=True, reconnect_attempts=2)
        assert writer.append([note(0)]).result(timeout=30).seqs == [0]
        hanging_server.pause()
        started = time.monotonic()
        pending = writer.append([note(1)])
        with pytest.raises(Unavailable):
            pending.result(timeout=HANG_NOTICED_WITHIN_S + SLACK_S)
        assert time.monotonic() - started < HANG_NOTICED_WITHIN_S + SLACK_S
        hanging_server.unpause()


OPEN_UNANSWERED = "the writer's open got no answer within the client's timeout of 1 s"


def test_a_writers_open_fails_within_the_clients_timeout_while_the_service_hangs(
    hanging_server: ServerProcess, sid: str
) -> None:
    # The open waited for its answer until the keepalive gave the connection up (15 s), then
    # retried on connections that never answered: 24 s against a timeout of 3 s, minutes in
    # the TypeScript client. All its attempts now share the client's timeout, as a unary call's.
    with SessionLogClient(hanging_server.target, timeout=1.0) as client:
        client.create_session(sid)  # the connection is up before the service hangs
        hanging_server.pause()
        started = time.monotonic()
        with pytest.raises(Unavailable) as failed:
            client.writer(sid)
        assert time.monotonic() - started < HANG_NOTICED_WITHIN_S
        assert failed.value.reason == "TRANSPORT_ERROR"
        # Told once, with the client's timeout: as a spent budget, it named it twice, the second
        # time as the attempt's share ("the call's timeout of 1 s was spent after 1 attempt: the
        # writer's open got no answer within the client's timeout of 0.999997 s").
        assert str(failed.value) == OPEN_UNANSWERED
        hanging_server.unpause()
        with client.writer(sid) as writer:  # the service is back: an open goes through
            assert writer.append([note(0)]).result(timeout=30).seqs == [0]


def test_an_async_writers_open_fails_within_the_clients_timeout_while_the_service_hangs(
    hanging_server: ServerProcess, sid: str
) -> None:
    async def scenario() -> Unavailable:
        async with AsyncSessionLogClient(hanging_server.target, timeout=1.0) as client:
            await client.create_session(sid)
            hanging_server.pause()
            started = time.monotonic()
            with pytest.raises(Unavailable) as failed:
                await client.writer(sid)
            assert time.monotonic() - started < HANG_NOTICED_WITHIN_S
            hanging_server.unpause()
            async with client.writer(sid) as writer:  # the service is back: an open goes through
                assert (await asyncio.wait_for(await writer.append([note(0)]), 30)).seqs == [0]
            return failed.value

    failure = asyncio.run(scenario())
    assert failure.reason == "TRANSPORT_ERROR"
    assert str(failure) == OPEN_UNANSWERED


def test_a_writer_reconnects_and_resends_once_a_hung_service_is_back(hanging_server: ServerProcess, sid: str) -> None:
    with SessionLogClient(hanging_server.target) as client:
        writer = client.writer(sid, create_if_missing=True)
        assert writer.append([note(0)]).result(timeout=30).seqs == [0]
        hanging_server.pause()
        pending = writer.append([note(1)])
        time.sleep(PAUSE_S)
        assert not pending.done()  # the default reconnect policy rides out the hang
        hanging_server.unpause()
        assert pending.result(timeout=60).seqs == [1]
        # The hung connection was given up while the service hung, and the batch went again on
        # a new stream: without the keepalive the old stream just went on once the service did.
        assert writer.reconnects == 1
        assert writer.append([note(2)]).result(timeout=30).seqs == [2]
        writer.close()
        assert [e.data["n"] for e in client.read_events(sid)] == [0, 1, 2]


def test_an_async_writers_pending_append_fails_within_the_bound_while_the_service_hangs(
    hanging_server: ServerProcess, sid: str
) -> None:
    async def scenario() -> float:
        async with AsyncSessionLogClient(hanging_server.target) as client:
            writer = await client.writer(sid, create_if_missing=True, reconnect_attempts=2)
            assert (await asyncio.wait_for(await writer.append([note(0)]), 30)).seqs == [0]
            hanging_server.pause()
            started = time.monotonic()
            pending = await writer.append([note(1)])
            with pytest.raises(Unavailable):
                await asyncio.wait_for(pending, HANG_NOTICED_WITHIN_S + SLACK_S)
            elapsed = time.monotonic() - started
            hanging_server.unpause()
            writer.cancel()
            return elapsed

    assert asyncio.run(scenario()) < HANG_NOTICED_WITHIN_S + SLACK_S


def _subscriptions_ended(server: ServerProcess) -> int:
    """How many SubscribeEvents calls the service logged as ended (one `rpc` line at each end)."""
    ended = 0
    for line in server.log:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("event") == "rpc" and record.get("method") == "SubscribeEvents":
            ended += 1
    return ended


def test_a_subscription_resubscribes_once_a_hung_service_is_back(hanging_server: ServerProcess, sid: str) -> None:
    with SessionLogClient(hanging_server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        client.append(sid, lease, [note(0)])
        subscription = client.subscribe(sid)
        items = iter(subscription)
        assert next(items).seq == 0  # type: ignore[union-attr]
        assert next(items) == CaughtUp(1)
        hanging_server.pause()
        time.sleep(PAUSE_S)
        hanging_server.unpause()
        client.append(sid, lease, [note(1)])
        assert next(items).seq == 1  # type: ignore[union-attr]  # no gap, no repeat, no second marker
        # The stream on the hung connection was given up (the service logs its end once it reads
        # the client's goodbye), and the event came on the subscription the client made after it.
        eventually(lambda: _subscriptions_ended(hanging_server), lambda ended: ended == 1, timeout=10)
        subscription.cancel()
