"""Stored bytes come back as they were sent (SPEC §12), on SQLite and PostgreSQL, before and
after a restart: key order, number spelling (1e20 stays 1e20, 1.0 stays 1.0), escapes and
whitespace of the accepted JSON text are kept, for ReadEvents and for live subscribers.
Raw stubs: the Python client would re-serialise what it sends.
"""

from __future__ import annotations

from typing import Any

from sessionlog.client import SessionLogClient
from sessionlog.requests import read_request
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.servers import ServerThread

TEXTS = [
    b'{"zeta":1,"alpha":2,"mid":{"b":[3,2,1],"a":null}}',
    b'{"big":1e20,"small":1.0,"neg":-0.0,"exp":2.5E-3,"int":12345678901234567890}',
    b'{"text":"caf\\u00e9 \\ud83d\\ude00 \\u2028 tab\\t", "spaced" : [ 1 , 2 ] }',
]


def _append_raw(client: SessionLogClient, sid: str) -> list[int]:
    lease = client.acquire_lease(sid)
    events = [event_pb2.NewEvent(type="test/raw", data_json=text, ignorable=True) for text in TEXTS]
    response = client.stub.AppendEvents(pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=events))
    return list(response.seqs)


def _read_raw(client: SessionLogClient, sid: str) -> list[bytes]:
    out: list[bytes] = []
    for response in client.stub.ReadEvents(read_request(sid, 0, None, 100)):
        out += [event.data_json for event in response.events]
    return out


def test_stored_json_text_comes_back_byte_for_byte(fresh_db: str, sid: str) -> None:
    server = ServerThread(fresh_db, lease_ttl_ms=5_000)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            subscription = client.stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id=sid, from_seq=0))
            first = next(iter(subscription))
            assert first.WhichOneof("kind") == "caught_up"
            seqs = _append_raw(client, sid)
            live: list[Any] = []
            for response in subscription:
                live += [event.data_json for event in response.events.events]
                if len(live) >= len(TEXTS):
                    break
            subscription.cancel()
            assert live == TEXTS
            assert _read_raw(client, sid) == TEXTS
            assert seqs == [0, 1, 2]
    finally:
        server.stop(grace=0.5)
    again = ServerThread(fresh_db, lease_ttl_ms=5_000)
    try:
        with SessionLogClient(again.target) as client:
            assert _read_raw(client, sid) == TEXTS
    finally:
        again.stop(grace=0.5)
