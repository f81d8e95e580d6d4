"""A stream that has gone quiet keeps nothing of the events that passed through it.

A host runs many agents, each with a writer stream open for as long as it lives, most of them
idle most of the time; a dashboard follows sessions that are mostly quiet. Had a stream kept
its last request (or a subscription its last page) until the next one came, the server would
hold each idle agent's last event (a tool result of megabytes) twice over, decoded and on the
wire, and each quiet subscription up to a page of events, for as long as they stay quiet. The
same holds for a harness running many agents over one asyncio client.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from typing import Any

import grpc
from google.protobuf.message import Message

from sessionlog import convert
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.convert import DecodedEvent
from sessionlog.core.events import Event, NewEvent
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1 import session_service_pb2_grpc
from tests.support.servers import ServerThread

QUIET_WITHIN_S = 5.0
"""How long the server may take to let go of what it handed on (far longer than it needs)."""


def _marked(marker: str) -> NewEvent:
    return NewEvent("test/note", {marker: "x" * 100_000}, ignorable=True)


def _batch(batch_id: int, marker: str) -> pb.WriteRequest:
    return pb.WriteRequest(batch=pb.WriteBatch(batch_id=batch_id, events=[convert.new_event_to_pb(_marked(marker))]))


def _carries(obj: object, marker: str) -> bool:
    """Whether `obj` is an event, decoded or on the wire, that carries the marked payload."""
    if isinstance(obj, Event | NewEvent):
        return marker in obj.data
    if isinstance(obj, DecodedEvent):
        return marker.encode() in obj.raw
    return isinstance(obj, Message) and marker.encode() in obj.SerializeToString()


def _holding(marker: str) -> list[str]:
    """What in this process (the server runs in it) still holds the marked event, by type, once
    the stream is quiet: the server may still be finishing the message the client already has,
    so this looks again for a while; a reference kept while the stream waits never goes."""
    deadline = time.monotonic() + QUIET_WITHIN_S
    while True:
        gc.collect()
        found = [type(obj).__name__ for obj in gc.get_objects() if _carries(obj, marker)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_an_idle_writer_stream_keeps_none_of_its_last_request(server: ServerThread, sid: str) -> None:
    marker = f"marker-{uuid.uuid4().hex}"

    async def scenario() -> tuple[list[str], Any]:
        async with grpc.aio.insecure_channel(server.target) as channel:
            call = session_service_pb2_grpc.SessionServiceStub(channel).Write()
            await call.write(pb.WriteRequest(open=pb.OpenWriter(session_id=sid, writer_id="w", create_if_missing=True)))
            assert (await call.read()).HasField("opened")
            await call.write(_batch(1, marker))
            acked = await call.read()
            held = await asyncio.to_thread(_holding, marker)  # the stream is open and idle
            await call.write(pb.WriteRequest(close=pb.CloseWriter()))
            await call.done_writing()
            return held, acked

    held, acked = asyncio.run(scenario())
    assert list(acked.ack.seqs) == [0]
    assert held == []


def _append_marked(client: SessionLogClient, sid: str, marker: str) -> None:
    with client.writer(sid, create_if_missing=True) as writer:
        writer.append([_marked(marker)])


def _followed(server: ServerThread, sid: str, marker: str, append: Any) -> list[str]:
    """Subscribe from seq 0, read until the marked event arrived (calling `append` once caught
    up), drop what was read, and say what still holds the event while the subscription waits."""

    async def scenario() -> list[str]:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = session_service_pb2_grpc.SessionServiceStub(channel)
            call = stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id=sid, from_seq=0))
            while True:
                response = await call.read()
                if response.HasField("caught_up"):
                    await asyncio.to_thread(append)
                elif marker.encode() in response.SerializeToString():
                    break
            del response
            held = await asyncio.to_thread(_holding, marker)  # the subscription is open and quiet
            call.cancel()
            return held

    return asyncio.run(scenario())


def test_an_idle_subscription_keeps_none_of_the_events_it_replayed(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    _append_marked(client, sid, marker)
    assert _followed(server, sid, marker, lambda: None) == []


def test_an_idle_subscription_keeps_none_of_the_events_it_was_sent_live(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    client.create_session(sid)
    assert _followed(server, sid, marker, lambda: _append_marked(client, sid, marker)) == []


def test_an_idle_asyncio_writer_keeps_none_of_its_acknowledged_events(server: ServerThread, sid: str) -> None:
    marker = f"marker-{uuid.uuid4().hex}"

    async def scenario() -> list[str]:
        async with (
            AsyncSessionLogClient(server.target) as client,
            await client.writer(sid, create_if_missing=True) as w,
        ):
            await (await w.append([_marked(marker)]))
            return await asyncio.to_thread(_holding, marker)  # client and server alike

    assert asyncio.run(scenario()) == []
