"""The asyncio client against a real server: writer pipelining, reads, subscriptions, projections."""

from __future__ import annotations

import asyncio
import gc

import grpc
import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.core.errors import OwnershipLost, Unavailable, WriterClosed, WriterHeld
from sessionlog.core.events import Event
from sessionlog.requests import CaughtUp
from tests.support.events import note, system, user
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread, hold_writer, planned_next_seq


def test_async_client_end_to_end(server: ServerThread, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid, cwd="/w")
            writer = await client.writer(sid, writer_id="async-1")
            assert (await (await writer.report_header({"config": {"model": "m"}}))).reason == "initial"
            futures = [await writer.append([note(i)]) for i in range(50)]  # pipelined: sent, not yet durable
            seqs = [(await f).seqs[0] for f in futures]
            assert seqs == list(range(1, 51))
            ack = await (await writer.append([system("s"), user("hello")]))
            assert ack.seqs == [51, 52]
            with pytest.raises(WriterHeld):
                await client.writer(sid, writer_id="async-2")
            await writer.close()
            events = [e async for e in client.read_events(sid, from_seq=49)]
            assert [e.seq for e in events] == [49, 50, 51, 52]
            assert (await client.get_session(sid)).cwd == "/w"
            assert [m["content"] for m in await client.model_history(sid)] == ["s", "hello"]
            assert (await client.stats(sid))["messages"] == 2
            items: list[Event | CaughtUp] = []
            async for item in client.subscribe(sid, from_seq=52):
                items.append(item)
                if isinstance(item, CaughtUp):
                    break
            assert isinstance(items[-1], CaughtUp) and items[-1].next_seq == 53
            lease = await client.acquire_lease(sid, writer_id="unary")
            result = await client.append(sid, lease, [note(99)], expected_next_seq=53)
            assert result.seqs == [53]
            newer = await client.acquire_lease(sid, writer_id="other", takeover=True)
            with pytest.raises(OwnershipLost):
                await client.append(sid, lease, [note(100)])
            await client.release_lease(newer)
            listed = [s.id async for s in client.list_sessions()]
            assert sid in listed

    asyncio.run(scenario())


def test_giving_up_waiting_for_a_batch_leaves_the_writer_whole(server: ServerThread, sid: str) -> None:
    """A caller that stops waiting for a batch (its task cancelled, or `wait_for` timing out
    cancels the future) stops the wait, not the batch: the writer still sends it and every batch
    after it, flush and close wait for them all, and each commits once."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            writer = await client.writer(sid, create_if_missing=True)
            gate = hold_writer(server)  # nothing commits until the gate opens
            try:
                first = await writer.append([note(1)])
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(first, 0.1)
                later = [await writer.append([note(n)]) for n in (2, 3)]
            finally:
                gate.set()
            await writer.flush()  # raised CancelledError: it awaited the future the caller cancelled
            assert [(await f).seqs for f in later] == [[1], [2]]
            await writer.close()
            assert [e.data["n"] async for e in client.read_events(sid)] == [1, 2, 3]

    asyncio.run(scenario())


def test_closing_the_client_ends_its_writers_and_subscriptions(server: ServerThread, sid: str) -> None:
    """`client.close()` with a writer (a batch in flight) and a subscription open: the batch fails
    (its outcome unknown), the writer takes nothing more and closes quietly, the subscription
    and later calls raise that the client is closed, and no task is left behind."""

    async def scenario() -> None:
        client = AsyncSessionLogClient(server.target)
        writer = await client.writer(sid, create_if_missing=True)
        await (await writer.append([note(0)]))
        items: list[Event | CaughtUp] = []

        async def follow() -> None:
            async for item in client.subscribe(sid):
                items.append(item)

        following = asyncio.create_task(follow())
        while not any(isinstance(item, CaughtUp) for item in items):
            await asyncio.sleep(0.01)
        gate = hold_writer(server)
        try:
            in_flight = await writer.append([note(1)])
            await asyncio.sleep(0.1)  # sent, not committed
            await asyncio.wait_for(client.close(), 10)
        finally:
            gate.set()
        with pytest.raises(WriterClosed, match="client was closed"):  # CANCELLED, not retryable
            await asyncio.wait_for(in_flight, 10)  # never resolved
        with pytest.raises(WriterClosed, match="earlier error"):
            await writer.append([note(2)])  # was taken, and never resolved
        await asyncio.wait_for(writer.close(), 10)  # raised CancelledError
        with pytest.raises(RuntimeError, match="client is closed"):
            await asyncio.wait_for(following, 10)  # CancelledError came out of `async for`
        with pytest.raises(RuntimeError, match="client is closed"):
            await client.get_session(sid)  # grpc's UsageError
        await asyncio.sleep(0.1)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        async with AsyncSessionLogClient(server.target) as again:  # the batch in flight: at most once
            assert [e.data["n"] async for e in again.read_events(sid)] in ([0], [0, 1])

    asyncio.run(scenario())


def test_giving_up_opening_a_writer_leaves_no_lease_held(server: ServerThread, sid: str) -> None:
    """A task cancelled while `client.writer(...)` waits for the service's answer (or a
    `wait_for` on it timing out) ends the stream on purpose: a lease the service granted
    meanwhile is released, so the next open succeeds instead of meeting WRITER_HELD until
    the lease lapses."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            gate = hold_writer(server)  # the grant waits for the gate
            try:
                opening = asyncio.create_task(client.writer(sid, writer_id="given-up"))
                await asyncio.sleep(0.2)
                opening.cancel()
            finally:
                gate.set()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(opening, 10)
            writer = await client.writer(sid, writer_id="next")  # WriterHeld: the lease was left to lapse
            await writer.close()

    asyncio.run(scenario())


def test_a_client_used_off_its_event_loop_says_so(server: ServerThread, sid: str) -> None:
    """grpc.aio binds a channel to the loop it is made on; off it, calls failed in asyncio's words
    ("Event loop is closed", "no current event loop") that named nothing of the client's."""
    with pytest.raises(RuntimeError, match="in a coroutine, on the event loop that will use it"):
        AsyncSessionLogClient(server.target)

    async def make() -> AsyncSessionLogClient:
        return AsyncSessionLogClient(server.target)

    client = asyncio.run(make())

    async def use() -> None:
        with pytest.raises(RuntimeError, match="created on another event loop"):
            await client.create_session(sid)
        with pytest.raises(RuntimeError, match="created on another event loop"):
            await client.writer(sid, create_if_missing=True)

    asyncio.run(use())

    async def on_its_own_loop() -> None:
        async with AsyncSessionLogClient(server.target) as own:
            assert (await own.create_session(sid)).id == sid  # nothing was created above

    asyncio.run(on_its_own_loop())


def test_writers_open_in_async_with_as_the_sync_writers_open_in_with(server: ServerThread, sid: str) -> None:
    """`async with client.writer(...)` and `async with client.lease_writer(...)`, as the sync
    client's `with client.writer(...)` (the README: "the same methods, with the same meaning").
    They raised TypeError ("'coroutine' object does not support the asynchronous context
    manager protocol"); only `async with await client.writer(...)` worked, and still does."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            async with client.writer(sid, create_if_missing=True) as writer:
                assert (await (await writer.append([note(0)]))).seqs == [0]
            async with client.lease_writer(sid) as lease_writer:
                assert (await lease_writer.append([note(1)])).seqs == [1]
            async with await client.writer(sid) as writer:  # awaited first, as before
                assert (await (await writer.append([note(2)]))).seqs == [2]
            with pytest.raises(ValueError):  # an error in the block still closes the writer
                async with client.writer(sid) as writer:
                    raise ValueError("the harness failed")
            writer = await client.writer(sid)  # the lease was given back each time
            await writer.close()
            assert [e.seq async for e in client.read_events(sid)] == [0, 1, 2]

    asyncio.run(scenario())


def test_a_flush_given_up_leaves_the_batches_it_waited_for_whole(server: ServerThread, sid: str) -> None:
    """A `flush` whose task is cancelled (here by `asyncio.timeout`) stops the wait, not the
    batches: it awaited the writer's own futures, so the cancellation cancelled them, and a
    batch that then committed was delivered as CancelledError to a caller nobody cancelled,
    and `close` raised CancelledError too."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            writer = await client.writer(sid, create_if_missing=True)
            gate = hold_writer(server)  # nothing commits until the gate opens
            try:
                sent = await writer.append([note(1)])
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await writer.flush()
            finally:
                gate.set()
            assert (await asyncio.wait_for(sent, 10)).seqs == [0]  # raised CancelledError
            await asyncio.wait_for(writer.close(), 10)  # raised CancelledError
            assert [e.data["n"] async for e in client.read_events(sid)] == [1]

    asyncio.run(scenario())


def test_a_close_given_up_ends_the_stream_at_once(server: ServerThread, sid: str) -> None:
    """A `close` whose task is cancelled while it flushes (here by `asyncio.timeout`, the
    service not answering) abandons the stream as `cancel()` does: the batch in flight fails
    as of unknown outcome, and it commits at most once. It waited on for the service instead,
    past the timeout, for as long as the service took (here: until the gate opened)."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            writer = await client.writer(sid, create_if_missing=True)
            gate = hold_writer(server)
            try:
                sent = await writer.append([note(1)])

                async def close_within_timeout() -> None:
                    with pytest.raises(TimeoutError):
                        async with asyncio.timeout(0.1):
                            await writer.close()

                closing = asyncio.create_task(close_within_timeout())
                await asyncio.wait([closing], timeout=10)
                assert closing.done(), "close waited past its timeout for the service"
                await closing
            finally:
                gate.set()
            with pytest.raises(Unavailable, match="close was given up"):
                await asyncio.wait_for(sent, 10)
            await asyncio.wait_for(writer.close(), 10)  # a second close does nothing
            async with AsyncSessionLogClient(server.target) as again:
                assert [e.data["n"] async for e in again.read_events(sid)] in ([], [1])

    asyncio.run(scenario())


def test_a_task_cancelled_in_its_writer_block_leaves_no_unretrieved_failure(server: ServerThread, sid: str) -> None:
    """A task cancelled while it awaits a batch's result inside `async with client.writer(...)`:
    the block's exit fails the batch, and nobody is left to read that failure (the task's copy
    was cancelled). asyncio logged "Future exception was never retrieved" for each such batch."""
    reported: list[dict[str, object]] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
        async with AsyncSessionLogClient(server.target) as client:
            opened, held = asyncio.Event(), asyncio.Event()

            async def write() -> None:
                async with client.writer(sid, create_if_missing=True) as writer:
                    opened.set()
                    await held.wait()
                    await (await writer.append([note(1)]))

            writing = asyncio.create_task(write())
            await asyncio.wait_for(opened.wait(), 10)
            gate = hold_writer(server)
            try:
                held.set()
                while planned_next_seq(server, sid) < 1:  # the batch is planned, not committed
                    await asyncio.sleep(0.01)
                writing.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(writing, 10)
            finally:
                gate.set()
            del writing
            gc.collect()

    asyncio.run(scenario())
    gc.collect()
    assert [context["message"] for context in reported] == []


@pytest.mark.parametrize("code", [grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE])
def test_a_subscription_the_service_side_cuts_resubscribes(
    server: ServerThread, sid: str, code: grpc.StatusCode
) -> None:
    """A stream that a proxy or load balancer between the client and the service resets (the
    caller gets CANCELLED, though it cancelled nothing) is a cut like any other: the asyncio
    subscription resubscribes from the seq after its last event, as the sync client does. It
    ended the iteration quietly, as if the caller had stopped following."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as direct:
            writer = await direct.writer(sid, create_if_missing=True)
            await (await writer.append([note(0)]))
            # The replay's events pass, the caught-up marker is lost: the proxy resets the stream.
            with AnswerLosingProxy(server.target, "SubscribeEvents", kept=1, code=code) as proxy:
                async with AsyncSessionLogClient(proxy.target) as client:
                    resumed: list[tuple[int, str]] = []
                    items = client.subscribe(sid, on_resubscribe=lambda seq, cause: resumed.append((seq, cause.reason)))
                    assert (await anext(items)).seq == 0
                    assert await asyncio.wait_for(anext(items), 10) == CaughtUp(1)
                    await (await writer.append([note(1)]))
                    assert (await asyncio.wait_for(anext(items), 10)).seq == 1
                    assert proxy.calls["SubscribeEvents"] == 2
                    assert resumed == [(1, "TRANSPORT_ERROR")]  # from the seq after event 0
                    await items.aclose()
            await writer.close()

    asyncio.run(scenario())
