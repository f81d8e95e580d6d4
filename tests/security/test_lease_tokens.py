"""Holding a lease takes its token, never its writer id (SPEC §7), on both databases.

Raw stubs are used where the client would hide the problem: a caller that only knows the
holder's writer id (which WRITER_HELD and GetSession show) must get nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

import grpc
import pytest
from sqlalchemy import create_engine, text

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OwnershipLost, WriterHeld
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.storage.factory import normalise_url
from tests.support.events import note
from tests.support.servers import ServerThread


def _raw_note(n: int) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type="test/note", ignorable=True, data_json=b'{"n": %d}' % n)


def _refusal(fn: Any, request: Any) -> tuple[grpc.StatusCode, Any]:
    with pytest.raises(grpc.RpcError) as refused:
        fn(request)
    return refused.value.code(), refused.value


def test_knowing_the_writer_id_takes_nothing(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid, writer_id="alice")
    client.append(sid, lease, [note(0)])
    # Everyone may learn the holder's writer id: it is a label.
    held = client.get_session(sid).lease
    assert held is not None and held.writer_id == "alice" and held.token == ""
    with pytest.raises(WriterHeld) as refused:
        client.acquire_lease(sid, writer_id="alice")
    assert refused.value.metadata["holder"] == "alice"
    assert lease.token not in str(refused.value) and lease.token not in repr(refused.value.metadata)
    stub = client.stub
    for forged in ["", "alice", lease.token[:-1], lease.token + "x"]:
        code, error = _refusal(
            stub.AppendEvents, pb.AppendEventsRequest(session_id=sid, lease_token=forged, events=[_raw_note(1)])
        )
        assert code == grpc.StatusCode.ABORTED and from_rpc_error(error).reason == "OWNERSHIP_LOST"
        for method, message in [(stub.RenewLease, pb.RenewLeaseRequest), (stub.ReleaseLease, pb.ReleaseLeaseRequest)]:
            code, error = _refusal(method, message(session_id=sid, lease_token=forged))
            assert code == grpc.StatusCode.ABORTED, (message.__name__, code)
        code, _ = _refusal(
            stub.ReportRequestHeader,
            pb.ReportRequestHeaderRequest(session_id=sid, lease_token=forged, header_json=b'{"config":{}}'),
        )
        assert code == grpc.StatusCode.ABORTED
        # A writer stream that names the holder gets WRITER_HELD too, not the lease.
        with pytest.raises(WriterHeld):
            client.writer(sid, writer_id="alice", reconnect_attempts=0)
    # The real holder was never fenced out: same epoch, and it still appends.
    after = client.get_session(sid).lease
    assert after is not None and after.epoch == lease.epoch
    assert client.append(sid, lease, [note(2)]).seqs == [1]
    assert [e.data["n"] for e in client.read_events(sid)] == [0, 2]


def test_the_holder_retakes_its_live_lease_with_its_token(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid, writer_id="w")
    again = client.acquire_lease(sid, writer_id="w", lease_token=lease.token)
    assert again.epoch == lease.epoch + 1
    assert again.token == lease.token  # a lost answer to a retake costs nothing
    client.append(sid, again, [note(0)])
    renewed = client.renew_lease(again)
    assert renewed.token == again.token and renewed.expire_time >= again.expire_time
    client.release_lease(renewed)
    assert client.get_session(sid).lease is None
    with pytest.raises(OwnershipLost):
        client.append(sid, renewed, [note(1)])  # released: the token holds nothing any more


def test_takeover_issues_a_new_token_and_spends_the_old_one(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    old = client.acquire_lease(sid, writer_id="old")
    new = client.acquire_lease(sid, writer_id="old", takeover=True)
    assert new.token != old.token and new.epoch == old.epoch + 1
    with pytest.raises(OwnershipLost):
        client.append(sid, old, [note(0)])
    with pytest.raises(OwnershipLost):  # spent: its lease is gone, held by another or not
        client.acquire_lease(sid, lease_token=old.token)
    assert client.append(sid, new, [note(1)]).seqs == [0]


def test_only_the_token_hash_is_stored(client: SessionLogClient, server: ServerThread, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    engine = create_engine(normalise_url(server.settings.db))
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM sessions WHERE id = :id"), {"id": sid}).mappings().one()
    finally:
        engine.dispose()
    assert row["lease_token_hash"] == hashlib.sha256(lease.token.encode()).hexdigest()
    assert lease.token not in repr(dict(row))


def test_a_streaming_writer_gets_a_token_and_reconnects_with_it(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    writer = client.writer(sid, writer_id="s")
    try:
        writer.append([note(0)]).result()
        assert writer.lease.token
        # A second stream presenting the first stream's token takes the lease (a reconnect);
        # the first stream is fenced at its old epoch.
        raw = client.stub.Write(
            iter([pb.WriteRequest(open=pb.OpenWriter(session_id=sid, writer_id="s", lease_token=writer.lease.token))])
        )
        opened = next(raw).opened
        assert opened.lease.epoch == writer.lease.epoch + 1 and opened.lease_token == writer.lease.token
        raw.cancel()
    finally:
        writer.close()
