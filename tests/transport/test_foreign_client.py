"""The wire protocol as a client in another language meets it: generated stubs and the protos'
comments only, every request built by hand (no client library to smooth a mistake over).

Each error must be the one the `ErrorReason` catalogue (error_reason.proto) promises for that
mistake, so a foreign client can switch on the reason and act on it.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note, system, user


def _raw_note(n: int) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type="test/note", ignorable=True, data_json=b'{"n": %d}' % n)


def _refusal(answers: Iterator[pb.WriteResponse]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        list(answers)
    return refused.value


@pytest.mark.parametrize(
    "request_",
    [
        pb.WriteRequest(),  # no kind set: a client that forgot to fill the oneof
        pb.WriteRequest.FromString(b"\x4a\x00"),  # field 9: a kind from a newer proto, unknown here
    ],
    ids=["empty", "unknown-kind"],
)
def test_a_writer_message_of_no_known_kind_is_named_as_such(
    client: SessionLogClient, sid: str, request_: pb.WriteRequest
) -> None:
    opened = pb.WriteRequest(open=pb.OpenWriter(session_id=sid, create_if_missing=True))
    batch = pb.WriteRequest(batch=pb.WriteBatch(batch_id=1, events=[_raw_note(0)]))
    answers = client.stub.Write(iter([opened, batch, request_]), timeout=10)
    assert next(answers).HasField("opened")
    assert next(answers).ack.seqs == [0]  # what came before is acknowledged first
    refused = _refusal(answers)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(refused)
    # Not WRITER_ALREADY_OPEN: this writer sent `open` once only, and would look for a bug there.
    assert error.reason == "WRITE_REQUEST_EMPTY", error
    assert error.metadata["field"] == "kind"
    assert client.get_session(sid).lease is None  # the stream ended as the service meant: released


def test_forking_a_session_without_events_is_empty_source(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    for at_seq in (0, 5):
        with pytest.raises(grpc.RpcError) as refused:
            client.stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=at_seq))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert from_rpc_error(refused.value).reason == "EMPTY_SOURCE"
    with client.writer(sid) as writer:
        writer.append([note(0)]).result()
    # Past the head of a session that has events is still SEQ_NOT_FOUND.
    with pytest.raises(grpc.RpcError) as refused:
        client.stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=1))
    assert from_rpc_error(refused.value).reason == "SEQ_NOT_FOUND"
    assert client.stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=0)).session.parent.session_id == sid


def test_a_page_token_is_refused_for_another_session(client: SessionLogClient, sid: str) -> None:
    # AIP-158: a token continues the request it came from. Both sessions are long enough that
    # the first one's token, unchecked, read the second at the first's seq and index.
    other = f"{sid}-other"
    for session in (sid, other):
        with client.writer(session, create_if_missing=True) as writer:
            writer.append([system("s"), *(user(f"{session} {i}") for i in range(3))]).result()
    scope = pb.ProjectionScope(session_id=sid)
    history = client.stub.GetModelHistory(pb.GetModelHistoryRequest(scope=scope, page_size=1))
    transcript = client.stub.GetTranscript(pb.GetTranscriptRequest(scope=scope, page_size=1))
    assert history.next_page_token and transcript.next_page_token
    elsewhere = pb.ProjectionScope(session_id=other)
    calls = [
        lambda: client.stub.GetModelHistory(
            pb.GetModelHistoryRequest(scope=elsewhere, page_size=1, page_token=history.next_page_token)
        ),
        lambda: client.stub.GetTranscript(
            pb.GetTranscriptRequest(scope=elsewhere, page_size=1, page_token=transcript.next_page_token)
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        error = from_rpc_error(refused.value)
        assert error.reason == "BAD_PAGE_TOKEN" and error.metadata["field"] == "page_token"
    # In its own session the token goes on where it left off.
    second = client.stub.GetModelHistory(
        pb.GetModelHistoryRequest(scope=scope, page_size=1, page_token=history.next_page_token)
    )
    assert second.from_index == 1 and f"{sid} 0".encode() in second.messages_json


def test_a_call_without_its_lease_token_says_which_field_is_missing(client: SessionLogClient, sid: str) -> None:
    # Still OWNERSHIP_LOST (an empty token holds no lease, as any wrong one), but a caller that
    # never set the field learns that, and where its token comes from, not only "reopen".
    client.create_session(sid)
    stub = client.stub
    calls = [
        lambda: stub.AppendEvents(pb.AppendEventsRequest(session_id=sid, events=[_raw_note(0)])),
        lambda: stub.RenewLease(pb.RenewLeaseRequest(session_id=sid)),
        lambda: stub.ReleaseLease(pb.ReleaseLeaseRequest(session_id=sid)),
        lambda: stub.ReportRequestHeader(pb.ReportRequestHeaderRequest(session_id=sid, header_json=b'{"config":{}}')),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.ABORTED
        assert from_rpc_error(refused.value).reason == "OWNERSHIP_LOST"
        assert "no lease_token" in refused.value.details() and "AcquireLease" in refused.value.details()
    assert list(client.read_events(sid)) == []


def test_a_session_listing_token_is_refused_with_another_parent_filter(client: SessionLogClient, sid: str) -> None:
    # AIP-158: a ListSessions token continues its own listing. Presented with another
    # parent_session_id (or none), it went on with the new filter from the first one's position.
    with client.writer(sid, create_if_missing=True) as writer:
        writer.append([note(1)]).result()
    other = f"{sid}-other"
    client.create_session(other)
    forks = [client.fork(sid, 0, f"{sid}-f{i}").id for i in range(3)]
    first = client.stub.ListSessions(pb.ListSessionsRequest(page_size=1, parent_session_id=sid))
    assert [s.id for s in first.sessions] == forks[:1] and first.next_page_token
    unfiltered = client.stub.ListSessions(pb.ListSessionsRequest(page_size=1))
    assert unfiltered.next_page_token
    mismatched = [
        pb.ListSessionsRequest(page_size=1, page_token=first.next_page_token, parent_session_id=other),
        pb.ListSessionsRequest(page_size=1, page_token=first.next_page_token),
        pb.ListSessionsRequest(page_size=1, page_token=unfiltered.next_page_token, parent_session_id=sid),
    ]
    for request in mismatched:
        with pytest.raises(grpc.RpcError) as refused:
            client.stub.ListSessions(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        error = from_rpc_error(refused.value)
        assert error.reason == "BAD_PAGE_TOKEN" and error.metadata["field"] == "page_token"
        assert "parent_session_id" in error.message
    # With its own filter the token goes on where it left off.
    second = client.stub.ListSessions(
        pb.ListSessionsRequest(page_size=2, page_token=first.next_page_token, parent_session_id=sid)
    )
    assert [s.id for s in second.sessions] == forks[1:] and not second.next_page_token
