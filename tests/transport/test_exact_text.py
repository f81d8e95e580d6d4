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


#: Session metadata as a client sent it: number spellings JSONB rewrites (-0.0 became 0.0 and
#: 1e308 a 309-digit integer on PostgreSQL), an integer past 64 bits, key order, escapes, raw
#: UTF-8 and whitespace.
METADATA = (
    '{"zeta":-0.0,"alpha":1e308,"one":1.0,"hundred":1E+2,"big":123456789012345678901234567890,'
    '"text":"caf\\u00e9 é 😀 \\u2028", "spaced" : [ 1 , 2 ] }'
).encode()


def _metadata_seen(client: SessionLogClient, sid: str) -> list[bytes]:
    """The session's metadata text as GetSession and ListSessions (its fork's listing) return it."""
    got = client.stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.metadata_json
    listed = client.stub.ListSessions(pb.ListSessionsRequest(parent_session_id=sid)).sessions
    return [got, *(session.metadata_json for session in listed)]


def test_session_metadata_comes_back_byte_for_byte(fresh_db: str, sid: str) -> None:
    server = ServerThread(fresh_db, lease_ttl_ms=5_000)
    try:
        with SessionLogClient(server.target) as client:
            created = client.stub.CreateSession(pb.CreateSessionRequest(session_id=sid, metadata_json=METADATA))
            assert created.session.metadata_json == METADATA
            _append_raw(client, sid)
            fork = client.stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=0, new_session_id=f"{sid}-f"))
            assert fork.session.metadata_json == METADATA  # a fork carries its source's text
            assert _metadata_seen(client, sid) == [METADATA, METADATA]
            empty = client.stub.CreateSession(pb.CreateSessionRequest(session_id=f"{sid}-e"))
            assert empty.session.metadata_json == b""  # "empty means {}", as before
    finally:
        server.stop(grace=0.5)
    again = ServerThread(fresh_db, lease_ttl_ms=5_000)
    try:
        with SessionLogClient(again.target) as client:
            assert _metadata_seen(client, sid) == [METADATA, METADATA]
            assert client.stub.GetSession(pb.GetSessionRequest(session_id=f"{sid}-e")).session.metadata_json == b""
    finally:
        again.stop(grace=0.5)
