"""A call that fails in the transport (no server, no answer) is `Unavailable` with the catalogued
reason TRANSPORT_ERROR (docs/errors.md), in both Python clients as in the TypeScript one.

The service's own errors always carry an ErrorInfo reason; a status without one was made by
gRPC. Its code's name (UNAVAILABLE, DEADLINE_EXCEEDED) is no reason of the catalogue, which
is what the clients used to report, and what `sessionlog` printed as `error: UNAVAILABLE: ...`.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from bench.procs import free_port
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import RetryPolicy
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import LimitExceeded, NotFound, Unavailable
from sessionlog.errors import ServerError
from tests.support.servers import ServerThread

ONCE = RetryPolicy(attempts=1)


@pytest.fixture
def silent_target() -> Iterator[str]:
    """An address that accepts TCP connections and never answers (a hung server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_no_server_is_a_transport_error() -> None:
    client = SessionLogClient(f"127.0.0.1:{free_port()}", timeout=5, retry=ONCE)
    with client, pytest.raises(Unavailable) as caught:
        client.get_session("s")
    assert caught.value.reason == "TRANSPORT_ERROR" and caught.value.code == "UNAVAILABLE"


def test_no_answer_in_time_is_a_transport_error(silent_target: str) -> None:
    client = SessionLogClient(silent_target, timeout=0.3, retry=ONCE)
    with client, pytest.raises(Unavailable) as caught:
        client.get_session("s")
    assert caught.value.reason == "TRANSPORT_ERROR"


def test_the_asyncio_client_says_the_same() -> None:
    async def call() -> Unavailable:
        async with AsyncSessionLogClient(f"127.0.0.1:{free_port()}", timeout=5, retry=ONCE) as client:
            with pytest.raises(Unavailable) as caught:
                await client.get_session("s")
        return caught.value

    assert asyncio.run(call()).reason == "TRANSPORT_ERROR"


def test_the_command_line_names_the_catalogued_reason() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", f"127.0.0.1:{free_port()}", "events", "s", "--to", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stderr.startswith("sessionlog: error: TRANSPORT_ERROR: "), result.stderr


@pytest.fixture
def not_sessionlog() -> Iterator[str]:
    """A gRPC server on loopback that serves no sessionlog method (every call: UNIMPLEMENTED)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def test_a_server_that_is_not_sessionlog_is_an_unexpected_status(not_sessionlog: str) -> None:
    """gRPC's UNIMPLEMENTED, with no sessionlog ErrorInfo, was reported under the reason
    "UNIMPLEMENTED", which the catalogue does not hold: it is UNEXPECTED_STATUS, its code kept."""
    with SessionLogClient(not_sessionlog, timeout=5, retry=ONCE) as client, pytest.raises(ServerError) as caught:
        client.get_session("s")
    assert caught.value.reason == "UNEXPECTED_STATUS"
    assert caught.value.message.startswith("UNIMPLEMENTED: ")
    assert caught.value.grpc_code == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]

    async def call() -> str:
        async with AsyncSessionLogClient(not_sessionlog, timeout=5, retry=ONCE) as client:
            with pytest.raises(ServerError) as caught:
                await client.get_session("s")
        return caught.value.reason

    assert asyncio.run(call()) == "UNEXPECTED_STATUS"


def test_a_message_over_grpcs_limit_is_message_too_large(sqlite_database: str) -> None:
    """A request over the service's `max_message_bytes` is refused by gRPC itself, before the
    service sees it, with RESOURCE_EXHAUSTED and no ErrorInfo: it was reported under the reason
    "RESOURCE_EXHAUSTED"; it is the catalogue's MESSAGE_TOO_LARGE, and nothing was created."""
    server = ServerThread(sqlite_database, max_message_bytes=16 * 1024)
    try:
        with SessionLogClient(server.target, timeout=10, retry=ONCE) as client:
            with pytest.raises(LimitExceeded) as caught:
                client.create_session("too-large", metadata={"notes": "x" * 32 * 1024})
            assert caught.value.reason == "MESSAGE_TOO_LARGE"
            # Asked by id: a listing of the database the tests share may itself pass the limit.
            with pytest.raises(NotFound):
                client.get_session("too-large")
    finally:
        server.stop()
