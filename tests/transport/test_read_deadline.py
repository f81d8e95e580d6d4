"""A read's `timeout` bounds the wait for each page of its `ReadEvents` stream (the first, and
each one after), not the whole read, in both Python clients (the TypeScript client's
`timeoutMs` too: client/typescript/test/statuses.test.ts).

A read had no deadline at all: against a service that accepted the call and sent nothing, it
waited forever. A whole read of a long session may take long, so the timeout is per page: a
read that gets no page within it fails with TRANSPORT_ERROR saying so. The reader waiting for
a page alone decides it did not come (the sync client's timer thread per page decided apart
and could cancel the stream under a page just delivered), and a long read starts no thread a
page.
"""

from __future__ import annotations

import asyncio
import sys
import threading
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
    #: How many ReadEvents streams the service was asked for (a read that reopened asked twice).
    streams: int = 0
    #: Pages a stream sends before the service breaks it (UNAVAILABLE); 0: never broken.
    break_after: int = 0


@pytest.fixture
def paced() -> Iterator[tuple[str, Paced]]:
    """A gRPC server whose ReadEvents follows the `Paced` the test sets."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    port = server.add_insecure_port("127.0.0.1:0")
    plan = Paced()

    def read(request: pb.ReadEventsRequest, context: grpc.ServicerContext) -> Iterator[pb.ReadEventsResponse]:
        plan.streams += 1
        for sent, seq in enumerate(range(request.from_seq, plan.pages)):
            if plan.break_after and sent == plan.break_after:
                context.abort(grpc.StatusCode.UNAVAILABLE, "broken by the test")
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


def threads_started_reading(target: str, timeout: float | None) -> tuple[list[int], list[str]]:
    """The seqs a sync read delivers and the names of the threads started while it ran."""
    started: list[str] = []

    def count(frame: object, event: str, arg: object) -> None:
        """The trace hook `threading` installs in each thread it starts: note it, then trace no more."""
        started.append(threading.current_thread().name)
        sys.settrace(None)

    threading.settrace(count)
    try:
        seqs, _ = read_all(target, timeout)
    finally:
        threading.settrace(None)
    return seqs, started


def test_a_long_read_starts_no_thread_per_page(paced: tuple[str, Paced]) -> None:
    """The sync client started a timer thread for each page it waited for: a read of a long
    session started as many threads as it had pages. The threads started during a read of 200
    pages (the fake service's own few included) are bounded, not one a page."""
    target, plan = paced
    plan.pages, plan.hang = 200, False
    seqs, started = threads_started_reading(target, TIMEOUT)
    assert seqs == list(range(200))
    assert len(started) < 10, f"{len(started)} threads started during a read of 200 pages: {started[:12]}"


def test_a_read_without_a_timeout_starts_no_reading_thread(paced: tuple[str, Paced]) -> None:
    """Without a bound on the wait there is nothing for a reading thread to decide: the stream
    is read where the caller iterates."""
    target, plan = paced
    plan.pages, plan.hang = 20, False
    seqs, started = threads_started_reading(target, None)
    assert seqs == list(range(20))
    assert "sessionlog-read" not in started, started


#: Pages that come exactly when the wait for them runs out, for the tests of that race.
RACE_TIMEOUT = 0.05
RACE_READS = 40


def check_reads_at_the_deadline(reads: list[tuple[list[int], str]], plan: Paced) -> None:
    """Each read, whose pages came as its wait for them ran out, either delivered every page or
    failed with no_page after a prefix of them, and asked the service for one stream at most: a
    page that came is never followed by the stream cancelled behind it (and silently reopened).

    At most, not exactly: a read that gave up before the service's thread pool started its
    handler is never counted (gRPC does not start the handler of a call already cancelled), which
    a loaded machine does now and then (39 streams for 40 reads); a reopen counts one more."""
    for seqs, outcome in reads:
        assert outcome in ("all", "no page"), outcome
        assert seqs == list(range(len(seqs)))
        assert outcome == "no page" or len(seqs) == plan.pages
    assert plan.streams <= len(reads), f"{plan.streams} streams for {len(reads)} reads"


def test_a_page_that_comes_as_its_wait_runs_out_is_not_cancelled_behind(paced: tuple[str, Paced]) -> None:
    """The sync client's timer thread decided a page had not come while the reading thread took
    it: the page was delivered and the timer then cancelled the stream under it, so the read
    either reopened from the next seq (a retry spent, some reads doubled on the service) or
    failed. One place decides now, the reader waiting for the page."""
    target, plan = paced
    plan.pages, plan.gap, plan.hang = 4, RACE_TIMEOUT, False
    reads: list[tuple[list[int], str]] = []
    with SessionLogClient(target, timeout=RACE_TIMEOUT) as client:
        for _ in range(RACE_READS):
            seqs: list[int] = []
            try:
                for event in client.read_events("s"):
                    seqs.append(event.seq)
                reads.append((seqs, "all"))
            except Unavailable as exc:
                reads.append((seqs, "no page" if "no page within" in exc.message else exc.message))
    check_reads_at_the_deadline(reads, plan)


def test_the_asyncio_client_decides_a_page_at_its_deadline_alike(paced: tuple[str, Paced]) -> None:
    target, plan = paced
    plan.pages, plan.gap, plan.hang = 4, RACE_TIMEOUT, False

    async def read_many() -> list[tuple[list[int], str]]:
        reads: list[tuple[list[int], str]] = []
        async with AsyncSessionLogClient(target, timeout=RACE_TIMEOUT) as client:
            for _ in range(RACE_READS):
                seqs: list[int] = []
                try:
                    async for event in client.read_events("s"):
                        seqs.append(event.seq)
                    reads.append((seqs, "all"))
                except Unavailable as exc:
                    reads.append((seqs, "no page" if "no page within" in exc.message else exc.message))
        return reads

    check_reads_at_the_deadline(asyncio.run(read_many()), plan)


def test_a_read_broken_after_each_page_goes_on_past_the_policys_attempts(paced: tuple[str, Paced]) -> None:
    """Each attempt that delivered events counts as a new failure, not the same one again: a long
    read whose stream breaks every page reopens more times than the policy's 8 attempts and
    still delivers every event, in both Python clients (the TypeScript client counted so)."""
    target, plan = paced
    plan.pages, plan.hang, plan.break_after = 12, False, 1
    seqs, _ = read_all(target, TIMEOUT)
    assert seqs == list(range(12))

    async def read_async() -> list[int]:
        async with AsyncSessionLogClient(target, timeout=TIMEOUT) as client:
            return [event.seq async for event in client.read_events("s")]

    assert asyncio.run(read_async()) == list(range(12))
    assert plan.streams == 2 * 12
