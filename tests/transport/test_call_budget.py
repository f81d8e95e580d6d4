"""A unary call's `timeout` is the budget of the whole call (`base.Budget`): its retries and
their waits included, in both Python clients (the TypeScript client's `timeoutMs` too:
client/typescript/test/statuses.test.ts).

Each attempt had the whole timeout, and a timed-out idempotent call was retried like one that
met UNAVAILABLE: against a service that never answers, a read with the 30 s default took about
four minutes to fail, one with `timeout=0.5` eight times that and the backoff.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest

from bench.procs import free_port
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import RetryPolicy
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable

BUDGET = 0.5
#: Generous for a loaded machine, and well under the eight attempts a call used to make.
WITHIN = 2.5


@dataclass
class Hung:
    """A gRPC server whose GetSession handler never answers (it waits until the call ends)."""

    target: str
    calls: list[float] = field(default_factory=list)


@pytest.fixture
def hung() -> Iterator[Hung]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=10))
    port = server.add_insecure_port("127.0.0.1:0")
    found = Hung(f"127.0.0.1:{port}")
    lock = threading.Lock()

    def never_answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        with lock:
            found.calls.append(time.monotonic())
        while context.is_active():
            time.sleep(0.02)
        return b""

    handler = grpc.unary_unary_rpc_method_handler(never_answer)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("sessionlog.v1.SessionService", {"GetSession": handler}),)
    )
    server.start()
    yield found
    server.stop(None)


def check_spent(error: Unavailable, elapsed: float) -> None:
    assert elapsed < WITHIN, f"the call took {elapsed:.1f} s with a timeout of {BUDGET} s"
    assert error.reason == "TRANSPORT_ERROR"
    assert error.message.startswith(f"the call's timeout of {BUDGET:g} s was spent after 1 attempt: "), error.message


def test_a_read_against_a_server_that_never_answers_fails_within_its_timeout(hung: Hung) -> None:
    with SessionLogClient(hung.target, timeout=BUDGET) as client, pytest.raises(Unavailable) as caught:
        started = time.monotonic()
        try:
            client.get_session("s")
        finally:
            elapsed = time.monotonic() - started
    check_spent(caught.value, elapsed)
    assert len(hung.calls) == 1, "no attempt starts once the budget is spent"


def test_the_asyncio_client_spends_the_same_budget(hung: Hung) -> None:
    async def call() -> tuple[Unavailable, float]:
        async with AsyncSessionLogClient(hung.target, timeout=BUDGET) as client:
            started = time.monotonic()
            with pytest.raises(Unavailable) as caught:
                await client.get_session("s")
            return caught.value, time.monotonic() - started

    error, elapsed = asyncio.run(call())
    check_spent(error, elapsed)
    assert len(hung.calls) == 1


def test_no_retry_waits_past_the_budget() -> None:
    """With no server, each attempt fails at once; the backoff before the next one would spend
    the budget, so the call fails then, saying so, where it waited out every retry."""
    slow = RetryPolicy(attempts=8, initial_delay=0.4, max_delay=0.4)
    with SessionLogClient(f"127.0.0.1:{free_port()}", timeout=1.0, retry=slow) as client:
        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            client.get_session("s")
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"the call took {elapsed:.1f} s with a timeout of 1 s"
    assert caught.value.message.startswith("the call's timeout of 1 s was spent after "), caught.value.message
