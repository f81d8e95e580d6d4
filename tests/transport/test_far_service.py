"""A service far away: the clients connect, write and subscribe over a link with a long round
trip (a service in another region), with TLS and without.

The link is `tests/support/latency_proxy.py`, forwarding bytes to a real `sessionlog serve` with
`ONE_WAY_DELAY_S` added each way (a 400 ms round trip). A TLS connection then takes four
one-way trips, 0.8 s, before the service's HTTP/2 SETTINGS frame reaches the client; a
plaintext one one or two. The Python clients gave each connect attempt as little as 100 ms (gRPC core takes
`grpc.min_reconnect_backoff_ms` for its minimum connect timeout; `sessionlog.connecting`):
every attempt failed "connection attempt timed out before receiving SETTINGS frame" until the
backoff had grown past the handshake, so a writer on a fresh client failed at once and a unary
call or subscription went through only after several attempts (a TLS handshake of the service's
wasted on each). Each test counts the connections the proxy accepted: one per client (and one
per reconnect after a cut).

The transport is the same on every backend, so these run on SQLite only. Bounds are loose (a
loaded machine); the connection count is what tells a client that connected at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.requests import CaughtUp
from tests.security.test_tls_limits_metrics import make_certificate
from tests.support.events import note
from tests.support.latency_proxy import LatencyProxy
from tests.support.servers import ServerProcess

ONE_WAY_DELAY_S = 0.2
"""The latency the proxy adds each way: a 400 ms round trip, as far as another region is."""

WITHIN_S = 15.0
"""A loose bound on what each test does over the link (a few round trips, on a loaded machine)."""


class FarService:
    """A `sessionlog serve` reached through a fresh `LatencyProxy` (`target`), with the CA file
    the clients need when it speaks TLS."""

    def __init__(self, server: ServerProcess, ca_file: str | None) -> None:
        self.server = server
        self.ca_file = ca_file
        self.proxy = LatencyProxy(server.target, ONE_WAY_DELAY_S)
        self.target = self.proxy.target


@pytest.fixture(scope="module", params=["plaintext", "tls"])
def far_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str | None]]:
    directory = tmp_path_factory.mktemp(f"far-{request.param}")
    env: dict[str, str] = {}
    ca_file: str | None = None
    if request.param == "tls":
        key, cert = make_certificate(directory)
        env = {"SESSIONLOG_TLS_CERT_FILE": str(cert), "SESSIONLOG_TLS_KEY_FILE": str(key)}
        ca_file = str(cert)
    server = ServerProcess(f"sqlite:///{directory / 'far.db'}", env=env).start()
    try:
        yield server, ca_file
    finally:
        server.terminate()


@pytest.fixture
def far(far_server: tuple[ServerProcess, str | None]) -> Iterator[FarService]:
    """A proxy of its own per test: its connection count is this test's clients' alone."""
    service = FarService(*far_server)
    try:
        yield service
    finally:
        service.proxy.close()


def test_a_unary_call_connects_at_once(far: FarService, sid: str) -> None:
    started = time.monotonic()
    with SessionLogClient(far.target, ca_file=far.ca_file) as client:
        assert client.create_session(sid).id == sid
        assert client.get_session(sid).id == sid
    assert time.monotonic() - started < WITHIN_S
    assert far.proxy.connections == 1


def test_a_writer_opens_writes_and_reconnects_after_a_cut(far: FarService, sid: str) -> None:
    started = time.monotonic()
    with SessionLogClient(far.target, ca_file=far.ca_file) as client:
        with client.writer(sid, create_if_missing=True) as writer:
            assert writer.append([note(0)]).result(timeout=WITHIN_S).seqs == [0]
            assert far.proxy.connections == 1
            far.proxy.cut()  # the link drops: the writer reconnects over it and goes on
            assert writer.append([note(1)]).result(timeout=WITHIN_S).seqs == [1]
            assert writer.reconnects == 1
        assert [e.data["n"] for e in client.read_events(sid)] == [0, 1]
    assert time.monotonic() - started < 2 * WITHIN_S
    assert far.proxy.connections == 2


def seed_nearby(far: FarService, sid: str) -> None:
    """Session `sid` holding one event, written straight to the service (not over the link)."""
    with SessionLogClient(far.server.target, ca_file=far.ca_file) as near:
        near.create_session(sid)
        near.append(sid, near.acquire_lease(sid), [note(0)])


def test_a_subscription_replays_and_catches_up(far: FarService, sid: str) -> None:
    seed_nearby(far, sid)
    started = time.monotonic()
    with SessionLogClient(far.target, ca_file=far.ca_file) as client:
        subscription = client.subscribe(sid)
        items = iter(subscription)
        assert next(items).seq == 0  # type: ignore[union-attr]
        assert next(items) == CaughtUp(1)
        subscription.cancel()
    assert time.monotonic() - started < WITHIN_S
    assert far.proxy.connections == 1


def test_an_async_unary_call_connects_at_once(far: FarService, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(far.target, ca_file=far.ca_file) as client:
            assert (await client.create_session(sid)).id == sid
            assert (await client.get_session(sid)).id == sid

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < WITHIN_S
    assert far.proxy.connections == 1


def test_an_async_writer_opens_writes_and_reconnects_after_a_cut(far: FarService, sid: str) -> None:
    async def scenario() -> list[int]:
        async with AsyncSessionLogClient(far.target, ca_file=far.ca_file) as client:
            async with await client.writer(sid, create_if_missing=True) as writer:
                assert (await asyncio.wait_for(await writer.append([note(0)]), WITHIN_S)).seqs == [0]
                assert far.proxy.connections == 1
                far.proxy.cut()
                assert (await asyncio.wait_for(await writer.append([note(1)]), WITHIN_S)).seqs == [1]
                assert writer.reconnects == 1
            return [e.data["n"] async for e in client.read_events(sid)]

    started = time.monotonic()
    assert asyncio.run(scenario()) == [0, 1]
    assert time.monotonic() - started < 2 * WITHIN_S
    assert far.proxy.connections == 2


def test_an_async_subscription_replays_and_catches_up(far: FarService, sid: str) -> None:
    seed_nearby(far, sid)

    async def scenario() -> list[object]:
        async with AsyncSessionLogClient(far.target, ca_file=far.ca_file) as client:
            seen: list[object] = []
            async for item in client.subscribe(sid):
                seen.append(item if isinstance(item, CaughtUp) else item.seq)
                if isinstance(item, CaughtUp):
                    return seen
        raise AssertionError("the subscription ended before it caught up")

    started = time.monotonic()
    assert asyncio.run(scenario()) == [0, CaughtUp(1)]
    assert time.monotonic() - started < WITHIN_S
    assert far.proxy.connections == 1
