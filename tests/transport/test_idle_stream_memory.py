"""An open writer stream that has gone quiet keeps nothing of the requests it was sent.

A host runs many agents, each with a writer stream open for as long as it lives, most of them
idle most of the time. Had a stream kept its last request until the next one came, the server
would hold each idle agent's last event (a tool result of megabytes) twice over, decoded and
on the wire, for as long as the agent is quiet.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from typing import Any

import grpc
from google.protobuf.message import Message

from sessionlog import convert
from sessionlog.convert import DecodedEvent
from sessionlog.core.events import NewEvent
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1 import session_service_pb2_grpc
from tests.support.servers import ServerThread


def _batch(batch_id: int, marker: str) -> pb.WriteRequest:
    event = convert.new_event_to_pb(NewEvent("test/note", {marker: "x" * 100_000}, ignorable=True))
    return pb.WriteRequest(batch=pb.WriteBatch(batch_id=batch_id, events=[event]))


def _wire_bytes(obj: DecodedEvent | Message) -> bytes:
    return obj.raw if isinstance(obj, DecodedEvent) else obj.SerializeToString()


def _holding(marker: str) -> list[str]:
    """What in this process (the server runs in it) still holds the marked event, by type."""
    gc.collect()
    found: list[str] = []
    wire = marker.encode()
    for obj in gc.get_objects():
        if isinstance(obj, dict) and marker in obj:
            found.append("decoded data")
        elif isinstance(obj, DecodedEvent | Message) and wire in _wire_bytes(obj):
            found.append(type(obj).__name__)
    return found


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
