"""A read's `timeout` bounds the wait for each page of its `ReadEvents` stream (the first, and
each one after), not the whole read, in both Python clients (the TypeScript client's
`timeoutMs` too: client/typescript/test/statuses.test.ts).

A read had no deadline at all: against a service that accepted the call and sent nothing, it
waited forever. A whole read of a long session may take long, so the timeout is per page: a
read that gets no page within it fails with TRANSPORT_ERROR saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb

TIMEOUT = 0.5
#: Generous for a loaded machine, and finite where the read waited forever.
WITHIN = 3.0


@dataclass
class Paced:
    """How the fake service's ReadEvents answers: `pages` pages of one event, `gap` seconds
    before each, then the stream ends, or hangs (sends nothing more) when `hang`."""

    pages: int = 0
    gap: float = 0.0
    hang: bool = True


@pytest.fixture
def paced() -> Iterator[tuple[str, Paced]]:
    """A gRPC server whose ReadEvents follows the `Paced` the test sets."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    port = server.add_insecure_port("127.0.0.1:0")
    plan = Paced()

    def read(request: pb.ReadEventsRequest, context: grpc.ServicerContext) -> Iterator[pb.ReadEventsResponse]:
        for seq in range(request.from_seq, plan.pages):
            time.sleep(plan.gap)
            event = event_pb2.Event(seq=seq, time_unix_ms=1, type="custom", data_json=b"{}")
            yield pb.ReadEventsResponse(events=[event])
        while plan.hang and context.is_active():
            time.sleep(0.02)

    handler = grpc.unary_stream_rpc_method_handler(
        read,
        request_deserializer=pb.ReadEventsRequest.FromString,
        response_serializer=pb.ReadEventsResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("sessionlog.v1.SessionService", {"ReadEvents": handler}),)
    )
    server.start()
    yield f"127.0.0.1:{port}", plan
    server.stop(None)


def check_no_page(error: Unavailable, elapsed: float) -> None:
    assert elapsed < WITHIN, f"the read took {elapsed:.1f} s with a timeout of {TIMEOUT} s"
    assert error.reason == "TRANSPORT_ERROR"
    assert f"no page within the client's timeout of {TIMEOUT:g} s" in error.message, error.message


def read_all(target: str, timeout: float | None, linger: float = 0.0) -> tuple[list[int], float]:
    """The seqs a sync read delivers and how long it took; the caller spends `linger` seconds on
    each event."""
    seqs: list[int] = []
    with SessionLogClient(target, timeout=timeout) as client:
        started = time.monotonic()
        for event in client.read_events("s"):
            seqs.append(event.seq)
            time.sleep(linger)
        return seqs, time.monotonic() - started


def test_a_read_from_a_service_that_sends_nothing_fails_within_its_timeout(paced: tuple[str, Paced]) -> None:
    target, _ = paced
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        read_all(target, TIMEOUT)
    check_no_page(caught.value, time.monotonic() - started)


def test_a_read_that_stalls_after_some_pages_gives_them_then_fails(paced: tuple[str, Paced]) -> None:
    target, plan = paced
    plan.pages = 2
    seqs: list[int] = []
    started = time.monotonic()
    with SessionLogClient(target, timeout=TIMEOUT) as client, pytest.raises(Unavailable) as caught:
        for event in client.read_events("s"):
            seqs.append(event.seq)
    check_no_page(caught.value, time.monotonic() - started)
    assert seqs == [0, 1]


def test_the_timeout_bounds_each_page_not_the_whole_read(paced: tuple[str, Paced]) -> None:
    """Pages 0.3 s apart take longer than the timeout in all, and none is late."""
    target, plan = paced
    plan.pages, plan.gap, plan.hang = 5, 0.3, False
    seqs, elapsed = read_all(target, TIMEOUT)
    assert seqs == [0, 1, 2, 3, 4]
    assert elapsed > TIMEOUT


def test_the_callers_own_time_between_events_is_not_counted(paced: tuple[str, Paced]) -> None:
    target, plan = paced
    plan.pages, plan.hang = 3, False
    seqs, _ = read_all(target, TIMEOUT, linger=TIMEOUT + 0.2)
    assert seqs == [0, 1, 2]


def test_the_asyncio_client_bounds_each_page_the_same_way(paced: tuple[str, Paced]) -> None:
    target, plan = paced
    plan.pages, plan.gap = 2, 0.3

    async def read() -> tuple[list[int], Unavailable, float]:
        seqs: list[int] = []
        async with AsyncSessionLogClient(target, timeout=TIMEOUT) as client:
            started = time.monotonic()
            with pytest.raises(Unavailable) as caught:
                async for event in client.read_events("s"):
                    seqs.append(event.seq)
                    await asyncio.sleep(TIMEOUT + 0.2)  # the caller's time is not counted
            return seqs, caught.value, time.monotonic() - started

    seqs, error, elapsed = asyncio.run(read())
    assert seqs == [0, 1]
    check_no_page(error, elapsed - 2 * (TIMEOUT + 0.2))


def test_a_read_without_a_timeout_has_no_page_deadline(paced: tuple[str, Paced]) -> None:
    target, plan = paced
    plan.pages, plan.gap, plan.hang = 2, TIMEOUT + 0.2, False
    seqs, _ = read_all(target, None)
    assert seqs == [0, 1]
