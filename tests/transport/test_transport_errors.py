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

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import RetryPolicy
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from tests.support.servers import free_port

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
