"""Reading, listing and subscribing through a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OutOfRange
from sessionlog.core.events import Event
from sessionlog.requests import CaughtUp
from tests.support.events import note
from tests.support.servers import ServerThread
from tests.support.waiting import eventually


def test_read_range_and_pages(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([note(i) for i in range(1200)]).result()
    assert [e.seq for e in client.read_events(sid, from_seq=10, to_seq=14)] == [10, 11, 12, 13, 14]
    assert [e.seq for e in client.read_events(sid, page_size=7)] == list(range(1200))
    assert [e.seq for e in client.read_events(sid, from_seq=1190, to_seq=5000)] == list(range(1190, 1200))


def test_a_read_from_past_the_head_is_refused_as_a_subscription_is(server: ServerThread, sid: str) -> None:
    """A read from a seq the log has not reached (a typo'd from_seq, another session's seq) read
    nothing, as a read of a session with nothing there would: an auditor took it for "no events".
    It is OUT_OF_RANGE, FROM_SEQ_PAST_HEAD, as SubscribeEvents answers; a read from the head (a
    poll for what came since) is still an empty read."""
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        assert list(client.read_events(sid)) == []  # an empty session reads empty, from its head
        with pytest.raises(OutOfRange) as empty:
            list(client.read_events(sid, from_seq=1))
        assert empty.value.reason == "FROM_SEQ_PAST_HEAD"
        with client.writer(sid) as writer:
            writer.append([note(i) for i in range(3)]).result()
        assert list(client.read_events(sid, from_seq=3)) == []  # the head: nothing since
        assert list(client.read_events(sid, from_seq=3, to_seq=9)) == []
        with pytest.raises(OutOfRange) as past:
            list(client.read_events(sid, from_seq=4))
        assert (past.value.reason, past.value.metadata) == (
            "FROM_SEQ_PAST_HEAD",
            {"session_id": sid, "from_seq": "4", "next_seq": "3"},
        )
        assert str(past.value) == f"cannot read session {sid!r} from seq 4: its next seq is 3"

    async def read_past_the_head() -> OutOfRange:
        async with AsyncSessionLogClient(server.target) as aio:
            with pytest.raises(OutOfRange) as refused:
                [e async for e in aio.read_events(sid, from_seq=50)]
            return refused.value

    assert asyncio.run(read_past_the_head()).metadata["next_seq"] == "3"


def test_subscription_replays_then_marks_caught_up_then_goes_live(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([note(0), note(1), note(2)]).result()
        subscription = client.subscribe(sid, from_seq=1)
        items: list[Event | CaughtUp] = []
        caught_up = threading.Event()
        done = threading.Event()

        def consume() -> None:
            for item in subscription:
                items.append(item)
                if isinstance(item, CaughtUp):
                    caught_up.set()
                if isinstance(item, Event) and item.seq == 5:
                    done.set()
                    return

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert caught_up.wait(10)
        writer.append([note(3)]).result()
        writer.append([note(4), note(5)]).result()
        assert done.wait(10)
        subscription.cancel()
    kinds = [("marker", i.next_seq) if isinstance(i, CaughtUp) else ("event", i.seq) for i in items]
    assert kinds == [("event", 1), ("event", 2), ("marker", 3), ("event", 3), ("event", 4), ("event", 5)]


def test_breaking_out_of_a_subscription_ends_it_on_the_service(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    # A dashboard keeps its subscription object and stops reading with `break`, as it would
    # with the asyncio client's `async for`. The stream stayed open on the service (a
    # subscriber, one of its open streams, and events sent to no one) until `cancel()`.
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([note(0)]).result()
    subscription = client.subscribe(sid)
    for item in subscription:
        if isinstance(item, CaughtUp):
            break
    assert (
        eventually(lambda: server.service.hub.has_subscribers(sid), lambda followed: not followed, timeout=10) is False
    )
    assert list(subscription) == []  # ended: iterating again yields nothing, and waits for nothing


def test_list_sessions_pages_through_everything(db_url: str) -> None:
    # A server of its own namespace is not needed: ids are unique; count what we create.
    server = ServerThread(db_url)
    try:
        with SessionLogClient(server.target) as client:
            before = {s.id for s in client.list_sessions()}
            created = {client.create_session().id for _ in range(25)}
            listed = [s.id for s in client.list_sessions(page_size=4)]
            assert len(listed) == len(set(listed))
            assert set(listed) - before == created
    finally:
        server.stop()


def test_health_and_reflection_are_served(server: ServerThread) -> None:
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        response = health.Check(health_pb2.HealthCheckRequest(service="sessionlog.v1.SessionService"))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for s in next(answers).list_services_response.service}
        assert "sessionlog.v1.SessionService" in names
