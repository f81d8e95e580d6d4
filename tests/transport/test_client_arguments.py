"""What the clients refuse before sending anything: an empty eventId and seq arguments that are
not non-negative integers, each with a typed error; and what a writer that failed says for
its later batches. Against a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, ValidationError, WriterClosed
from tests.support.events import note, user
from tests.support.following import follow_in_thread
from tests.support.servers import ServerThread, hold_writer


def test_an_empty_event_id_is_refused_and_nothing_is_appended(client: SessionLogClient, sid: str) -> None:
    # On the wire an empty eventId is no eventId: stored without one, a retry appended it twice.
    client.create_session(sid)
    empty = {**user("x"), "eventId": ""}
    lease = client.acquire_lease(sid)
    with pytest.raises(ValidationError) as unary:
        client.append(sid, lease, [note(0), empty])
    assert (unary.value.reason, unary.value.metadata["event_index"]) == ("BAD_EVENT_ID", "1")
    client.release_lease(lease)
    with client.writer(sid) as writer:
        with pytest.raises(ValidationError) as streamed:
            writer.append([empty])
        assert streamed.value.reason == "BAD_EVENT_ID"
        assert writer.append([note(1)]).result().seqs == [0]  # the writer goes on
    assert [e.data for e in client.read_events(sid)] == [{"n": 1}]


def test_an_event_id_with_a_lone_surrogate_is_a_validation_error(client: SessionLogClient, sid: str) -> None:
    # UTF-8 cannot carry it: refused as BAD_EVENT_ID, as the TypeScript client refuses it (whose
    # wire would have made "a\ud800" and "a\udc00" one id), not a UnicodeEncodeError from protobuf.
    client.create_session(sid)
    lone = {**note(0), "eventId": "a\ud800"}
    lease = client.acquire_lease(sid)
    with pytest.raises(ValidationError) as unary:
        client.append(sid, lease, [note(1), lone])
    assert (unary.value.reason, unary.value.metadata["event_index"]) == ("BAD_EVENT_ID", "1")
    client.release_lease(lease)
    with client.writer(sid) as writer:
        with pytest.raises(ValidationError) as streamed:
            writer.append([{**note(0), "eventId": "\udc00"}])
        assert streamed.value.reason == "BAD_EVENT_ID"
        assert writer.append([note(1)]).result().seqs == [0]  # the writer goes on


def test_a_cwd_or_writer_id_with_a_lone_surrogate_is_a_validation_error(client: SessionLogClient, sid: str) -> None:
    # They raised protobuf's UnicodeEncodeError, untyped; the service's own rule (and its
    # reason) now says what is wrong, before anything is sent.
    with pytest.raises(ValidationError) as cwd:
        client.create_session(sid, cwd="/home/\ud800")
    assert (cwd.value.reason, cwd.value.field) == ("UNSTORABLE_VALUE", "cwd")
    client.create_session(sid)
    for call in (
        lambda: client.acquire_lease(sid, writer_id="w\udc00"),
        lambda: client.resume(sid, writer_id="w\udc00"),
        lambda: client.writer(sid, writer_id="w\udc00"),
    ):
        with pytest.raises(ValidationError) as writer_id:
            call()
        assert (writer_id.value.reason, writer_id.value.field) == ("BAD_WRITER_ID", "writer_id")
    assert client.get_session(sid).next_seq == 0 and client.acquire_lease(sid).writer_id  # nothing held


def test_an_envelope_key_the_spec_does_not_name_is_refused(client: SessionLogClient, sid: str) -> None:
    # Dropped unseen: `event_id` for `eventId` gave the event a fresh id (sent twice, it was
    # appended twice), `payload` for `data` stored {}.
    client.create_session(sid)
    misspelt = {**note(0), "event_id": "E1"}
    lease = client.acquire_lease(sid)
    with pytest.raises(ValidationError, match="'event_id' \\(did you mean 'eventId'\\?\\)") as unary:
        client.append(sid, lease, [note(1), misspelt])
    assert (unary.value.reason, unary.value.field, unary.value.metadata["event_index"]) == (
        "BAD_ENVELOPE",
        "event_id",
        "1",
    )
    client.release_lease(lease)
    with client.writer(sid) as writer:
        with pytest.raises(ValidationError) as streamed:
            writer.append([{"type": "test/note", "ignorable": True, "payload": {"n": 1}}])
        assert (streamed.value.reason, streamed.value.field) == ("BAD_ENVELOPE", "payload")

    async def asynchronously() -> ValidationError:
        async with AsyncSessionLogClient(client.target) as aclient, aclient.writer(sid) as awriter:
            with pytest.raises(ValidationError) as refused:
                await awriter.append([misspelt])
            return refused.value

    assert asyncio.run(asynchronously()).reason == "BAD_ENVELOPE"
    assert client.get_session(sid).next_seq == 0
    # seq and time, of an event read back and sent again, are the service's to assign: ignored.
    with client.writer(sid) as writer:
        assert writer.append([{**note(2), "seq": 7, "time": 1}]).result().seqs == [0]


def test_a_session_id_or_type_with_a_lone_surrogate_is_a_validation_error(client: SessionLogClient, sid: str) -> None:
    # Every call raised protobuf's UnicodeEncodeError, untyped; the service's rule now refuses it
    # before anything is sent, as the writer id's and the eventId's do.
    lone = "s\ud800"
    for call in (
        lambda: client.create_session(lone),
        lambda: client.get_session(lone),
        lambda: client.writer(lone, create_if_missing=True),
        lambda: client.acquire_lease(lone),
        lambda: client.resume(lone),
        lambda: client.model_history(lone),
        lambda: list(client.read_events(lone)),
        lambda: client.fork(lone, 0),
        lambda: list(client.list_sessions(parent_session_id=lone)),
    ):
        with pytest.raises(ValidationError) as refused:
            call()
        assert refused.value.reason == "BAD_SESSION_ID"
    client.create_session(sid)
    with pytest.raises(ValidationError) as fork:
        client.fork(sid, 0, new_session_id=lone)
    assert (fork.value.reason, fork.value.field) == ("BAD_SESSION_ID", "new_session_id")
    with client.writer(sid) as writer:
        with pytest.raises(ValidationError) as kind:
            writer.append([{"type": "test/\udc00", "ignorable": True, "data": {}}])
        assert (kind.value.reason, kind.value.metadata["event_index"]) == ("BAD_TYPE", "0")
    assert client.get_session(sid).next_seq == 0


SEQ_CALLS: dict[str, Callable[[SessionLogClient, str], Any]] = {
    "read_events": lambda c, sid: list(c.read_events(sid, from_seq=-1)),
    "read_events to": lambda c, sid: list(c.read_events(sid, to_seq=1.5)),  # type: ignore[arg-type]
    "model_history": lambda c, sid: c.model_history(sid, at_seq=-1),
    "stats": lambda c, sid: c.stats(sid, at_seq=True),  # type: ignore[arg-type]
    "fork": lambda c, sid: c.fork(sid, -1),
    "subscribe": lambda c, sid: next(iter(c.subscribe(sid, from_seq=-1))),
    # Past uint64: the request could not be encoded (ValueError: Value out of range).
    "read_events past uint64": lambda c, sid: list(c.read_events(sid, from_seq=2**64)),
    "transcript past uint64": lambda c, sid: c.transcript(sid, at_seq=2**64),
    "fork past uint64": lambda c, sid: c.fork(sid, 2**64),
}


@pytest.mark.parametrize("call", SEQ_CALLS.values(), ids=SEQ_CALLS.keys())
def test_a_seq_argument_that_is_not_a_non_negative_integer_is_refused(
    client: SessionLogClient, sid: str, call: Callable[[SessionLogClient, str], Any]
) -> None:
    client.create_session(sid)
    with pytest.raises(ValidationError) as refused:
        call(client, sid)
    assert refused.value.reason == "BAD_SEQ" and refused.value.metadata["field"] in ("from_seq", "to_seq", "at_seq")


def test_a_writer_refuses_a_bad_expected_next_seq_and_goes_on(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid, max_in_flight=1) as writer:  # a refused batch must not keep the one slot
        with pytest.raises(ValidationError) as refused:
            writer.append([note(0)], expected_next_seq=-1)
        assert refused.value.metadata["field"] == "expected_next_seq"
        assert writer.append([note(1)], expected_next_seq=0).result().seqs == [0]


@pytest.mark.parametrize("header", ["config", None, [{"config": {}}]])
def test_a_writer_refuses_a_header_that_is_not_an_object_and_goes_on(
    client: SessionLogClient, sid: str, header: Any
) -> None:
    # `dict(header)` raised a bare ValueError or TypeError; sent, the refusal ended the writer.
    client.create_session(sid)
    with client.writer(sid, max_in_flight=1) as writer:
        with pytest.raises(ValidationError) as refused:
            writer.report_header(header)
        assert refused.value.reason == "HEADER_NOT_OBJECT"
        assert writer.append([note(0)]).result().seqs == [0]


BAD_HEADERS = {
    "tools: []": ({"config": {"model": "m"}, "tools": []}, "HEADER_EMPTY_TOOLS"),
    "config.messages": ({"config": {"model": "m", "messages": []}}, "HEADER_CONFIG_RESERVED_KEY"),
    "no config": ({"tools": [{"name": "t"}]}, "HEADER_CONFIG_MISSING"),
    "a system prompt": ({"config": {}, "system": "s"}, "HEADER_SYSTEM_FORBIDDEN"),
}


@pytest.mark.parametrize("header, reason", BAD_HEADERS.values(), ids=BAD_HEADERS.keys())
def test_a_writer_refuses_a_header_the_service_would_and_goes_on(
    client: SessionLogClient, sid: str, header: dict[str, Any], reason: str
) -> None:
    # Sent, the refusal ended the writer, and every later header or append said so: a harness
    # with no tools sent `tools: []`. The service's rule (`check_header`) refuses it first now.
    client.create_session(sid)
    with client.writer(sid, max_in_flight=1) as writer:
        with pytest.raises(ValidationError) as refused:
            writer.report_header(header)
        assert refused.value.reason == reason
        assert writer.report_header({"config": {"model": "m"}}).result().reason == "initial"
        assert writer.append([note(0)]).result().seqs == [1]


def test_a_failed_writer_says_later_batches_meet_its_earlier_failure(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    writer = client.writer(sid)
    with pytest.raises(ValidationError) as first:
        writer.append([{"type": "bogus/type", "data": {}}]).result()
    assert first.value.reason == "UNKNOWN_TYPE"
    with pytest.raises(ValidationError) as later:
        writer.append([note(0)])
    assert later.value.reason == "UNKNOWN_TYPE"  # the failure's class and reason, for code that tells them apart
    assert later.value.message.startswith("the writer was closed by an earlier error (UNKNOWN_TYPE: event 0: ")
    assert later.value.metadata == {} and first.value.metadata["event_index"] == "0"  # not this call's event
    assert later.value.__cause__ is first.value
    with pytest.raises(ValidationError) as flushed:
        writer.flush()
    assert flushed.value is first.value  # flush raises the failure itself, as documented
    assert list(client.read_events(sid)) == []


def test_batches_pipelined_behind_a_refused_one_say_they_were_not_acknowledged(server: ServerThread, sid: str) -> None:
    # They failed with the refusal itself, word for word, its metadata naming the refused
    # batch's event: as if each of them had that fault.
    def check(refused: BaseException | None, behind: list[BaseException | None]) -> None:
        assert isinstance(refused, ValidationError) and refused.reason == "UNKNOWN_TYPE"
        assert refused.metadata["event_index"] == "0"
        for later in behind:
            assert isinstance(later, ValidationError) and later.reason == "UNKNOWN_TYPE"
            assert later.message.startswith("the writer was closed by an earlier error (UNKNOWN_TYPE: event 0: ")
            assert later.message.endswith("; this batch was not acknowledged")
            assert later.metadata == {} and later.__cause__ is refused

    with SessionLogClient(server.target) as client:
        writer = client.writer(sid, create_if_missing=True)
        futures = [
            writer.append([{"type": "bogus/type", "data": {}}]),
            writer.append([note(0)]),
            writer.append([note(1)]),
        ]
        check(futures[0].exception(timeout=30), [f.exception(timeout=30) for f in futures[1:]])
        assert list(client.read_events(sid)) == []

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            writer = await client.writer(f"{sid}-aio", create_if_missing=True)
            futures = [
                await writer.append([{"type": "bogus/type", "data": {}}]),
                await writer.append([note(0)]),
                await writer.append([note(1)]),
            ]
            await asyncio.wait(futures, timeout=30)
            check(futures[0].exception(), [f.exception() for f in futures[1:]])

    asyncio.run(scenario())


def test_the_asyncio_client_refuses_the_same(server: ServerThread, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            with pytest.raises(ValidationError, match="from_seq"):
                [e async for e in client.read_events(sid, from_seq=-1)]
            writer = await client.writer(sid)
            with pytest.raises(ValidationError) as empty:
                await writer.append([{**note(0), "eventId": ""}])
            assert empty.value.reason == "BAD_EVENT_ID"
            with pytest.raises(ValidationError):
                await writer.append([note(0)], expected_next_seq=-2)
            assert (await (await writer.append([note(1)]))).seqs == [0]
            await writer.close()

    asyncio.run(scenario())


def test_a_closed_sync_client_says_so_on_every_kind_of_call(server: ServerThread, sid: str) -> None:
    """As the asyncio client does: RuntimeError naming the closed client, not gRPC's ValueError
    about a closed channel, and nothing is sent."""
    client = SessionLogClient(server.target)
    client.create_session(sid)
    client.close()
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("get_session", lambda: client.get_session(sid)),
        ("writer", lambda: client.writer(sid)),
        ("lease_writer", lambda: client.lease_writer(sid)),
        ("read_events", lambda: list(client.read_events(sid))),
        ("subscribe", lambda: client.subscribe(sid)),
    ]
    for what, call in calls:
        try:
            call()
        except RuntimeError as exc:
            assert "the client is closed" in str(exc), what
        else:
            pytest.fail(f"{what} on a closed client raised nothing")
    with SessionLogClient(server.target) as other:
        assert other.get_session(sid).next_seq == 0


def test_a_lease_writer_ends_quietly_with_its_closed_client(server: ServerThread, sid: str) -> None:
    """Its heartbeats stop without an exception (none escapes the heartbeat thread or task), and
    its close() leaves the lease to lapse instead of failing to give it back."""
    escaped: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:
        client = SessionLogClient(server.target)
        client.create_session(sid)
        writer = client.lease_writer(sid, heartbeat=0.05)
        client.close()
        time.sleep(0.3)  # several heartbeats' time
        writer.close()
    finally:
        threading.excepthook = previous
    assert escaped == []

    async def asyncio_side() -> list[dict[str, Any]]:
        client = AsyncSessionLogClient(server.target)
        await client.create_session(f"{sid}-a")
        writer = await client.lease_writer(f"{sid}-a", heartbeat=0.05)
        await client.close()
        await asyncio.sleep(0.3)
        await writer.close()
        return failures

    failures: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: failures.append(context))
    try:
        assert loop.run_until_complete(asyncio_side()) == []
    finally:
        loop.close()


def test_closing_the_sync_client_ends_its_writers(server: ServerThread, sid: str) -> None:
    """As the asyncio client's close does: a batch in flight fails as of unknown outcome, saying
    the client was closed (not gRPC's CANCELLED "Channel closed!"), later calls say the writer
    was closed by that, its close() is quiet, and nothing escapes its reader thread."""
    escaped: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:
        client = SessionLogClient(server.target)
        writer = client.writer(sid, create_if_missing=True)
        writer.append([note(0)]).result(10)
        gate = hold_writer(server)
        try:
            in_flight = writer.append([note(1)])
            time.sleep(0.1)  # sent, not committed
            client.close()
        finally:
            gate.set()
        # CANCELLED, not retryable: an Unavailable invited a retry on the closed client
        with pytest.raises(WriterClosed, match="client was closed") as failed:
            in_flight.result(10)
        assert (failed.value.reason, failed.value.code) == ("CANCELLED", "CANCELLED")
        with pytest.raises(WriterClosed, match="earlier error"):
            writer.append([note(2)])
        writer.close()
        time.sleep(0.2)
    finally:
        threading.excepthook = previous
    assert escaped == []
    with SessionLogClient(server.target) as again:  # the batch in flight: at most once
        assert [e.data["n"] for e in again.read_events(sid)] in ([0], [0, 1])


def test_closing_the_sync_client_ends_its_subscriptions(server: ServerThread, sid: str) -> None:
    """As the asyncio client's close does: a subscription being iterated (by a dashboard's
    thread, say) raises that the client is closed, where it raised a ServerError of gRPC's
    CANCELLED "Channel closed!", as if the service had failed."""
    client = SessionLogClient(server.target)
    client.create_session(sid)
    subscription = client.subscribe(sid)
    thread, seen = follow_in_thread(subscription)
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    client.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(seen) == 2 and isinstance(seen[1], RuntimeError), seen
    assert "the client is closed" in str(seen[1])


@pytest.mark.parametrize("max_in_flight", [0, -1, 1.5, True])
def test_a_writer_in_flight_limit_that_is_not_a_positive_integer_is_refused(
    server: ServerThread, sid: str, max_in_flight: Any
) -> None:
    """With 0 no batch ever got a slot: the sync writer's append blocked forever (and the
    asyncio one's waited forever). Refused before anything is sent, by both clients."""
    with SessionLogClient(server.target) as client, pytest.raises(ValueError, match="max_in_flight"):
        client.writer(sid, create_if_missing=True, max_in_flight=max_in_flight)

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            with pytest.raises(ValueError, match="max_in_flight"):
                await client.writer(sid, create_if_missing=True, max_in_flight=max_in_flight)
            with pytest.raises(NotFound):
                await client.get_session(sid)  # nothing was sent

    asyncio.run(scenario())
